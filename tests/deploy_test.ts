/**
 * The deploy kit against the code: the committed systemd units are what `scripts/unit.ts` prints
 * for the example configs, their permission line is what `main.ts flags` prints, they carry the
 * hardening they promise, and `scripts/compile.ts` (and the deno.json compile tasks) bake exactly
 * the flags `main.ts flags` derives. Everything runs as a subprocess, as an operator would run it.
 *
 * @module
 */
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { parse } from "yaml";
import { renderUnit } from "../scripts/unit.ts";

const ROOT = fileURLToPath(new URL("../", import.meta.url));
const EXAMPLE = `${ROOT}deploy/example`;
const SYSTEMD = `${ROOT}deploy/systemd`;
const READ = ["--no-prompt", "--allow-read", "--ignore-env=LOG_STREAM,LOG_TOKENS"];

interface Run {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
}

async function deno(args: readonly string[], cwd: string = ROOT): Promise<Run> {
  const output = await new Deno.Command(Deno.execPath(), {
    args: [...args],
    cwd,
    stdout: "piped",
    stderr: "piped",
    env: { NO_COLOR: "1" },
  }).output();
  const text = new TextDecoder();
  return {
    code: output.code,
    stdout: text.decode(output.stdout),
    stderr: text.decode(output.stderr),
  };
}

/** What `main.ts flags <config>` prints, run in `cwd`. */
async function mainFlags(config: string, cwd: string): Promise<string> {
  const run = await deno(["run", ...READ, `${ROOT}main.ts`, "flags", config], cwd);
  assert.equal(run.code, 0, run.stderr);
  assert.match(
    run.stdout,
    /^--allow-net=\S+ --allow-read=\S+ --allow-sys=hostname,networkInterfaces --ignore-env=\S+\n$/,
  );
  return withoutWorkerCode(run.stdout.trimEnd());
}

/**
 * Flags without the read grants for the checkout's `src` and `lanes` folders, which `main.ts`
 * needs for its request worker and a compiled binary does not (its modules are inside it).
 */
function withoutWorkerCode(flags: string): string {
  const code = new Set([`${ROOT}src`, `${ROOT}lanes`, "src", "lanes"]);
  return flags.replace(/--allow-read=(\S+)/, (_, list: string) => {
    const kept = list.split(",").filter((path) => !code.has(path));
    return `--allow-read=${kept.join(",")}`;
  });
}

/** The permission flags of a command line (`--allow-*`, `--deny-*`, `--ignore-env`, `-A`). */
function permissionFlags(tokens: readonly string[]): string {
  return tokens.filter((t) => /^(--allow-|--deny-|--ignore-env|-A$)/.test(t)).join(" ");
}

/** A unit file's `[Service]` directives: each key with every value it was given, in order. */
function serviceDirectives(unit: string): Map<string, string[]> {
  const directives = new Map<string, string[]>();
  let section = "";
  for (const line of unit.split("\n")) {
    if (line === "" || line.startsWith("#")) continue;
    const header = /^\[(\w+)\]$/.exec(line);
    if (header) {
      section = header[1];
      continue;
    }
    const [key, ...value] = line.split("=");
    if (section !== "Service") continue;
    directives.set(key, [...(directives.get(key) ?? []), value.join("=")]);
  }
  return directives;
}

const UNITS = [
  { config: "config.yaml", unit: "portcullis.service", verb: "serve", name: "portcullis" },
  { config: "hub.yaml", unit: "portcullis-hub.service", verb: "hub", name: "portcullis-hub" },
] as const;

Deno.test("deploy/systemd units are byte-identical to scripts/unit.ts output in deploy/example", async () => {
  for (const { config, unit } of UNITS) {
    const run = await deno(["run", ...READ, `${ROOT}scripts/unit.ts`, config], EXAMPLE);
    assert.equal(run.code, 0, run.stderr);
    const committed = await Deno.readTextFile(`${SYSTEMD}/${unit}`);
    assert.equal(committed, run.stdout, `${unit} is stale: regenerate it with scripts/unit.ts`);
  }
});

