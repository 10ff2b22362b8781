/**
 * The boot audit compares the process's permissions with exactly the set `flags` derives, and
 * refuses any grant beyond it (issue 14). Unit tests drive it with a permission query that answers
 * like Deno started with a given command line; the subprocess tests boot the real gateway with the
 * derived flags plus one wide grant each.
 *
 * @module
 */
import assert from "node:assert/strict";
import { resolve } from "node:path";
import { auditPermissions, type PermissionQuery } from "../src/boot/audit.ts";
import { formatFlags, type Grant, requiredGrants } from "../src/boot/flags.ts";
import { loadConfig } from "../src/config/load.ts";
import { resolveHubConfig } from "../src/hub/config.ts";
import { hubGrants } from "../src/hub/grants.ts";
import { readYaml } from "../src/config/yaml_file.ts";
import { derivedFlags, freePorts, proofConfig, writeConfig } from "./fixtures/gateway.ts";
import { connectionRefused } from "./fixtures/in_process.ts";
import { messages } from "./fixtures/diag_lines.ts";

/** Deno's net host comparison: lower case, IPv6 compressed, IPv4-mapped IPv6 as IPv4. */
function hostOf(value: string): { host: string; port?: number } {
  const port = /:(\d+)$/.exec(value);
  const name = new URL(`http://${port ? value.slice(0, port.index) : value}/`).hostname;
  const mapped = /^\[::ffff:([0-9a-f]+):([0-9a-f]+)\]$/.exec(name);
  const host = mapped
    ? [mapped[1], mapped[2]].flatMap((h) => [parseInt(h, 16) >> 8, parseInt(h, 16) & 255]).join(".")
    : name;
  return port ? { host, port: Number(port[1]) } : { host };
}

/** True when IPv4 `host` is in `cidr` (`a.b.c.d/n`). */
function inCidr(host: string, cidr: string): boolean {
  const toInt = (ip: string) => ip.split(".").reduce((n, octet) => n * 256 + Number(octet), 0);
  const [base, bits] = cidr.split("/");
  if (!/^\d+\.\d+\.\d+\.\d+$/.test(host)) return false;
  const size = 2 ** (32 - Number(bits));
  return Math.floor(toInt(host) / size) === Math.floor(toInt(base) / size);
}

/** Hosts Deno 2.9.6 allows importing from without a flag. */
const DEFAULT_IMPORTS = ["deno.land:443", "jsr.io:443", "esm.sh:443", "cdn.jsdelivr.net:443"];

/**
 * A permission query that answers like Deno started with `flags`: an unscoped flag grants all of
 * its kind, a path grants itself and everything under it (relative to the working folder), a net
 * entry without a port grants every port, a CIDR every address in it, `--ignore-env` denies.
 */
function heldBy(flags: readonly string[]): PermissionQuery {
  const scopes = new Map<string, true | string[]>();
  const ignored: string[] = [];
  for (const flag of flags) {
    if (flag === "-A" || flag === "--allow-all") scopes.set("all", true);
    const match = /^--(allow|ignore)-(\w+)(?:=(.*))?$/.exec(flag);
    if (!match) continue;
    if (match[1] === "ignore") ignored.push(...match[3].split(","));
    else if (match[3] === undefined) scopes.set(match[2], true);
    else {
      const held = scopes.get(match[2]);
      if (held !== true) scopes.set(match[2], [...held ?? [], ...match[3].split(",")]);
    }
  }
  const path = (p: string) => resolve(Deno.cwd(), p);
  return (descriptor) => {
    const d: Record<string, string | URL | undefined> = { ...descriptor };
    const value = [d.host, d.path, d.command, d.variable, d.kind].find((v) => v !== undefined)
      ?.toString();
    if (descriptor.name === "env" && ignored.includes(value!)) return "denied";
    const scope = scopes.get("all") ?? scopes.get(descriptor.name);
    if (scope === true) return "granted";
    const entries = [...scope ?? [], ...descriptor.name === "import" ? DEFAULT_IMPORTS : []];
    if (value === undefined) return "prompt";
    const hit = entries.some((entry) => {
      if (["read", "write", "ffi"].includes(descriptor.name)) {
        return path(value) === path(entry) || path(value).startsWith(`${path(entry)}/`);
      }
      if (descriptor.name !== "net" && descriptor.name !== "import") return value === entry;
      if (value.startsWith("unix:") || entry.startsWith("unix:")) return value === entry;
      const probe = hostOf(value);
      if (entry.includes("/")) return inCidr(probe.host, entry);
      const held = hostOf(entry);
      return held.host === probe.host && (held.port === undefined || held.port === probe.port);
    });
    return hit ? "granted" : "prompt";
  };
}

