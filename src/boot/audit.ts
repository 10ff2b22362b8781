/**
 * The boot-time permission audit. The exact permission set a config needs is what `flags` prints
 * (`requiredGrants`); Portcullis refuses to start while it holds any grant beyond that set, or
 * while a grant of the set is missing — naming each, with the flag that would be right.
 *
 * Deno can answer "is X granted?" but cannot list what was granted, so extra grants are found by
 * probing, and every probe is one the exact set answers "not granted" (a probe the set covers, such
 * as a port the config listens on, is never asked — so `[::1]` for `[0:0:0:0:0:0:0:1]`, or a path
 * written another way, is never refused). Probed:
 * - every permission unscoped (`-A`, `--allow-net`, `--allow-read`, …);
 * - net: hosts of each address class — documentation, private (10/8, 172.16/12, 192.168/16,
 *   100.64/10, fc00::/7), link-local and cloud metadata, loopback and unspecified, each on a few
 *   ports; other ports of each configured host (1, 65535, each neighbour, common service ports);
 *   container runtime sockets;
 * - read, write and ffi: `/`, `/etc`, `/tmp`, `/root`, `/home`, `/proc/self` and more, the parent
 *   folder of each granted path and a file beside it; write also on each path granted only for
 *   reading, and on the Deno binary;
 * - env: secrets and common variables, and the variables `--ignore-env` hides (the derived set
 *   answers "denied" for those); sys: every kind the derived set does not name (edges and hubs
 *   name `hostname` and `networkInterfaces`: flags.ts `LOCAL_MACHINE_GRANTS`); run: shells,
 *   interpreters, `deno` and `tor`
 *   (unless the derived set runs that very program: the Tor pool role's one run grant is its Tor
 *   binary's path, and a grant of it is checked like any other, missing or not); import: canary
 *   hosts (not the hosts Deno allows by default).
 *
 * What a probe cannot see: a grant for one specific other thing — a run grant for an unusual
 * program, ffi for a library elsewhere, read on a path nobody probed, net to one host:port outside
 * the probed hosts and ports, or a subdomain wildcard of a configured name.
 *
 * @module
 */
import { dirname, join, resolve } from "node:path";
import { type Diagnostics, diagnostics } from "../observe/diag.ts";
import { formatFlags, type Grant, isAuthority } from "./flags.ts";

/** Answers a permission query without prompting (`Deno.permissions.querySync` in production). */
export type PermissionQuery = (descriptor: Deno.PermissionDescriptor) => Deno.PermissionState;

/** The audit's findings. */
export interface AuditResult {
  /** Reasons to refuse the boot; empty when the permission set is exactly the derived one. */
  readonly refusals: string[];
  /** Findings that do not refuse the boot (every grant beyond the derived set now refuses). */
  readonly warnings: string[];
}

/** Net hosts no config of ours needs, by class (a configured host is probed per port instead). */
const NET_CLASSES: readonly (readonly [string, readonly string[]])[] = [
  [
    "a documentation address",
    words(`203.0.113.77 198.51.100.7 192.0.2.7 [2001:db8::77]
    canary.portcullis.invalid example.com`),
  ],
  [
    "a private address",
    words(`10.0.0.1 10.255.255.254 172.16.0.1 172.31.255.254 192.168.0.1
    192.168.255.254 100.64.0.1 [fc00::1] [fd00::1]`),
  ],
  [
    "a link-local or cloud metadata address",
    words(`169.254.169.254 169.254.0.1 [fe80::1]
    [fd00:ec2::254] metadata.google.internal`),
  ],
  [
    "a loopback or unspecified address",
    words(`127.0.0.1 127.0.0.2 127.1.2.3 127.255.255.254
    [::1] localhost 0.0.0.0 [::]`),
  ],
];
/** Ports probed on each canary host, 443 first (HTTPS is the likeliest narrow grant). */
const CANARY_PORTS = [443, 80, 1, 65535, 22, 2375, 3306, 5432, 6379, 8080, 9200, 11211, 27017];
const UNIX_CANARIES = words(`unix:/var/run/docker.sock unix:/run/docker.sock
  unix:/run/containerd/containerd.sock`);
const PATH_CANARIES = words(`/ /etc /etc/passwd /etc/shadow /tmp /root /home /proc/self
  /proc/self/environ /var/run/docker.sock /usr/lib /lib`);