Deno.test("deploy/systemd units carry main.ts flags for their config, run where they say", async () => {
  for (const { config, unit, verb, name } of UNITS) {
    const text = await Deno.readTextFile(`${SYSTEMD}/${unit}`);
    const lines = [...text.matchAll(/^# Permissions baked into the binary: (.*)$/gm)];
    assert.equal(lines.length, 1, `${unit}: one permissions line`);
    assert.equal(lines[0][1], await mainFlags(config, EXAMPLE), unit);
    const service = serviceDirectives(text);
    assert.deepEqual(service.get("WorkingDirectory"), [`/etc/${name}`]);
    assert.deepEqual(service.get("ExecStart"), [`/usr/local/bin/${name} ${verb} ${config}`]);
  }
});

/** Directives both units must hold, with their exact values. */
const HARDENING: readonly (readonly [string, string])[] = [
  ["DynamicUser", "yes"],
  ["NoNewPrivileges", "yes"],
  ["ProtectSystem", "strict"],
  ["ProtectHome", "yes"],
  ["PrivateTmp", "yes"],
  ["PrivateDevices", "yes"],
  ["ProtectKernelTunables", "yes"],
  ["ProtectKernelModules", "yes"],
  ["ProtectKernelLogs", "yes"],
  ["RestrictAddressFamilies", "AF_INET AF_INET6 AF_UNIX"],
  ["KillSignal", "SIGTERM"],
  ["Restart", "on-failure"],
  ["SystemCallFilter", "@system-service"],
  // V8 calls pkey_alloc at start; @system-service alone would have the filter kill it.
  ["SystemCallFilter", "@pkey"],
  // V8's JIT makes written memory executable.
  ["MemoryDenyWriteExecute", "no"],
  ["LimitNOFILE", "65536"],
];

function assertHardened(unit: string, service: Map<string, string[]>): void {
  for (const [key, value] of HARDENING) {
    assert.ok(service.get(key)?.includes(value), `${unit}: missing ${key}=${value}`);
  }
  assert.ok(!service.get("MemoryDenyWriteExecute")?.includes("yes"), unit);
}

Deno.test("portcullis.service: every hardening directive, a stop timeout above lame duck and drain, reload by SIGHUP", async () => {
  const service = serviceDirectives(await Deno.readTextFile(`${SYSTEMD}/portcullis.service`));
  assertHardened("portcullis.service", service);
  assert.deepEqual(service.get("CapabilityBoundingSet"), ["CAP_NET_BIND_SERVICE"]);
  assert.deepEqual(service.get("AmbientCapabilities"), ["CAP_NET_BIND_SERVICE"]);
  assert.deepEqual(service.get("RuntimeDirectory"), ["portcullis"]);
  assert.deepEqual(service.get("StateDirectory"), ["portcullis"]);
  const config = parse(await Deno.readTextFile(`${EXAMPLE}/config.yaml`));
  const drainMs: number = (config.drain?.timeout_ms ?? 30_000) +
    (config.drain?.lame_duck_ms ?? 5000);
  const stop = service.get("TimeoutStopSec") ?? [];
  assert.equal(stop.length, 1);
  assert.match(stop[0], /^\d+$/);
  assert.ok(Number(stop[0]) * 1000 > drainMs, `TimeoutStopSec=${stop[0]} within ${drainMs} ms`);
  assert.deepEqual(service.get("ExecReload"), ["/bin/kill -HUP $MAINPID"]);
});

Deno.test("portcullis-hub.service: the same hardening, and no capability at all", async () => {
  const service = serviceDirectives(await Deno.readTextFile(`${SYSTEMD}/portcullis-hub.service`));
  assertHardened("portcullis-hub.service", service);
  assert.deepEqual(service.get("CapabilityBoundingSet"), [""]);
  assert.equal(service.get("AmbientCapabilities"), undefined);
  assert.deepEqual(service.get("RuntimeDirectory"), ["portcullis-hub"]);
  assert.equal(service.get("ExecReload"), undefined, "a hub has no SIGHUP reload");
});

Deno.test("scripts/unit.ts: TimeoutStopSec follows drain.lame_duck_ms + timeout_ms, 15 s past them", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const example = await Deno.readTextFile(`${EXAMPLE}/config.yaml`);
    await Deno.writeTextFile(
      `${dir}/config.yaml`,
      `${example}\ndrain: { timeout_ms: 50000, lame_duck_ms: 10000 }\n`,
    );
    await Deno.mkdir(`${dir}/tenants`);
    const run = await deno(["run", ...READ, `${ROOT}scripts/unit.ts`, "config.yaml"], dir);
    assert.equal(run.code, 0, run.stderr);
    assert.deepEqual(serviceDirectives(run.stdout).get("TimeoutStopSec"), ["75"]);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("scripts/unit.ts: what the binary may write stays writable under ProtectSystem=strict", () => {
  const place = {
    binary: "/usr/local/bin/portcullis-hub",
    workdir: "/etc/hub",
    config: "hub.yaml",
  };
  const flags = "--allow-net=127.0.0.1:9443 --allow-read=hub.yaml,ca " +
    "--allow-write=ca/issued,ca/hub-state,/var/lib/hub/doors-state";
  const service = serviceDirectives(renderUnit({ role: "hub", nodeId: "hub-1", flags }, place));
  assert.deepEqual(service.get("ReadWritePaths"), [
    "-/etc/hub/ca/issued",
    "-/etc/hub/ca/hub-state",
    "-/var/lib/hub/doors-state",
  ]);
  assert.deepEqual(service.get("ProtectSystem"), ["strict"]);
  const readOnly = renderUnit(
    { role: "hub", nodeId: "hub-1", flags: "--allow-read=hub.yaml" },
    place,
  );
  assert.equal(serviceDirectives(readOnly).get("ReadWritePaths"), undefined, "no grant, no path");
});

/** Runs `scripts/compile.ts --print` and splits the command line it prints. */
async function printedCompile(args: readonly string[], cwd = ROOT): Promise<string[]> {
  const run = await deno(["run", ...READ, `${ROOT}scripts/compile.ts`, "--print", ...args], cwd);
  assert.equal(run.code, 0, run.stderr);
  assert.equal(run.stdout.split("\n").length, 2, "one line");
  return run.stdout.trimEnd().split(" ");
}

/** Asserts a `deno compile` command line bakes `flags` into `output` from this checkout. */
function assertCompile(tokens: readonly string[], flags: string, output: string): void {
  assert.equal(tokens[1], "compile");
  assert.ok(tokens.includes("--no-prompt"));
  assert.ok(
    tokens.includes("--v8-flags=--max-semi-space-size=1,--no-concurrent-array-buffer-sweeping"),
    "the young generation cap",
  );
  assert.equal(permissionFlags(tokens), flags);
  const after = (flag: string) => tokens[tokens.indexOf(flag) + 1];
  assert.equal(after("--include"), "src/edge/worker_entry.ts");
  assert.equal(after("--output"), output);
  assert.equal(tokens.at(-1), "main.ts");
}

Deno.test("scripts/compile.ts --print: deno compile with main.ts flags, the worker module and main.ts", async () => {
  const edge = await printedCompile(["deploy/example/config.yaml"]);
  assert.equal(edge[0], Deno.execPath());
  assertCompile(edge, await mainFlags("deploy/example/config.yaml", ROOT), "dist/portcullis");
  const hub = await printedCompile(["--output", "dist/hub-bin", "deploy/example/hub.yaml"]);
  assertCompile(hub, await mainFlags("deploy/example/hub.yaml", ROOT), "dist/hub-bin");
});

Deno.test("scripts/compile.ts --print: run in another folder, relative config paths stay relative", async () => {
  const tokens = await printedCompile(["config.yaml"], EXAMPLE);
  assert.equal(permissionFlags(tokens), await mainFlags("config.yaml", EXAMPLE));
  assert.match(permissionFlags(tokens), /--allow-read=config\.yaml,tenants,\/etc\/hosts /);
  const after = (flag: string) => tokens[tokens.indexOf(flag) + 1];
  assert.equal(after("--config"), "../../deno.json");
  assert.equal(after("--include"), "../../src/edge/worker_entry.ts");
  assert.equal(after("--output"), "../../dist/portcullis");
  assert.equal(tokens.at(-1), "../../main.ts");
});

/**
 * The deno.json compile tasks bake exactly `main.ts flags` for their example config — whether the
 * task calls `deno compile` itself or `scripts/compile.ts` (then asked to `--print`).
 */
Deno.test("deno.json compile tasks bake main.ts flags for the example configs", async () => {
  const { tasks } = JSON.parse(await Deno.readTextFile(`${ROOT}deno.json`));
  const expected = [
    { task: "compile", config: "deploy/example/config.yaml", output: "dist/portcullis" },
    { task: "compile:hub", config: "deploy/example/hub.yaml", output: "dist/portcullis-hub" },
  ];
  for (const { task, config, output } of expected) {
    // A task is a command, or an object with a description and its command.
    const entry: unknown = tasks[task];
    const line: unknown = typeof entry === "object" && entry !== null
      ? (entry as { command?: unknown }).command
      : entry;
    assert.equal(typeof line, "string", `deno.json has no "${task}" task`);
    const tokens = (line as string).trim().split(/\s+/);
    assert.equal(tokens[0], "deno", task);
    const flags = await mainFlags(config, ROOT);
    const script = tokens.indexOf("scripts/compile.ts");
    if (script === -1) {
      assertCompile(tokens, flags, output);
      continue;
    }
    assert.equal(tokens[1], "run", task);
    assert.equal(tokens.at(-1), config, task);
    const args = [...tokens.slice(1, script + 1), "--print", ...tokens.slice(script + 1)];
    const run = await deno(args);
    assert.equal(run.code, 0, `${task}: ${run.stderr}`);
    assertCompile(run.stdout.trimEnd().split(" "), flags, output);
  }
});

Deno.test("scripts/compile.ts refuses a bad config with portcullis: lines naming the file", async () => {
  const missing = await deno(["run", ...READ, "scripts/compile.ts", "deploy/example/absent.yaml"]);
  assert.equal(missing.code, 1);
  assert.equal(missing.stdout, "");
  assert.match(missing.stderr, /^portcullis: deploy\/example\/absent\.yaml: .*Cannot read file/);
  assert.match(missing.stderr, /^portcullis: 1 problem\(s\); nothing was compiled$/m);

  const dir = await Deno.makeTempDir();
  try {
    await Deno.writeTextFile(`${dir}/broken.yaml`, "node_id: edge-1\nmode: local\n");
    const out = ["--output", `${dir}/out/portcullis`];
    const broken = await deno(
      ["run", ...READ, `${ROOT}scripts/compile.ts`, ...out, "broken.yaml"],
      dir,
    );
    assert.equal(broken.code, 1);
    const lines = broken.stderr.trimEnd().split("\n");
    assert.ok(lines.every((line) => line.startsWith("portcullis: ")), broken.stderr);
    assert.match(
      broken.stderr,
      /^portcullis: broken\.yaml:1:1: lanes: Required field is missing$/m,
    );
    await assert.rejects(Deno.stat(`${dir}/out`), Deno.errors.NotFound);

    const unit = await deno(["run", ...READ, `${ROOT}scripts/unit.ts`, "broken.yaml"], dir);
    assert.equal(unit.code, 1);
    assert.equal(unit.stdout, "");
    assert.match(unit.stderr, /^portcullis: broken\.yaml:1:1: ledger: Required field is missing$/m);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("scripts/compile.ts: no config, or two, is a usage error (exit 2)", async () => {
  for (const args of [[], ["a.yaml", "b.yaml"], ["--bogus", "a.yaml"]]) {
    const run = await deno(["run", ...READ, "scripts/compile.ts", ...args]);
    assert.equal(run.code, 2, args.join(" "));
    assert.match(run.stderr, /^usage: deno run -A scripts\/compile\.ts /m);
  }
});
