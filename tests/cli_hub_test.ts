/**
 * The command line for hubs, remote edges and runtime folders: `check` and `flags` on a hub config,
 * `check` on a folder, the verbs refused on the wrong kind of file, and the `deno.json` tasks that
 * run the example hub, remote edge and door under exactly the flags derived from the config each
 * serves.
 *
 * @module
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { runMain } from "./fixtures/gateway.ts";
import { tenantsDir } from "./fixtures/config_files.ts";
import { assertDerivedTask, assertTaskExpands } from "./fixtures/derived_task.ts";

const ROOT = new URL("../", import.meta.url).pathname;

/**
 * Runs the CLI's `main` in this process from the repository root, so paths print as the README
 * shows them (`tests/cli_test.ts` runs the command as a process).
 */
async function cli(args: string[]) {
  const before = Deno.cwd();
  Deno.chdir(ROOT);
  try {
    return await runMain(args);
  } finally {
    Deno.chdir(before);
  }
}

/**
 * The example's node tokens, written (0600) where they are missing and removed again on dispose;
 * tokens an operator already made are left alone.
 */
async function exampleTokens(): Promise<AsyncDisposable> {
  const made: string[] = [];
  for (const node of ["example-remote-edge", "example-door"]) {
    const file = join(ROOT, "deploy/example/tokens", `${node}.token`);
    if (await Deno.lstat(file).then(() => true, () => false)) continue;
    await Deno.writeTextFile(file, `${crypto.randomUUID()}\n`, { mode: 0o600, createNew: true });
    made.push(file);
  }
  return {
    async [Symbol.asyncDispose]() {
      for (const file of made) await Deno.remove(file).catch(() => {});
    },
  };
}

Deno.test("cli check: a hub config is validated with its runtime folder", async () => {
  const result = await cli(["check", "deploy/example/hub.yaml"]);
  assert.equal(result.code, 0, result.stderr);
  const lines = result.stdout.trim().split("\n");
  assert.equal(lines[0], "portcullis: deploy/example/hub.yaml is valid");
  assert.ok(
    lines.includes("  api: 127.0.0.1:9443 (tokens in deploy/example/tokens)"),
    result.stdout,
  );
  assert.match(
    result.stdout,
    /runtime folder deploy\/example\/tenants: 1 tenants, 2 files, hash [0-9a-f]{12}/,
  );
  assert.match(result.stdout, /^ {4}demo\.localhost$/m);
});

Deno.test("cli flags: the example hub, remote edge and door tasks carry exactly the derived flags (compile: tests/deploy_test.ts)", async () => {
  const tasks = JSON.parse(await Deno.readTextFile(join(ROOT, "deno.json"))).tasks;
  // `flags` refuses a remote edge or door whose token file is missing (as `check` does): the
  // tokens an operator makes first (deploy/example/tokens/README.md), made here for the run.
  await using _tokens = await exampleTokens();
  const v8 = "--v8-flags=--max-semi-space-size=1,--no-concurrent-array-buffer-sweeping";
  for (
    const [task, verb, config, fixed] of [
      ["hub", "hub", "deploy/example/hub.yaml", ["--no-prompt"]],
      ["start:remote", "serve", "deploy/example/remote-edge.yaml", ["--no-prompt", v8]],
      ["door", "serve", "deploy/example/door.yaml", ["--no-prompt"]],
    ] as const
  ) {
    // No permission flag written in the task: those of the config it serves, derived as it runs.
    assertDerivedTask(tasks, task, { fixed, verb, config });
    const result = await cli(["flags", config]);
    assert.equal(result.code, 0, result.stderr);
    await assertTaskExpands(tasks, task, ROOT, result.stdout);
  }
  const hub = (await cli(["flags", "deploy/example/hub.yaml"])).stdout.trim();
  assert.equal(
    hub,
    "--allow-net=127.0.0.1:9443,127.0.0.1:9444 " +
      "--allow-read=deploy/example/hub.yaml,deploy/example/tenants,deploy/example/tokens," +
      "deploy/example/mirrors,deploy/example/doors.yaml,/etc/hosts " +
      "--allow-sys=hostname,networkInterfaces --ignore-env=LOG_STREAM,LOG_TOKENS",
  );
  const remote = (await cli(["flags", "deploy/example/remote-edge.yaml"])).stdout.trim();
  assert.match(remote, /^--allow-net=127\.0\.0\.1:8081,127\.0\.0\.1:9911,127\.0\.0\.1:9443 /);
  assert.match(remote, / --allow-write=deploy\/example\/cache /);
});

Deno.test("cli check: a runtime folder alone is validated, every problem named", async () => {
  const good = await cli(["check", "deploy/example/tenants"]);
  assert.equal(good.code, 0, good.stderr);
  assert.match(good.stdout, /^portcullis: deploy\/example\/tenants is valid$/m);
  const dir = await tenantsDir({
    "a.test.yaml": "host: a.test\nroutes:\n  - match: { path: / }\n    respond: { status: 999 }\n",
    "b.test.yaml": "host: a.test\nroutes: []\n",
  });
  try {
    const bad = await cli(["check", dir]);
    assert.equal(bad.code, 1);
    assert.match(bad.stderr, /a\.test\.yaml:4:\d+: routes\[0\]\.respond\.status: .* \(got 999\)/);
    assert.match(bad.stderr, /b\.test\.yaml.*a\.test/);
    assert.match(bad.stderr, /nothing was started/);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("cli: serve refuses a hub config, hub refuses an edge config (exit 2, the right verb named)", async () => {
  const serve = await cli(["serve", "deploy/example/hub.yaml"]);
  assert.equal(serve.code, 2);
  assert.match(
    serve.stderr,
    /is a hub config \(role: hub\); run: portcullis hub deploy\/example\/hub\.yaml/,
  );
  const hub = await cli(["hub", "deploy/example/config.yaml"]);
  assert.equal(hub.code, 2);
  assert.match(hub.stderr, /is not a hub config/);
});