/** Commands whose grant would hand out a shell or an interpreter (and the Deno binary). */
const RUN_CANARIES = words(`sh /bin/sh /usr/bin/sh bash /bin/bash /usr/bin/bash dash zsh env
  /usr/bin/env python3 perl node curl wget nc busybox deno tor /usr/sbin/tor /usr/bin/tor`);
const ENV_CANARIES = words(`AWS_SECRET_ACCESS_KEY AWS_ACCESS_KEY_ID AWS_SESSION_TOKEN HOME PATH
  USER GITHUB_TOKEN NPM_TOKEN DENO_AUTH_TOKENS OTEL_EXPORTER_OTLP_HEADERS`);
/** Every kind of system information Deno 2.9.6 lets `--allow-sys` grant one by one. */
const SYS_KINDS = words(`hostname osRelease osUptime loadavg networkInterfaces systemMemoryInfo
  uid gid username cpus homedir statfs getPriority setPriority`) as SysKind[];
/** Import hosts Deno does not allow by default (it does allow deno.land, jsr.io, esm.sh, …). */
const IMPORT_CANARIES = words("canary.portcullis.invalid:443 203.0.113.77:443 example.com:443");

type SysKind = NonNullable<Deno.SysPermissionDescriptor["kind"]>;

function words(text: string): string[] {
  return text.trim().split(/\s+/);
}

const queryDeno: PermissionQuery = (descriptor) => Deno.permissions.querySync(descriptor).state;

/** What every check reads: the derived grants, and whether a descriptor is granted. */
interface Audit {
  readonly grants: readonly Grant[];
  readonly granted: (descriptor: Deno.PermissionDescriptor) => boolean;
}

/**
 * Audits the process's permissions against exactly the grants its config needs.
 *
 * @param grants what the config needs (from `requiredGrants`; `formatFlags` prints them)
 * @param query the permission query; defaults to Deno's
 * @example
 * ```ts
 * import { auditPermissions } from "./audit.ts";
 * const everything = () => "granted" as const;
 * auditPermissions([], everything).refusals.length > 0; // true: ambient authority
 * ```
 */
export function auditPermissions(
  grants: readonly Grant[],
  query: PermissionQuery = queryDeno,
): AuditResult {
  const audit: Audit = { grants, granted: (descriptor) => query(descriptor) === "granted" };
  const checks: [Deno.PermissionDescriptor["name"], string, () => string[]][] = [
    ["net", "Unscoped --allow-net (or -A) grants every host", () => extraNet(audit)],
    ["run", "--allow-run grants running programs (unscoped)", () => extraRun(audit)],
    ["ffi", "--allow-ffi grants loading native code (unscoped)", () => extraPaths(audit, "ffi")],
    ["write", "Unscoped --allow-write grants writing every file", () => extraPaths(audit, "write")],
    ["read", "Unscoped --allow-read grants reading every file", () => extraPaths(audit, "read")],
    ["env", "Unscoped --allow-env grants reading every variable", () => extraNamed(audit, "env")],
    ["sys", "Unscoped --allow-sys grants all system information", () => extraNamed(audit, "sys")],
    [
      "import",
      "Unscoped --allow-import grants loading code from every host",
      () => extraNamed(audit, "import"),
    ],
  ];
  const refusals = checks.flatMap(([name, refusal, scoped]) =>
    audit.granted({ name } as Deno.PermissionDescriptor)
      ? [`${refusal}; ${rightFlag(grants, name)}`]
      : scoped()
  );
  return { refusals: [...refusals, ...missing(audit)], warnings: [] };
}

/** What the derived set holds of one permission, as a clause of a refusal. */
function rightFlag(grants: readonly Grant[], name: string): string {
  const flag = formatFlags(grants.filter((g) => g.name === name));
  if (flag) return `the config needs ${flag}`;
  const ignored = formatFlags(grants.filter((g) => g.name === "ignore-env"));
  return `the config needs no --allow-${name}` +
    (name === "env" && ignored ? `, only ${ignored} (Deno reads OTEL_* itself)` : "");
}

/** The refusal for a grant that reaches `found`, which is outside the derived set. */
function beyond(grants: readonly Grant[], name: string, found: string): string {
  return `--allow-${name} reaches ${found}, which the config does not need; ` +
    rightFlag(grants, name);
}

