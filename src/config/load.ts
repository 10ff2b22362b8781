/**
 * Loads the bootstrap config: parse, validate, and resolve every path against the config file's
 * folder.
 *
 * @module
 */
import { dirname, join, normalize } from "node:path";
import type { LaneName } from "../ledger/lane.ts";
import type { CertificateSource } from "../tls/certificates.ts";
import { BootstrapSchema, type LaneLedgerConfig, type ListenerConfig } from "./bootstrap.ts";
import type { EgressConfig } from "./egress_schema.ts";
import { ConfigError } from "./problems.ts";
import { validateFile } from "./validate.ts";
import { readYaml, type YamlFile } from "./yaml_file.ts";

/** A listener with its path (if any) resolved. */
export type ListenerAddress =
  | { readonly kind: "tcp"; readonly hostname: string; readonly port: number }
  | { readonly kind: "unix"; readonly path: string };

/** One configured lane. */
export interface LaneConfig {
  readonly listen: readonly ListenerAddress[];
  readonly allow?: readonly string[];
}

/** TLS settings of the public lane, paths resolved. */
export interface PublicTls {
  readonly certificates: readonly CertificateSource[];
  readonly minVersion: "TLSv1.2" | "TLSv1.3";
  readonly http2: boolean;
  /** The bootstrap certificate's name. */
  readonly name: string;
  readonly watch: boolean;
}

/** The bootstrap config, validated and resolved. */
export interface EdgeConfig {
  /** The config file, as named on the command line. */
  readonly file: string;
  readonly nodeId: string;
  readonly mode: "local";
  /** The tenants folder, resolved against the config file's folder. */
  readonly tenantsDir: string;
  /** Configured lanes only; an absent lane is not served. */
  readonly lanes: Readonly<Partial<Record<LaneName, LaneConfig>>>;
  readonly timeouts: {
    readonly headerMs: number;
    readonly idleMs: number;
    readonly requestMs: number;
  };
  readonly limits: {
    readonly headerBytes: number;
    readonly headers: number;
    readonly targetBytes: number;
  };
  readonly drainMs: number;
  /** TLS on the public lane's listeners, when configured. */
  readonly tls?: PublicTls;
  /** The plain-HTTP ACME http-01 companion listener of the public lane. */
  readonly acme?: {
    readonly listen: ListenerAddress;
    readonly challengeDir: string;
    readonly otherwise: "404" | "redirect";
  };
  /** The SNI passthrough listeners of the public lane. */
  readonly passthrough?: {
    readonly listen: readonly ListenerAddress[];
    readonly helloTimeoutMs: number;
  };
  /** CIDRs whose X-Forwarded-For is believed. */
  readonly trustedProxies: readonly string[];
  readonly egress: EgressConfig;
  readonly ledger: {
    readonly application_slots: number;
    readonly inflight_bytes: number;
    readonly per_connection: number;
    readonly lanes: Readonly<Partial<Record<LaneName, LaneLedgerConfig>>>;
  };
  /** Where a field sits in the file, for later cross-field diagnostics. */
  readonly source: YamlFile;
}

/**
 * Reads, validates and resolves a bootstrap config file.
 *
 * @param file the config file path
 * @returns the config
 * @throws {ConfigError} naming file, field and value of every problem found
 */
export async function loadConfig(file: string): Promise<EdgeConfig> {
  const source = await readYaml(file);
  if (Array.isArray(source)) throw new ConfigError(source);
  const checked = validateFile(BootstrapSchema, source);
  if (!checked.ok) throw new ConfigError(checked.problems);
  const raw = checked.value;
  const base = dirname(file);
  const resolve = (path: string) => normalize(path.startsWith("/") ? path : join(base, path));
  const lanes: Partial<Record<LaneName, LaneConfig>> = {};
  const address = (listener: ListenerConfig): ListenerAddress =>
    "path" in listener
      ? { kind: "unix", path: resolve(listener.path) }
      : { kind: "tcp", hostname: listener.hostname, port: listener.port };
  for (const name of ["public", "local_health", "provider_health"] as const) {
    const lane = raw.lanes[name];
    if (lane) lanes[name] = { listen: lane.listen.map(address), allow: lane.allow };
  }
  const { tls, acme_http: acme, passthrough } = raw.lanes.public;
  const publicTls: PublicTls | undefined = tls && {
    certificates: tls.certificates.map((c) => ({
      certFile: resolve(c.cert_file),
      keyFile: resolve(c.key_file),
      isDefault: c.default,
    })),
    minVersion: tls.min_version,
    http2: tls.http2,
    name: tls.name ?? raw.node_id.toLowerCase(),
    watch: tls.watch,
  };
  return {
    file,
    nodeId: raw.node_id,
    mode: raw.mode,
    tenantsDir: resolve(raw.tenants_dir),
    lanes,
    timeouts: {
      headerMs: raw.timeouts.header_ms,
      idleMs: raw.timeouts.idle_ms,
      requestMs: raw.timeouts.request_ms,
    },
    limits: {
      headerBytes: raw.limits.header_bytes,
      headers: raw.limits.headers,
      targetBytes: raw.limits.target_bytes,
    },
    drainMs: raw.drain.timeout_ms,
    tls: publicTls,
    acme: acme && {
      listen: { kind: "tcp", hostname: acme.hostname, port: acme.port },
      challengeDir: resolve(acme.challenge_dir),
      otherwise: acme.otherwise,
    },
    passthrough: passthrough && {
      listen: passthrough.listen.map(address),
      helloTimeoutMs: passthrough.hello_timeout_ms,
    },
    trustedProxies: raw.trusted_proxies,
    egress: raw.egress,
    ledger: raw.ledger,
    source,
  };
}

/**
 * Renders a listener the way `--allow-net` and diagnostics spell it.
 *
 * @example
 * ```ts
 * import { formatAddress } from "./load.ts";
 * formatAddress({ kind: "tcp", hostname: "::1", port: 9901 }); // "[::1]:9901"
 * ```
 */
export function formatAddress(address: ListenerAddress): string {
  if (address.kind === "unix") return `unix:${address.path}`;
  const host = address.hostname.includes(":") ? `[${address.hostname}]` : address.hostname;
  return `${host}:${address.port}`;
}