/** `flags` as `formatFlags` prints them, with `value` added to the `--allow-<name>` list. */
function widened(flags: readonly string[], name: string, value: string): string[] {
  const prefix = `--allow-${name}=`;
  return flags.some((flag) => flag.startsWith(prefix))
    ? flags.map((flag) => flag.startsWith(prefix) ? `${flag},${value}` : flag)
    : [...flags, `${prefix}${value}`];
}

const EXAMPLE = new URL("../deploy/example/config.yaml", import.meta.url).pathname;
const GRANTS: readonly Grant[] = requiredGrants(await loadConfig(EXAMPLE));
const EXACT = formatFlags(GRANTS).split(" ");
const NET = EXACT.find((flag) => flag.startsWith("--allow-net="))!;
const READ = EXACT.find((flag) => flag.startsWith("--allow-read="))!;
/** The sys kinds the own-listener check reads (flags.ts LOCAL_MACHINE_GRANTS). */
const SYS = EXACT.find((flag) => flag.startsWith("--allow-sys="))!;

/** Audits the example config's grants against a process started with `flags`. */
function audit(flags: readonly string[], grants: readonly Grant[] = GRANTS): string[] {
  return auditPermissions(grants, heldBy(flags)).refusals;
}

Deno.test("auditPermissions() passes exactly the flags each example config derives", async () => {
  const hub = await readYaml(new URL("../deploy/example/hub.yaml", import.meta.url).pathname);
  if (Array.isArray(hub)) throw new Error("hub.yaml does not parse");
  const remote = new URL("../deploy/example/remote-edge.yaml", import.meta.url).pathname;
  for (
    const grants of [
      GRANTS,
      requiredGrants(await loadConfig(remote)),
      hubGrants(resolveHubConfig(hub)),
    ]
  ) {
    const flags = formatFlags(grants).split(" ");
    assert.deepEqual(auditPermissions(grants, heldBy(flags)), { refusals: [], warnings: [] });
  }
});

Deno.test("auditPermissions() passes a derived set written another way", () => {
  const cwd = Deno.cwd();
  const grants: Grant[] = [
    { name: "net", value: "[::1]:8443", purpose: 'lane "public" listener' },
    { name: "net", value: "localhost:9901", purpose: 'lane "local_health" listener' },
    { name: "read", value: "deploy/example/config.yaml", purpose: "config file" },
    { name: "write", value: "deploy/example/cache", purpose: "generation cache" },
  ];
  const flags = [
    "--allow-net=[0:0:0:0:0:0:0:1]:8443,LOCALHOST:9901",
    `--allow-read=${cwd}/deploy/example/../example/config.yaml`,
    `--allow-write=./deploy/example/cache/`,
  ];
  assert.deepEqual(audit(flags, grants), []);
});

Deno.test("auditPermissions() never probes a port the config needs on its own hosts", () => {
  const purpose = "direct upstream";
  const grants: Grant[] = [
    "127.0.0.1:1",
    "127.0.0.1:2",
    "127.0.0.1:443",
    "127.0.0.1:444",
    "127.0.0.1:65535",
    "[::1]:80",
    "169.254.169.254:80",
    "10.0.0.1:443",
    "0.0.0.0:8443",
    "unix:/var/run/docker.sock",
  ].map((value) => ({ name: "net", value, purpose }));
  const flags = formatFlags(grants).split(" ");
  assert.deepEqual(audit(flags, grants), []);
  assert.deepEqual(audit(widened(flags, "net", "127.0.0.1:3"), grants), [
    "--allow-net reaches 127.0.0.1:3 (another port of a configured host), which the config does " +
    `not need; the config needs ${flags[0]}`,
  ]);
});

/** The clause a refusal ends with: the derived flag for `name`, or that there is none. */
function needs(name: string): string {
  if (name === "net") return `the config needs ${NET}`;
  if (name === "read") return `the config needs ${READ}`;
  if (name === "sys") return `the config needs ${SYS}`;
  if (name === "env") {
    return "the config needs no --allow-env, only --ignore-env=LOG_STREAM,LOG_TOKENS " +
      "(Deno reads OTEL_* itself)";
  }
  return `the config needs no --allow-${name}`;
}

/** [permission, value added to the example's derived flags, what the refusal names]. */
type Wider = readonly [string, string, string];

const ROOT = new URL("../", import.meta.url).pathname;
const EXAMPLE_DIR = resolve(EXAMPLE, "..");
const PATHS = ["/", "/etc", "/etc/passwd", "/tmp", "/root", "/home", "/proc/self"];