/** One refusal per net address class, and one per configured host, that a probe reaches. */
function extraNet({ grants, granted }: Audit): string[] {
  const reaches = (host: string) => granted({ name: "net", host });
  const ports = configuredPorts(grants);
  const refusals: string[] = [];
  for (const [label, hosts] of NET_CLASSES) {
    const hit = hosts.filter((host) => !ports.has(canonicalHost(host)))
      .flatMap((host) => CANARY_PORTS.map((port) => `${host}:${port}`))
      .find(reaches);
    if (hit) refusals.push(beyond(grants, "net", `${hit} (${label})`));
  }
  const socket = UNIX_CANARIES.find((path) => !ports.has(path) && reaches(path));
  if (socket) refusals.push(beyond(grants, "net", `${socket} (a container runtime socket)`));
  for (const [host, used] of ports) {
    if (used === "every") continue;
    const spare = [...new Set([1, 65535, ...[...used].flatMap((p) => [p - 1, p + 1])])]
      .concat(CANARY_PORTS)
      .filter((port, i, all) =>
        port > 0 && port < 65536 && !used.has(port) && all.indexOf(port) === i
      )
      .map((port) => `${host}:${port}`);
    const hits = spare.filter(reaches);
    if (hits.length === 0) continue;
    refusals.push(
      hits.length === spare.length
        ? `--allow-net grants every port of ${host} (${hits[0]} is granted); ` +
          "grant exact host:port pairs"
        : beyond(grants, "net", `${hits.join(", ")} (another port of a configured host)`),
    );
  }
  return refusals;
}

/** Each configured net host (canonical) with the ports the config uses on it. */
function configuredPorts(grants: readonly Grant[]): Map<string, Set<number> | "every"> {
  const ports = new Map<string, Set<number> | "every">();
  for (const grant of grants) {
    if (grant.name !== "net") continue;
    const port = grant.value.startsWith("unix:") ? null : /:(\d+)$/.exec(grant.value);
    const host = port ? canonicalHost(grant.value.slice(0, port.index)) : grant.value;
    const used = ports.get(host) ?? new Set<number>();
    ports.set(host, used === "every" || !port ? "every" : used.add(Number(port[1])));
  }
  return ports;
}

/**
 * A host as Deno compares it: lower case, IPv6 compressed, an IPv4-mapped IPv6 address as IPv4.
 */
function canonicalHost(host: string): string {
  let name: string;
  try {
    name = new URL(`http://${host}/`).hostname;
  } catch {
    return host.toLowerCase();
  }
  const mapped = /^\[::ffff:([0-9a-f]{1,4}):([0-9a-f]{1,4})\]$/.exec(name);
  if (!mapped) return name;
  const [high, low] = [parseInt(mapped[1], 16), parseInt(mapped[2], 16)];
  return [high >> 8, high & 255, low >> 8, low & 255].join(".");
}

/**
 * Shells, interpreters, Tor and the Deno binary that a run grant reaches, leaving out the programs
 * the derived set runs (by path, or by a bare name Deno would find as that path's file name).
 */
function extraRun({ grants, granted }: Audit): string[] {
  const derived = grants.filter((g) => g.name === "run").map((g) => g.value);
  const covered = (command: string) =>
    derived.some((path) =>
      path === command || (!command.includes("/") && path.split("/").at(-1) === command)
    );
  const runs = [...RUN_CANARIES, Deno.execPath()].filter((command) =>
    !covered(command) && granted({ name: "run", command })
  );
  return runs.length > 0 ? [beyond(grants, "run", runs.join(", "))] : [];
}

/** The outermost probed paths outside the derived set that a read, write or ffi grant reaches. */
function extraPaths({ grants, granted }: Audit, name: "read" | "write" | "ffi"): string[] {
  const hits = outermost(pathProbes(grants, name).filter((path) => granted({ name, path })));
  return hits.length > 0 ? [beyond(grants, name, hits.join(", "))] : [];
}

/**
 * Absolute paths to probe for `name`, widest first, leaving out those the derived set covers: the
 * canaries, and the parent of each granted path with a file beside it; for write also each path
 * granted only for reading, and the Deno binary.
 */
