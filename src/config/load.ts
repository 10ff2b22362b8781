/**
 * Loads the bootstrap config: parse, validate, and resolve every path against the config file's
 * folder.
 *
 * @module
 */
import { dirname, join, normalize } from "node:path";
import type { LaneName } from "../ledger/lane_names.ts";
import type { PathRules } from "../request/canonical_path.ts";
import { DEFAULT_CLIENT_IP_HEADERS } from "../request/client_ip_headers.ts";
import {
  type BootstrapConfig,
  BootstrapSchema,
  type LaneLedgerConfig,
  type ListenerConfig,
} from "./bootstrap.ts";
import type { EgressConfig } from "./egress_schema.ts";
import { ConfigError, type ConfigProblem } from "./problems.ts";
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

/** Remote mode's hub connection, paths resolved. */
export interface HubClientConfig {
  /** `http(s)://host:port`. */
  readonly url: string;
  /** `host:port` as `--allow-net` spells it. */
  readonly address: string;
  readonly tls?: { readonly caFile: string; readonly certFile: string; readonly keyFile: string };
  readonly tokenFile?: string;
  readonly pollTimeoutMs: number;
  readonly backoffInitialMs: number;
  readonly backoffMaxMs: number;
}

/** Where the tenant set comes from. */
export type RuntimeSource =
  | {
    readonly kind: "local";
    /** The tenants folder. */
    readonly dir: string;
    readonly watch: boolean;
    readonly debounceMs: number;
  }
  | {
    readonly kind: "remote";
    readonly hub: HubClientConfig;
    /** The last good generation is kept here (read and written). */
    readonly cacheDir: string;
  };