const PATH_CASES: readonly Wider[] = [
  ...PATHS.flatMap((path): Wider[] => [["write", path, path], ["read", path, path]]),
  ["read", EXAMPLE_DIR, EXAMPLE_DIR],
  ["write", EXAMPLE_DIR, EXAMPLE_DIR],
  ["write", EXAMPLE, EXAMPLE],
  ["write", `${ROOT}src`, `${ROOT}src`],
  ["write", Deno.execPath(), Deno.execPath()],
  ["ffi", "/", "/"],
  ["ffi", "/usr/lib", "/usr/lib"],
];

const NET_CASES: readonly Wider[] = [
  ["net", "203.0.113.0/24", "203.0.113.77:443 (a documentation address)"],
  ["net", "example.com", "example.com:443 (a documentation address)"],
  ...["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10"].map((cidr): Wider => [
    "net",
    cidr,
    `${cidr.replace(/\.0\/\d+$/, ".1")}:443 (a private address)`,
  ]),
  ["net", "[fd00::1]", "[fd00::1]:443 (a private address)"],
  ["net", "[fc00::1]:5432", "[fc00::1]:5432 (a private address)"],
  ["net", "169.254.169.254", "169.254.169.254:443 (a link-local or cloud metadata address)"],
  ["net", "169.254.169.254:80", "169.254.169.254:80 (a link-local or cloud metadata address)"],
  ["net", "169.254.0.1", "169.254.0.1:443 (a link-local or cloud metadata address)"],
  ["net", "[fe80::1]", "[fe80::1]:443 (a link-local or cloud metadata address)"],
  [
    "net",
    "metadata.google.internal:80",
    "metadata.google.internal:80 (a link-local or cloud metadata address)",
  ],
  ...["127.0.0.2", "127.1.2.3", "[::1]", "localhost", "0.0.0.0"].map((host): Wider => [
    "net",
    host,
    `${host}:443 (a loopback or unspecified address)`,
  ]),
  ...["8081", "8079", "9903", "1", "65535", "6379"].map((port): Wider => [
    "net",
    `127.0.0.1:${port}`,
    `127.0.0.1:${port} (another port of a configured host)`,
  ]),
  ["net", "unix:/var/run/docker.sock", "unix:/var/run/docker.sock (a container runtime socket)"],
];

const NAMED_CASES: readonly Wider[] = [
  ["env", "AWS_SECRET_ACCESS_KEY", "AWS_SECRET_ACCESS_KEY"],
  ["env", "HOME", "HOME"],
  // hostname and networkInterfaces are the derived set's own (the own-listener check).
  ["sys", "osRelease", "osRelease"],
  ["sys", "uid", "uid"],
  ["sys", "homedir", "homedir"],
  ["run", "sh", "sh"],
  ["run", "/bin/sh", "/bin/sh"],
  ["run", "python3", "python3"],
  ["run", Deno.execPath(), Deno.execPath()],
  ["import", "example.com", "example.com:443"],
];

for (
  const [kind, cases] of [["path", PATH_CASES], ["net", NET_CASES], ["named", NAMED_CASES]] as const
) {
  Deno.test(`auditPermissions() refuses each ${kind} grant beyond the derived set, naming it`, () => {
    for (const [name, value, found] of cases) {
      assert.deepEqual(
        audit(widened(EXACT, name, value)),
        [`--allow-${name} reaches ${found}, which the config does not need; ${needs(name)}`],
        `--allow-${name}=${value}`,
      );
    }
  });
}

Deno.test("auditPermissions() refuses every port of a configured host as one grant", () => {
  assert.deepEqual(audit(widened(EXACT, "net", "127.0.0.1")), [
    "--allow-net grants every port of 127.0.0.1 (127.0.0.1:1 is granted); " +
    "grant exact host:port pairs",
  ]);
});

Deno.test("auditPermissions() refuses --allow-env for a variable the derived set ignores", () => {
  const flags = [
    ...EXACT.filter((flag) => !flag.startsWith("--ignore-env")),
    "--allow-env=LOG_STREAM",
  ];
  assert.deepEqual(audit(flags), [
    `--allow-env reaches LOG_STREAM, which the config does not need; ${needs("env")}`,
  ]);
});

