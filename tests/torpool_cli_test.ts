/**
 * The Tor pool role on the command line: `flags` and `check` know a pool config, the other verbs
 * refuse it, `deno task torpool` runs under exactly the flags derived from the config it serves,
 * the audit accepts exactly the run grant for the Tor binary (and refuses it unscoped, for anything
 * else, or missing), and `portcullis torpool` under exactly its derived flags serves the API on its
 * socket (mode 0600) and takes every Tor process down on SIGTERM.
 *
 * @module
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { auditPermissions, type PermissionQuery } from "../src/boot/audit.ts";
import { formatFlags } from "../src/boot/flags.ts";
import { torpoolGrants } from "../src/cli/torpool.ts";
import type { PoolConfig } from "../src/torpool/config.ts";
import { assertDerivedTask, assertTaskExpands } from "./fixtures/derived_task.ts";
import { READ_ONLY, runCli, runMain } from "./fixtures/gateway.ts";
import { freeRanges, makePoolDir, type PoolDir, waitFor } from "./fixtures/torpool_harness.ts";
import { unixRequest } from "./fixtures/unix_request.ts";

const ROOT = new URL("../", import.meta.url).pathname;
const MAIN = join(ROOT, "main.ts");

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

/** A pool.yaml in `where` whose Tor is the double, with short timings. */
async function writePoolYaml(where: PoolDir, extra = ""): Promise<string> {
  const ports = freeRanges(2);
  const file = join(where.dir, "pool.yaml");
  await Deno.writeTextFile(
    file,
    `role: torpool\ntor_binary: ${where.tor}\ndata_dir: data\napi_socket: run/pool.sock\n` +
      `socks_base_port: ${ports.socks}\ncontrol_base_port: ${ports.control}\n` +
      `min_instances: 2\nmax_instances: 2\nprobe_interval_ms: 300\ndead_refusal_ms: 2000\n${extra}`,
  );
  return file;
}

Deno.test("cli flags: deno task torpool carries exactly the flags of deploy/example/pool.yaml", async () => {
  const tasks = JSON.parse(await Deno.readTextFile(join(ROOT, "deno.json"))).tasks;
  const result = await cli(["flags", "deploy/example/pool.yaml"]);
  assert.equal(result.code, 0, result.stderr);
  assertDerivedTask(tasks, "torpool", {
    fixed: ["--no-prompt"],
    verb: "torpool",
    config: "deploy/example/pool.yaml",
  });
  await assertTaskExpands(tasks, "torpool", ROOT, result.stdout);
  assert.match(result.stdout, / --allow-run=\/usr\/sbin\/tor /);
  assert.match(
    result.stdout,
    /--allow-net=127\.0\.0\.1:19050,.*127\.0\.0\.1:19153,unix:\/tmp\/portcullis-torpool\/pool\.sock /,
  );
  assert.match(tasks.torpool.command, / main\.ts torpool deploy\/example\/pool\.yaml$/);
});

Deno.test("cli check: a pool config is summarised; a missing Tor binary is a problem", async () => {
  const where = await makePoolDir();
  try {
    const file = await writePoolYaml(where);
    const good = await cli(["check", file]);
    assert.equal(good.code, 0, good.stderr);
    assert.match(good.stdout, /is valid\n {2}tor pool: 2–2 instances of .*tor-double\n/);
    assert.match(good.stdout, /permissions: --allow-net=.* --allow-run=.*tor-double --ignore-env/);
    await Deno.writeTextFile(
      file,
      (await Deno.readTextFile(file)).replace(where.tor, "/nonexistent/tor"),
    );
    const bad = await cli(["check", file]);
    assert.equal(bad.code, 1);
    assert.match(
      bad.stderr,
      /pool\.yaml: tor_binary: No executable file at this path \(Debian: apt-get install tor\) \(got "\/nonexistent\/tor"\)/,
    );
    const wrongVerb = await cli(["serve", file]);
    assert.equal(wrongVerb.code, 2);
    assert.match(
      wrongVerb.stderr,
      /is a Tor pool config \(role: torpool\); run: portcullis torpool /,
    );
    const notPool = await cli(["torpool", "deploy/example/hub.yaml"]);
    assert.equal(notPool.code, 2);
    assert.match(notPool.stderr, /is not a Tor pool config \(a pool config says role: torpool\)/);
  } finally {
    await Deno.remove(where.dir, { recursive: true });
  }
});

/** A query holding exactly `flags`-like grants: `run` as listed, everything else as derived. */
function holding(config: PoolConfig, run: true | readonly string[] | undefined): PermissionQuery {
  const grants = torpoolGrants(config);
  return (descriptor) => {
    if (descriptor.name === "run") {
      if (run === true) return "granted";
      return descriptor.command !== undefined && run?.includes(String(descriptor.command))
        ? "granted"
        : "prompt";
    }
    const value = "host" in descriptor
      ? descriptor.host
      : "path" in descriptor
      ? String(descriptor.path)
      : undefined;
    if (value === undefined) return "prompt";
    const held = grants.filter((g) => g.name === descriptor.name).map((g) => g.value);
    return held.some((h) => value === h || value.startsWith(`${h}/`)) ? "granted" : "prompt";
  };
}

