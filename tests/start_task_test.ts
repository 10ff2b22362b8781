/**
 * Starting and running the gateway as the README says: `deno task start` derives its permission
 * flags from the config it starts (so a config edited to use `egress.socks` still boots, where
 * the flags written for the example refuse it), `scripts/portcullis` becomes the gateway (SIGTERM
 * to the PID that was started drains it), `npx … task` passes SIGTERM on to the gateway, and
 * SIGHUP reloads the runtime set. Each run is a copy of the example config on free ports.
 *
 * @module
 */
import assert from "node:assert/strict";
import { parse, stringify } from "yaml";
import { freePorts, MAIN } from "./fixtures/gateway.ts";
import { json, request } from "./fixtures/http_client.ts";
import { eventually, portClosed, ServedProcess } from "./fixtures/served_process.ts";

const ROOT = new URL("../", import.meta.url).pathname;
const EXAMPLE = `${ROOT}deploy/example`;
const READY = /ready: node example-edge/;
const DEMO: [string, string][] = [["Host", "demo.localhost"]];

/** A copy of the example edge on free ports, in a temp folder. */
interface ExampleCopy {
  readonly dir: string;
  readonly config: string;
  readonly ports: { public: number; local_health: number; provider_health: number };
  /** Rewrites the config with `edit` applied to it. */
  edit(edit: (config: Record<string, unknown>) => void): Promise<void>;
  /** The `deno.json` of a task `start` as the repository spells it, aimed at this copy. */
  startTask(): Promise<string>;
}

async function exampleCopy(): Promise<ExampleCopy> {
  const dir = await Deno.makeTempDir({ prefix: "portcullis-start-" });
  await Deno.mkdir(`${dir}/tenants`);
  for (const entry of Deno.readDirSync(`${EXAMPLE}/tenants`)) {
    await Deno.copyFile(`${EXAMPLE}/tenants/${entry.name}`, `${dir}/tenants/${entry.name}`);
  }
  const [pub, local, provider] = freePorts(3);
  const ports = { public: pub, local_health: local, provider_health: provider };
  const config = `${dir}/config.yaml`;
  let document = parse(await Deno.readTextFile(`${EXAMPLE}/config.yaml`));
  for (const [lane, port] of Object.entries(ports)) {
    document.lanes[lane].listen = [{ hostname: "127.0.0.1", port }];
  }
  document.drain = { lame_duck_ms: 0 };
  const write = () => Deno.writeTextFile(config, stringify(document));
  await write();
  return {
    dir,
    config,
    ports,
    async edit(edit) {
      document = structuredClone(document);
      edit(document);
      await write();
    },
    async startTask() {
      const task = JSON.parse(await Deno.readTextFile(`${ROOT}deno.json`)).tasks.start;
      // A task is a command, or an object with a description and its command.
      const command: string = typeof task === "string" ? task : task.command;
      const start = command.replaceAll("deploy/example/config.yaml", config)
        .replaceAll("main.ts", MAIN);
      const file = `${dir}/deno.json`;
      await Deno.writeTextFile(file, JSON.stringify({ tasks: { start } }));
      return file;
    },
  };
}

/** Runs `body` with a copy of the example, then removes it. */
async function withCopy(body: (copy: ExampleCopy) => Promise<void>): Promise<void> {
  const copy = await exampleCopy();
  try {
    await body(copy);
  } finally {
    await Deno.remove(copy.dir, { recursive: true }).catch(() => {});
  }
}

/** The flags `main.ts flags` prints for `config`, as separate arguments. */
async function flagsOf(config: string): Promise<string[]> {
  const output = await new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "--no-prompt",
      "--allow-read",
      "--ignore-env=LOG_STREAM,LOG_TOKENS",
      MAIN,
      "flags",
    ]
      .concat(config),
    stdout: "piped",
    stderr: "piped",
  }).output();
  assert.equal(output.code, 0, new TextDecoder().decode(output.stderr));
  return new TextDecoder().decode(output.stdout).trim().split(" ");
}