function pathProbes(grants: readonly Grant[], name: "read" | "write" | "ffi"): string[] {
  let cwd: string | undefined;
  try {
    cwd = Deno.cwd();
  } catch { /* relative paths stay relative */ }
  const absolute = (path: string) => cwd ? resolve(cwd, path) : path;
  const held = (of: string) => grants.filter((g) => g.name === of).map((g) => absolute(g.value));
  const near = [...held("read"), ...held("write")].flatMap((path) => [
    dirname(path),
    join(dirname(path), ".portcullis-audit-sibling"),
  ]);
  const probes = [...PATH_CANARIES, ...near];
  if (name === "write") probes.push(...held("read"), Deno.execPath());
  const covered = held(name);
  return [...new Set(probes)].sort(byDepth).filter((path) =>
    !covered.some((base) => path === base || path.startsWith(base === "/" ? "/" : `${base}/`))
  );
}

function byDepth(a: string, b: string): number {
  return a.split("/").length - b.split("/").length || a.localeCompare(b);
}

/** The paths (widest first) that are not under an earlier one: `/` stands for all under it. */
function outermost(paths: readonly string[]): string[] {
  const kept: string[] = [];
  for (const path of paths) {
    if (!kept.some((base) => base === "/" || path.startsWith(`${base}/`))) kept.push(path);
  }
  return kept;
}

/** The env variables, sys kinds or import hosts probed that a scoped grant reaches. */
function extraNamed({ grants, granted }: Audit, name: "env" | "sys" | "import"): string[] {
  // The derived set hides these with --ignore-env (Deno answers "denied"); --allow-env grants them.
  const ignored = grants.filter((g) => g.name === "ignore-env").map((g) => g.value);
  // The derived set's own sys kinds (the own-listener check) are never an extra grant.
  const sysGranted = derivedSys(grants);
  const probes: [string, Deno.PermissionDescriptor][] = name === "env"
    ? [...ENV_CANARIES, ...ignored].map((variable) => [variable, { name, variable }])
    : name === "sys"
    ? SYS_KINDS.filter((kind) => !sysGranted.has(kind)).map((kind) => [kind, { name, kind }])
    : IMPORT_CANARIES.map((host) => [host, { name, host }]);
  const hits = probes.filter(([, descriptor]) => granted(descriptor)).map(([value]) => value);
  return hits.length > 0 ? [beyond(grants, name, hits.join(", "))] : [];
}

/** The sys kinds the derived set grants. */
function derivedSys(grants: readonly Grant[]): ReadonlySet<string> {
  return new Set(grants.filter((g) => g.name === "sys").map((g) => g.value));
}

/** A refusal for each grant of the derived set the process does not hold. */
function missing({ grants, granted }: Audit): string[] {
  const refusals: string[] = [];
  for (const grant of grants.filter(isAuthority)) {
    const descriptor: Deno.PermissionDescriptor = grant.name === "net"
      ? { name: "net", host: grant.value }
      : grant.name === "run"
      ? { name: "run", command: grant.value }
      : grant.name === "sys"
      ? { name: "sys", kind: grant.value as SysKind }
      : { name: grant.name, path: grant.value };
    if (!granted(descriptor)) {
      refusals.push(
        `Missing --allow-${grant.name}=${grant.value} (needed by the ${grant.purpose})`,
      );
    }
  }
  return refusals;
}

/**
 * Runs the audit before a boot and reports it the one way every role does, on stderr as the
 * diagnostic log's JSON lines (observe/diag.ts): each warning, and each refusal followed by the
 * flags to run with.
 *
 * @param grants the config's grants
 * @param query how a permission is looked up (tests pass one)
 * @param log where the lines go (default: the diagnostic log on stderr)
 * @returns true when the boot may go on; false when it is refused (exit status 1)
 */
export function auditBeforeBoot(
  grants: readonly Grant[],
  query: PermissionQuery = queryDeno,
  log: Diagnostics = diagnostics(),
): boolean {
  const audit = auditPermissions(grants, query);
  for (const warning of audit.warnings) log.warn(warning);
  if (audit.refusals.length === 0) return true;
  for (const refusal of audit.refusals) log.error(refusal);
  log.error(`boot refused; run with: deno run ${formatFlags(grants)} ...`);
  return false;
}