Deno.test("auditPermissions() accepts exactly the Tor binary's run grant for the pool role", () => {
  const config = {
    file: "/etc/pool.yaml",
    torBinary: "/usr/sbin/tor",
    dataDir: "/var/lib/pool",
    apiSocket: "/run/pool/api.sock",
    listen: "127.0.0.1",
    socksBasePort: 9050,
    controlBasePort: 9150,
    minInstances: 1,
    maxInstances: 2,
  } as PoolConfig;
  const grants = torpoolGrants(config);
  assert.match(formatFlags(grants), / --allow-run=\/usr\/sbin\/tor --ignore-env=/);
  assert.deepEqual(auditPermissions(grants, holding(config, ["/usr/sbin/tor"])).refusals, []);
  assert.deepEqual(auditPermissions(grants, holding(config, true)).refusals, [
    "--allow-run grants running programs (unscoped); the config needs --allow-run=/usr/sbin/tor",
  ]);
  assert.deepEqual(
    auditPermissions(grants, holding(config, ["/usr/sbin/tor", "/bin/sh", "python3"])).refusals,
    [
      "--allow-run reaches /bin/sh, python3, which the config does not need; the config needs " +
      "--allow-run=/usr/sbin/tor",
    ],
  );
  assert.deepEqual(auditPermissions(grants, holding(config, ["/usr/bin/tor"])).refusals, [
    "--allow-run reaches /usr/bin/tor, which the config does not need; the config needs " +
    "--allow-run=/usr/sbin/tor",
    "Missing --allow-run=/usr/sbin/tor (needed by the Tor binary)",
  ]);
  assert.deepEqual(auditPermissions(grants, holding(config, [])).refusals, [
    "Missing --allow-run=/usr/sbin/tor (needed by the Tor binary)",
  ]);
});

Deno.test("auditPermissions() still refuses a Tor run grant to a role that runs nothing", () => {
  const query: PermissionQuery = (d) =>
    d.name === "run" && d.command === "/usr/sbin/tor" ? "granted" : "prompt";
  assert.deepEqual(auditPermissions([], query).refusals, [
    "--allow-run reaches /usr/sbin/tor, which the config does not need; the config needs no " +
    "--allow-run",
  ]);
});

Deno.test("portcullis torpool runs under exactly its derived flags and stops every Tor on SIGTERM", async () => {
  const where = await makePoolDir();
  const file = await writePoolYaml(where);
  const socket = join(where.dir, "run", "pool.sock");
  try {
    const derived = await runCli(READ_ONLY, ["flags", file]);
    assert.equal(derived.code, 0, derived.stderr);
    const flags = derived.stdout.trim().split(" ");
    assert.ok(flags.includes(`--allow-run=${where.tor}`), flags.join(" "));

    const extra = await runCli([
      ...flags.map((f) => f.startsWith("--allow-run=") ? `${f},/bin/sh` : f),
    ], [
      "torpool",
      file,
    ]);
    assert.equal(extra.code, 1);
    assert.match(
      extra.stderr,
      /--allow-run reaches [^\n]*\/bin\/sh, which the config does not need/,
    );

    const child = new Deno.Command(Deno.execPath(), {
      args: ["run", "--no-prompt", ...flags, MAIN, "torpool", file],
      stdin: "null",
      stdout: "null",
      stderr: "piped",
    }).spawn();
    const stderr = new Response(child.stderr).text();
    let pids: number[] = [];
    try {
      const health = await waitFor("the pool healthy on its socket", async () => {
        try {
          const reply = await unixRequest(socket, "/health");
          return reply.startsWith("HTTP/1.1 200 ") && reply.includes('"status":"ok"') && reply;
        } catch {
          return false;
        }
      }, 30_000);
      assert.match(health, /"status":"ok","live":2,"instances":2/);
      assert.equal((await Deno.stat(socket)).mode! & 0o777, 0o600);
      const stats = JSON.parse((await unixRequest(socket, "/stats")).split("\r\n\r\n")[1]);
      pids = stats.each.map((i: { pid: number }) => i.pid);
      assert.equal(pids.length, 2);
      const backends = await unixRequest(socket, "/backends");
      assert.match(backends, /"backends":\[\{"index":0,"host":"127\.0\.0\.1","port":\d+/);
    } finally {
      child.kill("SIGTERM");
    }
    const status = await child.status;
    const said = await stderr;
    assert.equal(status.code, 0, said);
    assert.match(said, /torpool ready: 2–2 Tor instances/);
    assert.match(said, /torpool stopped/);
    for (const pid of pids) {
      // Signalling a pid that is gone fails (ESRCH); SIGCONT is harmless to one that is not.
      assert.throws(() => Deno.kill(pid, "SIGCONT"), `Tor ${pid} still runs`);
    }
    await assert.rejects(() => Deno.lstat(socket), Deno.errors.NotFound, "socket removed on exit");
  } finally {
    await Deno.remove(where.dir, { recursive: true });
  }
});