/** The bootstrap config, validated and resolved. */
export interface EdgeConfig {
  /** The config file, as named on the command line. */
  readonly file: string;
  readonly nodeId: string;
  readonly mode: "local" | "remote";
  /** Request workers to run (`auto` resolved to the available cores). */
  readonly workers: number;
  /** `workers` as written. */
  readonly workersSetting: "auto" | number;
  /** One isolate for every lane (`shared_event_loop`, only with one worker). */
  readonly sharedEventLoop: boolean;
  /** The tenant set's source: a watched folder, or a hub. */
  readonly runtime: RuntimeSource;
  /** Configured lanes only; an absent lane is not served. */
  readonly lanes: Readonly<Partial<Record<LaneName, LaneConfig>>>;
  readonly timeouts: {
    readonly headerMs: number;
    readonly idleMs: number;
    readonly requestMs: number;
    readonly sendMs: number;
    readonly minSendRate: number;
    readonly tunnelIdleMs?: number;
  };
  /** How request paths are made canonical. */
  readonly paths: PathRules;
  /** The Via pseudonym and the client-address headers kept only from trusted proxies. */
  readonly forwarding: {
    readonly via?: string;
    /** Lower case. */
    readonly clientIpHeaders: readonly string[];
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
  /** The admin credential for `local_health`'s acting endpoints. */
  readonly admin: { readonly tokenFile?: string };
  /** Tenant-label salt, access log and diagnostics. */
  readonly observe: {
    readonly saltFile?: string;
    readonly accessLog: { readonly enabled: boolean; readonly sample: number };
    readonly logLevel: "error" | "warn" | "info" | "debug";
  };
  readonly egress: EgressConfig;
  readonly ledger: {
    readonly application_slots: number;
    readonly inflight_bytes: number;
    readonly per_connection: number;
    readonly connection_rate?: { readonly per_second: number; readonly burst: number };
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
  return resolveConfig(source);
}

/**
 * Validates and resolves a parsed bootstrap config file.
 *
 * @throws {ConfigError} naming file, field and value of every problem found
 */
export function resolveConfig(source: YamlFile): EdgeConfig {
  const file = source.file;
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
  const runtime = runtimeSource(raw, resolve, source, file);
  return {
    file,
    nodeId: raw.node_id,
    mode: raw.mode,
    workers: raw.workers === "auto" ? Math.max(1, navigator.hardwareConcurrency || 1) : raw.workers,
    workersSetting: raw.workers,
    sharedEventLoop: raw.shared_event_loop,
    runtime,
    lanes,
    timeouts: {
      headerMs: raw.timeouts.header_ms,
      idleMs: raw.timeouts.idle_ms,
      requestMs: raw.timeouts.request_ms,
      sendMs: raw.timeouts.send_ms,
      minSendRate: raw.timeouts.min_send_rate,
      tunnelIdleMs: raw.timeouts.tunnel_idle_ms,
    },
    paths: {
      mergeSlashes: raw.paths.merge_slashes,
      escapedSlashes: raw.paths.escaped_slashes,
    },
    forwarding: {
      via: raw.forwarding.via === false ? undefined : raw.forwarding.via,
      // Folded as hygiene folds names: lower case, "_" read as "-".
      clientIpHeaders: (raw.forwarding.client_ip_headers ?? DEFAULT_CLIENT_IP_HEADERS).map((name) =>
        name.toLowerCase().replaceAll("_", "-")
      ),
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
    admin: {
      tokenFile: raw.admin.token_file === undefined ? undefined : resolve(raw.admin.token_file),
    },
    observe: {
      saltFile: raw.observe.salt_file === undefined ? undefined : resolve(raw.observe.salt_file),
      accessLog: raw.observe.access_log,
      logLevel: raw.observe.log_level,
    },
    egress: raw.egress,
    ledger: raw.ledger,
    source,
  };
}

/**
 * True when the edge runs its public lane in request workers beside an isolate for the protected
 * lanes: with more than one worker, and with one unless `shared_event_loop` is set or there is no
 * protected lane to keep apart.
 */
export function runsWorkers(config: Pick<EdgeConfig, "workers" | "sharedEventLoop" | "lanes">) {
  if (config.workers > 1) return true;
  const guarded = config.lanes.local_health !== undefined ||
    config.lanes.provider_health !== undefined;
  return guarded && !config.sharedEventLoop;
}

/** The tenants folder of a local-mode config; undefined in remote mode. */
export function tenantsFolderOf(config: EdgeConfig): string | undefined {
  return config.runtime.kind === "local" ? config.runtime.dir : undefined;
}

/** The mode's fields, checked together: a tenants folder for local, a hub and cache for remote. */
function runtimeSource(
  raw: BootstrapConfig,
  resolve: (path: string) => string,
  source: YamlFile,
  file: string,
): RuntimeSource {
  const problems: ConfigProblem[] = [];
  const problem = (path: (string | number)[], message: string, value?: unknown) =>
    problems.push({ file, path, value, message, at: source.locate(path) });
  if (raw.mode === "local") {
    if (raw.tenants_dir === undefined) problem(["tenants_dir"], "Local mode needs tenants_dir");
    if (raw.hub) problem(["hub"], 'hub is for mode "remote"');
    if (raw.cache_dir !== undefined) problem(["cache_dir"], 'cache_dir is for mode "remote"');
    if (problems.length > 0) throw new ConfigError(problems);
    return {
      kind: "local",
      dir: resolve(raw.tenants_dir!),
      watch: raw.runtime.watch,
      debounceMs: raw.runtime.debounce_ms,
    };
  }
  const hub = raw.hub;
  if (raw.tenants_dir !== undefined) {
    problem(["tenants_dir"], "Remote mode takes its tenants from the hub, not a folder");
  }
  if (!hub) problem(["hub"], "Remote mode needs hub: {url, ...}");
  if (raw.cache_dir === undefined) problem(["cache_dir"], "Remote mode needs cache_dir");
  if (hub) {
    const https = hub.url.startsWith("https:");
    const missing = https
      ? (["ca_file", "cert_file", "key_file"] as const).filter((k) => hub[k] === undefined)
      : hub.token_file === undefined
      ? ["token_file"]
      : [];
    for (const key of missing) {
      problem(
        ["hub", key],
        https
          ? "An https hub authenticates this node by client certificate: set ca_file, cert_file " +
            "and key_file"
          : "An http hub authenticates this node by token: set token_file",
      );
    }
    if (https && hub.token_file !== undefined) {
      problem(["hub", "token_file"], "An https hub uses the client certificate, not a token");
    }
    if (hub.backoff_initial_ms > hub.backoff_max_ms) {
      problem(
        ["hub", "backoff_initial_ms"],
        `The first delay is longer than the cap (${hub.backoff_max_ms} ms)`,
        hub.backoff_initial_ms,
      );
    }
  }
  if (problems.length > 0) throw new ConfigError(problems);
  const url = new URL(hub!.url);
  return {
    kind: "remote",
    hub: {
      url: hub!.url,
      address: url.host,
      tls: hub!.ca_file
        ? {
          caFile: resolve(hub!.ca_file),
          certFile: resolve(hub!.cert_file!),
          keyFile: resolve(hub!.key_file!),
        }
        : undefined,
      tokenFile: hub!.token_file === undefined ? undefined : resolve(hub!.token_file),
      pollTimeoutMs: hub!.poll_timeout_ms,
      backoffInitialMs: hub!.backoff_initial_ms,
      backoffMaxMs: hub!.backoff_max_ms,
    },
    cacheDir: resolve(raw.cache_dir!),
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

/** One configured certificate. */
export interface CertificateSource {
  readonly certFile: string;
  readonly keyFile: string;
  /** Serve this one when no name matches. */
  readonly isDefault: boolean;
}