/** The PIDs of processes whose command line names `needle` (this test's temp folder). */
function processesNaming(needle: string): number[] {
  const found = new Deno.Command("pgrep", { args: ["-f", needle], stdout: "piped" }).outputSync();
  return new TextDecoder().decode(found.stdout).split("\n").filter(Boolean).map(Number);
}

/** The command line of `pid`, as `ps` shows it. */
function commandOf(pid: number): string {
  const found = new Deno.Command("ps", { args: ["-o", "args=", "-p", `${pid}`], stdout: "piped" })
    .outputSync();
  return new TextDecoder().decode(found.stdout).trim();
}

/** Kills what a test started and may have left behind (its folder is in the command line). */
function killLeftovers(needle: string): void {
  for (const pid of processesNaming(needle)) {
    try {
      Deno.kill(pid, "SIGKILL");
    } catch { /* gone */ }
  }
}

Deno.test("deno task start: flags follow the config; egress.socks boots where the example's refused", async () => {
  await withCopy(async (copy) => {
    const exampleFlags = await flagsOf(copy.config);
    const [socksPort] = freePorts(1);
    await copy.edit((config) => {
      config.egress = { socks: [{ hostname: "127.0.0.1", port: socksPort }] };
    });

    const old = await new Deno.Command(Deno.execPath(), {
      args: ["run", "--no-prompt", ...exampleFlags, MAIN, "serve", copy.config],
      stdout: "null",
      stderr: "piped",
    }).output();
    assert.equal(old.code, 1, "the example's own flags refuse the edited config");
    assert.match(new TextDecoder().decode(old.stderr), new RegExp(`127\\.0\\.0\\.1:${socksPort}`));

    const task = new ServedProcess(Deno.execPath(), [
      "task",
      "--config",
      await copy.startTask(),
      "start",
    ]);
    try {
      await task.line(READY);
      const home = await request(copy.ports.public, { path: "/", headers: DEMO });
      assert.equal(home.status, 200);
      task.signal("SIGTERM");
      const status = await task.exit(15_000);
      assert.equal(status?.code, 0, `deno task passed SIGTERM on:\n${task.stderr}`);
      assert.ok(await portClosed(copy.ports.public));
    } finally {
      await task.dispose();
      killLeftovers(copy.dir);
    }
  });
});

Deno.test("scripts/portcullis becomes the gateway: SIGTERM to its PID drains it, lame duck first", async () => {
  await withCopy(async (copy) => {
    const windowMs = 4000;
    await copy.edit((config) => config.drain = { lame_duck_ms: windowMs });
    const launcher = new ServedProcess(`${ROOT}scripts/portcullis`, ["serve", copy.config], {
      cwd: copy.dir,
      env: { DENO: Deno.execPath() },
    });
    try {
      await launcher.line(READY);
      const cmdline = commandOf(launcher.child.pid);
      assert.match(cmdline, /main\.ts serve /, "the launcher's PID runs main.ts itself");
      assert.match(cmdline, /--allow-net=127\.0\.0\.1:\d+/, "under derived flags");
      const home = await request(copy.ports.public, { path: "/", headers: DEMO });
      assert.equal(home.status, 200);
      const signalled = performance.now();
      launcher.signal("SIGTERM");
      const readyz = () => request(copy.ports.local_health, { path: "/readyz" });
      assert.ok(await eventually(async () => (await readyz()).status === 503, 2000));
      const health = json(await request(copy.ports.local_health, { path: "/v1/health" }));
      assert.deepEqual([health.status, health.ready], ["draining", false]);
      const during = await request(copy.ports.public, { path: "/", headers: DEMO });
      const inWindow = performance.now() - signalled;
      assert.equal(during.status, 200, "the public lane serves through the lame-duck window");
      assert.ok(inWindow < windowMs, `checked ${inWindow} ms after SIGTERM: past the window`);
      assert.ok(await eventually(() => portClosed(copy.ports.public), 15_000));
      const closedAfter = performance.now() - signalled;
      assert.ok(closedAfter >= windowMs - 100, `public closed ${closedAfter} ms after SIGTERM`);
      assert.equal((await launcher.exit(10_000))?.code, 0);
    } finally {
      await launcher.dispose();
      killLeftovers(copy.dir);
    }
  });
});

