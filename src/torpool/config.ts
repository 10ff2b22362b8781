/**
 * Loading a Tor pool config: parse, validate, resolve paths against the file's folder, and check
 * the rules that span fields before anything is spawned — the SOCKS and control port ranges (each
 * `max_instances` wide) inside 1–65535 and apart, `min_instances` ≤ `max_instances`, and the scale
 * thresholds in order. Also the permissions the role needs, as data: this layer sits below the
 * boot checks, so the command line turns them into flags and audits them.
 *
 * @module
 */
import { dirname, resolve as absolute } from "node:path";
import { formatAddress, pathResolver } from "../config/load.ts";
import { ConfigError, type ConfigProblem } from "../config/problems.ts";
import { validateFile } from "../config/validate.ts";
import type { YamlFile } from "../config/yaml_file.ts";
import { type PoolConfigInput, PoolConfigSchema } from "./schema.ts";

/**
 * A pool config, validated and resolved.
 *
 * @internal
 */
export interface PoolConfig {
  readonly file: string;
  readonly torBinary: string;
  readonly dataDir: string;
  /** Absolute (a relative one is resolved against the working folder). */
  readonly apiSocket: string;
  /** A loopback IP literal. */
  readonly listen: string;
  readonly socksBasePort: number;
  readonly controlBasePort: number;
  readonly minInstances: number;
  readonly maxInstances: number;
  readonly probeIntervalMs: number;
  readonly deadRefusalMs: number;
  readonly busyStreams: number;
  readonly scaleUpThreshold: number;
  readonly scaleDownThreshold: number;
  readonly scaleCooldownMs: number;
  /** The onion client keys' folder (`client_auth_dir`), resolved. */
  readonly clientAuthDir?: string;
}

/** One permission the pool needs, and why (the boot layer's `Grant`, plus `run`). */
export interface PoolGrant {
  readonly name: "net" | "read" | "write" | "run";
  /** `host:port`, `unix:/path`, or a path. */
  readonly value: string;
  readonly purpose: string;
}

/** True when a parsed YAML file says `role: torpool`. */
export function isPoolFile(source: YamlFile): boolean {
  const value = source.value as Record<string, unknown> | null;
  return typeof value === "object" && value !== null && value.role === "torpool";
}

/**
 * Validates and resolves a parsed pool config file.
 *
 * @throws {ConfigError} naming file, field and value of every problem found
 */
export function resolvePoolConfig(source: YamlFile): PoolConfig {
  const checked = validateFile(PoolConfigSchema, source);
  if (!checked.ok) throw new ConfigError(checked.problems);
  const raw = checked.value;
  const problems: ConfigProblem[] = [];
  const report: Report = (path, message, value) =>
    problems.push({ file: source.file, path, value, message, at: source.locate(path) });
  checkPorts(raw, report);
  checkScaling(raw, report);
  if (problems.length > 0) throw new ConfigError(problems);
  const resolve = pathResolver(source.file);
  return {
    file: source.file,
    torBinary: raw.tor_binary,
    dataDir: resolve(raw.data_dir),
    // Deno takes a Unix socket grant (`--allow-net=unix:<path>`) only with an absolute path.
    apiSocket: absolute(resolve(raw.api_socket)),
    listen: raw.listen,
    socksBasePort: raw.socks_base_port,
    controlBasePort: raw.control_base_port,
    minInstances: raw.min_instances,
    maxInstances: raw.max_instances,
    probeIntervalMs: raw.probe_interval_ms,
    deadRefusalMs: raw.dead_refusal_ms,
    busyStreams: raw.busy_streams,
    scaleUpThreshold: raw.scale_up_threshold,
    scaleDownThreshold: raw.scale_down_threshold,
    scaleCooldownMs: raw.scale_cooldown_ms,
    clientAuthDir: raw.client_auth_dir === undefined ? undefined : resolve(raw.client_auth_dir),
  };
}

/** Records one problem about a field of the pool config. */
type Report = (path: (string | number)[], message: string, value?: unknown) => void;

