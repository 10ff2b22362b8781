/**
 * `serve` as a subprocess, the way an operator runs it: the permission audit (ambient authority,
 * a missing listener grant), bind failures, a boot with the derived flags, and a clean SIGTERM exit.
 * Everything a server writes on stderr is a JSON line with `time`, `level` and `msg`
 * (src/observe/diag.ts), its refusals included; the assertions read the messages.
 *
 * @module
 */
import assert from "node:assert/strict";
import denoJson from "../deno.json" with { type: "json" };
import {
  derivedFlags,
  freePorts,
  Gateway,
  type LanePorts,
  proofConfig,
  writeConfig,
} from "./fixtures/gateway.ts";
import { json, request } from "./fixtures/http_client.ts";
import { connectionRefused } from "./fixtures/in_process.ts";
import { diagLines, messages } from "./fixtures/diag_lines.ts";

const MAIN = new URL("../main.ts", import.meta.url).pathname;

function lanePorts(): LanePorts {
  const [p, l, h] = freePorts(3);
  return { public: p, local_health: l, provider_health: h };
}

interface BoundedRun {
  readonly code: number;
  readonly stderr: string;
  /** True when `watchPort` accepted a connection while the process ran. */
  readonly bound: boolean;
  /** How many times `watchPort` was probed while the process ran. */
  readonly probes: number;
}

/**
 * Runs `main.ts serve <config>` expecting it to exit on its own (killed after 8 s), probing
 * `watchPort` the whole time it runs.
 */