Deno.test("POST /v1/drain with nothing in flight is answered before the process exits 0", async () => {
  await withCopy(async (copy) => {
    const token = "start-task-admin-token-0123456789";
    await Deno.writeTextFile(`${copy.dir}/admin.token`, `${token}\n`, { mode: 0o600 });
    await Deno.chmod(`${copy.dir}/admin.token`, 0o600);
    await copy.edit((config) => config.admin = { token_file: "admin.token" });
    const launcher = new ServedProcess(`${ROOT}scripts/portcullis`, ["serve", copy.config], {
      cwd: copy.dir,
      env: { DENO: Deno.execPath() },
    });
    try {
      await launcher.line(READY);
      const drain = await request(copy.ports.local_health, {
        method: "POST",
        path: "/v1/drain",
        headers: [["Authorization", `Bearer ${token}`]],
      });
      assert.equal(drain.status, 202);
      assert.deepEqual(json(drain), { draining: true, active_requests: 0 });
      assert.equal((await launcher.exit(10_000))?.code, 0);
    } finally {
      await launcher.dispose();
      killLeftovers(copy.dir);
    }
  });
});

const NPX = new Deno.Command("sh", { args: ["-c", "command -v npx && test -x /bin/bash"] })
  .outputSync().code === 0;

Deno.test({
  name: "npx deno task: SIGTERM to the npx process reaches the gateway (the repository's .npmrc)",
  ignore: !NPX,
  async fn() {
    await withCopy(async (copy) => {
      // Run from the repository root, so npm reads its .npmrc; the task is the copy's.
      const npx = new ServedProcess(
        "npx",
        ["--yes", "deno@2.9.6", "task", "--config", await copy.startTask(), "start"],
        { cwd: ROOT },
      );
      try {
        await npx.line(READY, 60_000);
        npx.signal("SIGTERM");
        assert.ok(
          await eventually(() => portClosed(copy.ports.public), 15_000),
          `the gateway still listens after SIGTERM to npx:\n${npx.stderr}`,
        );
        assert.ok(
          await eventually(() => Promise.resolve(processesNaming(copy.config).length === 0), 5000),
          "no deno task or gateway left behind",
        );
      } finally {
        await npx.dispose();
        killLeftovers(copy.dir);
      }
    });
  },
});

Deno.test("SIGHUP reloads the runtime set: an edited tenant file becomes the next generation", async () => {
  await withCopy(async (copy) => {
    // No folder watch: only the signal can bring the edit in.
    await copy.edit((config) => config.runtime = { watch: false });
    const launcher = new ServedProcess(`${ROOT}scripts/portcullis`, ["serve", copy.config], {
      cwd: copy.dir,
      env: { DENO: Deno.execPath() },
    });
    try {
      await launcher.line(READY);
      const tenant = `${copy.dir}/tenants/demo.localhost.yaml`;
      const before = (await request(copy.ports.public, { path: "/", headers: DEMO })).body;
      const text = await Deno.readTextFile(tenant);
      assert.ok(text.includes("Hello from Portcullis."), text);
      await Deno.writeTextFile(
        `${tenant}.tmp`,
        text.replace("Hello from Portcullis.", "Reloaded."),
      );
      await Deno.rename(`${tenant}.tmp`, tenant);
      await new Promise((resolve) => setTimeout(resolve, 300));
      assert.equal(
        (await request(copy.ports.public, { path: "/", headers: DEMO })).body,
        before,
        "nothing reloads by itself with watch off",
      );

      launcher.signal("SIGHUP");
      await launcher.line(/config generation 2 loaded/, 10_000);
      assert.ok(
        await eventually(async () => {
          const home = await request(copy.ports.public, { path: "/", headers: DEMO });
          return home.body.includes("Reloaded.");
        }, 5000),
      );
      launcher.signal("SIGHUP");
      await launcher.line(/config unchanged; generation 2 stays live/, 10_000);
      launcher.signal("SIGTERM");
      assert.equal((await launcher.exit(10_000))?.code, 0);
    } finally {
      await launcher.dispose();
      killLeftovers(copy.dir);
    }
  });
});