/** Both port ranges fit below 65536 and do not overlap. */
function checkPorts(raw: PoolConfigInput, report: Report): void {
  const width = raw.max_instances;
  const ranges = [["socks_base_port", raw.socks_base_port], [
    "control_base_port",
    raw.control_base_port,
  ]] as const;
  for (const [field, base] of ranges) {
    if (base + width - 1 > 65535) {
      report(
        [field],
        `Instance ${width - 1} would listen on port ${base + width - 1}: ` +
          `with max_instances ${width} the base must be at most ${65536 - width}`,
        base,
      );
    }
  }
  const [socks, control] = [raw.socks_base_port, raw.control_base_port];
  if (socks < control + width && control < socks + width) {
    report(
      ["control_base_port"],
      `Control ports ${control}–${control + width - 1} overlap SOCKS ports ` +
        `${socks}–${socks + width - 1} (each range is max_instances wide)`,
      control,
    );
  }
}

/** `min_instances` ≤ `max_instances`, and 0 ≤ down threshold < up threshold ≤ 1 with up > 0. */
function checkScaling(raw: PoolConfigInput, report: Report): void {
  if (raw.min_instances > raw.max_instances) {
    report(
      ["min_instances"],
      `Expected at most max_instances (${raw.max_instances})`,
      raw.min_instances,
    );
  }
  if (raw.scale_up_threshold === 0) {
    report(
      ["scale_up_threshold"],
      "Expected more than 0 (at 0 the pool would grow while idle)",
      raw.scale_up_threshold,
    );
  }
  if (raw.scale_down_threshold >= raw.scale_up_threshold) {
    report(
      ["scale_down_threshold"],
      `Expected less than scale_up_threshold (${raw.scale_up_threshold}), or the pool would ` +
        "grow and shrink at the same load",
      raw.scale_down_threshold,
    );
  }
}

/** `host:port` as `--allow-net` spells it (IPv6 in brackets). */
export function hostPort(host: string, port: number): string {
  return formatAddress({ kind: "tcp", hostname: host, port });
}

/**
 * Every permission the pool role needs: run for exactly the Tor binary; net for each instance's
 * SOCKS and control port up to `max_instances` (the supervisor dials both) and for the API
 * socket; read for the config file, the data folder and the API socket's folder (its mode is
 * checked); write for the data folder and the API socket's folder (a stale socket is removed, a
 * new one bound and chmod-ed there).
 *
 * @example
 * ```ts
 * import { poolGrants } from "./config.ts";
 * const grants = poolGrants({
 *   file: "pool.yaml", torBinary: "/usr/sbin/tor", dataDir: "/var/lib/pool",
 *   apiSocket: "/run/pool/api.sock", listen: "127.0.0.1", socksBasePort: 9050,
 *   controlBasePort: 9150, minInstances: 1, maxInstances: 2, probeIntervalMs: 30000,
 *   deadRefusalMs: 5000, busyStreams: 32, scaleUpThreshold: 0.8, scaleDownThreshold: 0.2,
 *   scaleCooldownMs: 300000,
 * });
 * grants.filter((g) => g.name === "run").map((g) => g.value); // ["/usr/sbin/tor"]
 * grants.filter((g) => g.name === "net").length; // 5: two SOCKS, two control, the API socket
 * ```
 */
export function poolGrants(config: PoolConfig): PoolGrant[] {
  const grants: PoolGrant[] = [
    { name: "run", value: config.torBinary, purpose: "Tor binary" },
  ];
  for (let i = 0; i < config.maxInstances; i++) {
    const socks = hostPort(config.listen, config.socksBasePort + i);
    grants.push({ name: "net", value: socks, purpose: `Tor instance ${i} SOCKS port` });
  }
  for (let i = 0; i < config.maxInstances; i++) {
    const control = hostPort(config.listen, config.controlBasePort + i);
    grants.push({ name: "net", value: control, purpose: `Tor instance ${i} control port` });
  }
  grants.push({ name: "net", value: `unix:${config.apiSocket}`, purpose: "pool API socket" });
  grants.push({ name: "read", value: config.file, purpose: "config file" });
  grants.push({ name: "read", value: config.dataDir, purpose: "Tor data folder" });
  grants.push({
    name: "read",
    value: dirname(config.apiSocket),
    purpose: "pool API socket folder",
  });
  if (config.clientAuthDir) {
    grants.push({ name: "read", value: config.clientAuthDir, purpose: "onion client keys" });
  }
  grants.push({ name: "write", value: config.dataDir, purpose: "Tor data folder" });
  grants.push({
    name: "write",
    value: dirname(config.apiSocket),
    purpose: "pool API socket folder",
  });
  return grants;
}