async function serveUntilExit(
  flags: readonly string[],
  config: string,
  watchPort: number,
): Promise<BoundedRun> {
  const child = new Deno.Command(Deno.execPath(), {
    args: ["run", "--no-prompt", ...flags, MAIN, "serve", config],
    stdin: "null",
    stdout: "null",
    stderr: "piped",
    env: { NO_COLOR: "1" },
  }).spawn();
  const watchdog = setTimeout(() => child.kill("SIGKILL"), 8000);
  let exited = false;
  const output = child.output().finally(() => exited = true);
  let bound = false;
  let probes = 0;
  while (!exited) {
    probes++;
    if (!(await connectionRefused(watchPort))) bound = true;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  const result = await output;
  clearTimeout(watchdog);
  return { code: result.code, stderr: new TextDecoder().decode(result.stderr), bound, probes };
}

Deno.test("cli serve: -A or --allow-all refuses to boot and never binds a port", async () => {
  const ports = lanePorts();
  const dir = await writeConfig(proofConfig(ports));
  try {
    for (const flag of ["-A", "--allow-all"]) {
      const run = await serveUntilExit([flag], dir.config, ports.public);
      assert.equal(run.code, 1, run.stderr);
      const said = messages(run.stderr);
      assert.match(said, /^Unscoped --allow-net \(or -A\) grants every host/m);
      assert.match(said, /^--allow-run grants running programs/m);
      assert.match(said, /^boot refused; run with: deno run --allow-net=/m);
      assert.doesNotMatch(said, /listening|ready/);
      assert.equal(diagLines(run.stderr).at(-1)?.level, "error");
      assert.ok(run.probes > 0, "the port was probed while the process ran");
      assert.equal(run.bound, false, `${flag}: the public port was never bound`);
    }
  } finally {
    await Deno.remove(dir.dir, { recursive: true });
  }
});

Deno.test("cli serve: the derived flags boot a gateway that answers on every lane", async () => {
  const ports = lanePorts();
  const gateway = await Gateway.start(await writeConfig(proofConfig(ports)), ports);
  try {
    const home = await request(ports.public, { path: "/", headers: [["Host", "demo.test"]] });
    assert.equal(home.status, 200);
    assert.equal(home.body, "tenant-home");
    const probe = await request(ports.provider_health, { path: "/healthz" });
    assert.equal(probe.body, "ok\n");
    const health = json(await request(ports.local_health, { path: "/v1/health" }));
    assert.equal(health.version, denoJson.version);
    assert.equal(health.status, "ok");
    const ledger = await gateway.ledgerWhen((r) =>
      r.outstanding === 0 && r.completed + r.cancelled === r.admitted
    );
    assert.equal(ledger.lanes.public.admitted, 1);
    assert.equal(ledger.lanes.provider_health.admitted, 1);
    assert.doesNotMatch(gateway.stderr, /warning/, "the derived flags hold no broad grant");
  } finally {
    await gateway.dispose();
  }
});

Deno.test("cli serve: a missing listener grant refuses, naming the flag and the lane", async () => {
  const ports = lanePorts();
  const dir = await writeConfig(proofConfig(ports));
  try {
    const missing = `127.0.0.1:${ports.provider_health}`;
    const flags = (await derivedFlags(dir.config)).map((flag) =>
      flag.startsWith("--allow-net=") ? flag.replace(`,${missing}`, "") : flag
    );
    assert.ok(!flags.join(" ").includes(missing));
    const run = await serveUntilExit(flags, dir.config, ports.public);
    assert.equal(run.code, 1, run.stderr);
    assert.match(
      messages(run.stderr),
      new RegExp(
        `^Missing --allow-net=127\\.0\\.0\\.1:${ports.provider_health} ` +
          `\\(needed by the lane "provider_health" listener\\)$`,
        "m",
      ),
    );
    assert.equal(run.bound, false);
  } finally {
    await Deno.remove(dir.dir, { recursive: true });
  }
});

Deno.test("cli serve: a port already in use exits 1 naming the lane, and frees the others", async () => {
  const ports = lanePorts();
  const dir = await writeConfig(proofConfig(ports));
  const busy = Deno.listen({ hostname: "127.0.0.1", port: ports.provider_health });
  try {
    const run = await serveUntilExit(
      await derivedFlags(dir.config),
      dir.config,
      ports.local_health,
    );
    assert.equal(run.code, 1, run.stderr);
    const said = messages(run.stderr);
    assert.match(
      said,
      new RegExp(
        `^Cannot bind lane "provider_health" on 127\\.0\\.0\\.1:` +
          `${ports.provider_health}: address already in use$`,
        "m",
      ),
    );
    assert.match(said, /^boot refused$/m);
    assert.doesNotMatch(said, /^ready/m);
    // The refusal is JSON like every other line, at level error.
    const refused = diagLines(run.stderr).filter((line) => line.msg === "boot refused");
    assert.equal(refused.length, 1);
    assert.equal(refused[0].level, "error");
    assert.equal(await connectionRefused(ports.public), true, "public was released");
    assert.equal(await connectionRefused(ports.local_health), true);
  } finally {
    busy.close();
    await Deno.remove(dir.dir, { recursive: true });
  }
});

Deno.test("cli serve: SIGTERM drains and exits 0", async () => {
  const ports = lanePorts();
  const gateway = await Gateway.start(await writeConfig(proofConfig(ports)), ports);
  try {
    const home = await request(ports.public, { path: "/", headers: [["Host", "demo.test"]] });
    assert.equal(home.status, 200);
    const status = await gateway.stop("SIGTERM");
    assert.equal(status.code, 0, gateway.stderr);
    assert.equal(status.success, true);
    assert.match(messages(gateway.stderr), /^draining: public admission stopped$/m);
    assert.match(messages(gateway.stderr), /^drained$/m);
    assert.equal(await connectionRefused(ports.public), true);
    assert.equal(await connectionRefused(ports.local_health), true);
  } finally {
    await gateway.dispose();
  }
});

Deno.test("cli serve: every stderr line of a booted edge is JSON with time, level and msg", async () => {
  const ports = lanePorts();
  const gateway = await Gateway.start(await writeConfig(proofConfig(ports)), ports);
  try {
    await request(ports.public, { path: "/", headers: [["Host", "demo.test"]] });
    await gateway.stop("SIGTERM");
    const logged = diagLines(gateway.stderr);
    assert.ok(logged.length >= 4, gateway.stderr);
    for (const line of logged) {
      assert.deepEqual(Object.keys(line).slice(0, 3), ["time", "level", "msg"]);
      assert.equal(new Date(line.time).toISOString(), line.time, "ISO 8601 time");
      assert.ok(!line.msg.startsWith("portcullis:"), line.msg);
    }
    const ready = logged.find((line) => line.msg.startsWith("ready: node "));
    assert.equal(ready?.level, "info");
    // The public request worker's lines say which worker wrote them.
    const listening = logged.filter((line) => /lane "public" listening on /.test(line.msg));
    assert.deepEqual(listening.map((line) => line.worker), [1]);
    assert.ok(logged.some((line) => line.msg === "drained"));
  } finally {
    await gateway.dispose();
  }
});