Deno.test("auditPermissions() refuses each unscoped grant, the wide probes of it unasked", () => {
  const unscoped: [string, string][] = [
    ["net", "Unscoped --allow-net (or -A) grants every host"],
    ["run", "--allow-run grants running programs (unscoped)"],
    ["ffi", "--allow-ffi grants loading native code (unscoped)"],
    ["write", "Unscoped --allow-write grants writing every file"],
    ["read", "Unscoped --allow-read grants reading every file"],
    ["env", "Unscoped --allow-env grants reading every variable"],
    ["sys", "Unscoped --allow-sys grants all system information"],
    ["import", "Unscoped --allow-import grants loading code from every host"],
  ];
  for (const [name, refusal] of unscoped) {
    assert.deepEqual(audit([...EXACT, `--allow-${name}`]), [`${refusal}; ${needs(name)}`], name);
  }
  assert.deepEqual(
    audit(["-A"]),
    unscoped.map(([name, refusal]) => `${refusal}; ${needs(name)}`),
  );
});

/** The wide grants an attacker booted the gateway with: [permission, value added, refusal]. */
const SIX: readonly (readonly [string, string, string])[] = [
  ["write", "/", "/"],
  ["write", "/tmp", "/tmp"],
  ["net", "10.0.0.0/8", "10.0.0.1:443 (a private address)"],
  ["net", "169.254.169.254", "169.254.169.254:443 (a link-local or cloud metadata address)"],
  ["net", "127.0.0.2", "127.0.0.2:443 (a loopback or unspecified address)"],
  ["read", "/", "/"],
];

const MAIN = new URL("../main.ts", import.meta.url).pathname;

/** How a `serve` run ended: its exit code, or "ready" (then it was stopped), or "timeout". */
interface Served {
  readonly outcome: number | "ready" | "timeout";
  readonly stderr: string;
}

/** Runs `main.ts serve` under `flags` until it exits, says it is ready, or 60 s pass. */
async function serve(flags: readonly string[], config: string): Promise<Served> {
  const child = new Deno.Command(Deno.execPath(), {
    args: ["run", "--no-prompt", ...flags, MAIN, "serve", config],
    stdin: "null",
    stdout: "null",
    stderr: "piped",
    env: { NO_COLOR: "1" },
  }).spawn();
  let stderr = "";
  let outcome: Served["outcome"] | undefined;
  const deadline = setTimeout(() => {
    outcome = "timeout";
    child.kill("SIGKILL");
  }, 60_000);
  for await (const chunk of child.stderr.pipeThrough(new TextDecoderStream())) {
    stderr += chunk;
    if (outcome === undefined && /^ready: /m.test(messages(stderr))) {
      outcome = "ready";
      child.kill("SIGTERM");
    }
  }
  const status = await child.status;
  clearTimeout(deadline);
  return { outcome: outcome ?? status.code, stderr };
}

/** Writes a three-lane proof config, runs `body` with it and its derived flags, removes it. */
async function withProofConfig(
  body: (config: string, exact: string[], ports: number[]) => Promise<void>,
): Promise<void> {
  const ports = freePorts(3);
  const [publicPort, localPort, providerPort] = ports;
  const dir = await writeConfig(
    proofConfig({ public: publicPort, local_health: localPort, provider_health: providerPort }),
  );
  try {
    await body(dir.config, await derivedFlags(dir.config), ports);
  } finally {
    await Deno.remove(dir.dir, { recursive: true });
  }
}

Deno.test("serve: the derived flags alone boot, with no warning", async () => {
  await withProofConfig(async (config, exact) => {
    const booted = await serve(exact, config);
    assert.equal(booted.outcome, "ready", booted.stderr);
    assert.doesNotMatch(booted.stderr, /warning|refused/);
  });
});

for (const [name, value, found] of SIX) {
  const label = `--allow-${name}=${value}`;
  Deno.test(`serve: the derived flags plus ${label} refuse the boot, naming it`, async () => {
    await withProofConfig(async (config, exact, ports) => {
      const run = await serve(widened(exact, name, value), config);
      assert.equal(run.outcome, 1, `${label}: ${run.stderr}`);
      const needed = exact.find((flag) => flag.startsWith(`--allow-${name}=`)) ??
        `no --allow-${name}`;
      const said = messages(run.stderr).split("\n");
      const line = `--allow-${name} reaches ${found}, which the config does not ` +
        `need; the config needs ${needed}`;
      assert.ok(said.includes(line), `${line}\nnot in:\n${run.stderr}`);
      const usage = `boot refused; run with: deno run ${exact.join(" ")} ...`;
      assert.ok(said.includes(usage), run.stderr);
      assert.doesNotMatch(run.stderr, /ready/);
      for (const port of ports) {
        assert.equal(await connectionRefused(port), true, `port ${port} stayed unbound`);
      }
    });
  });
}
