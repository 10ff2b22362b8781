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
  const resolve = pathResolver(file);
  const lanes = resolveLanes(raw, resolve);
  const publicTls = publicTlsOf(raw, resolve);
  const runtime = runtimeSource(raw, resolve, source);
  return {
    file,
    nodeId: raw.node_id,
    mode: raw.mode,
    workers: raw.workers === "auto" ? Math.max(1, navigator.hardwareConcurrency || 1) : raw.workers,
    workersSetting: raw.workers,
    sharedEventLoop: raw.shared_event_loop,
    runtime,
    lanes,
    timeouts: timeoutsOf(raw),
    paths: { mergeSlashes: raw.paths.merge_slashes, escapedSlashes: raw.paths.escaped_slashes },
    forwarding: forwardingOf(raw),
    limits: {
      headerBytes: raw.limits.header_bytes,
      headers: raw.limits.headers,
      targetBytes: raw.limits.target_bytes,
    },
    drainMs: raw.drain.timeout_ms,
    tls: publicTls,
    acme: acmeOf(raw, resolve),
    passthrough: passthroughOf(raw, resolve),
    trustedProxies: raw.trusted_proxies,
    admin: { tokenFile: optionalPath(raw.admin.token_file, resolve) },
    observe: observeOf(raw, resolve),
    egress: raw.egress,
    ledger: raw.ledger,
    source,
  };
}

/** Turns a path written in a config file into one that does not depend on the working folder. */
type Resolve = (path: string) => string;

/**
 * Resolves paths the way a config file means them: relative to the file's own folder.
 *
 * @param file the config file, as named on the command line
 * @returns the resolver: absolute paths are kept, relative ones joined to the file's folder
 */
export function pathResolver(file: string): Resolve {
  const base = dirname(file);
  return (path) => normalize(path.startsWith("/") ? path : join(base, path));
}

/**
 * A listener as written, with a Unix socket's path resolved.
 *
 * @param listener the listener as the schema parsed it
 * @param resolve the config file's {@link pathResolver}
 */
export function listenerAddress(listener: ListenerConfig, resolve: Resolve): ListenerAddress {
  return "path" in listener
    ? { kind: "unix", path: resolve(listener.path) }
    : { kind: "tcp", hostname: listener.hostname, port: listener.port };
}

/** A path that may be absent, resolved when present. */
function optionalPath(path: string | undefined, resolve: Resolve): string | undefined {
  return path === undefined ? undefined : resolve(path);
}

/** The configured lanes with their listeners resolved; an absent lane stays absent. */
function resolveLanes(raw: BootstrapConfig, resolve: Resolve): EdgeConfig["lanes"] {
  const lanes: Partial<Record<LaneName, LaneConfig>> = {};
  for (const name of ["public", "local_health", "provider_health"] as const) {
    const lane = raw.lanes[name];
    if (!lane) continue;
    lanes[name] = {
      listen: lane.listen.map((l) => listenerAddress(l, resolve)),
      allow: lane.allow,
    };
  }
  return lanes;
}

/** The public lane's TLS with certificate paths resolved; the name defaults to the node id. */
function publicTlsOf(raw: BootstrapConfig, resolve: Resolve): PublicTls | undefined {
  const tls = raw.lanes.public.tls;
  return tls && {
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
}

/** The public lane's ACME http-01 companion listener, its challenge folder resolved. */
function acmeOf(raw: BootstrapConfig, resolve: Resolve): EdgeConfig["acme"] {
  const acme = raw.lanes.public.acme_http;
  return acme && {
    listen: { kind: "tcp", hostname: acme.hostname, port: acme.port },
    challengeDir: resolve(acme.challenge_dir),
    otherwise: acme.otherwise,
  };
}

/** The public lane's SNI passthrough listeners, resolved. */
function passthroughOf(raw: BootstrapConfig, resolve: Resolve): EdgeConfig["passthrough"] {
  const passthrough = raw.lanes.public.passthrough;
  return passthrough && {
    listen: passthrough.listen.map((l) => listenerAddress(l, resolve)),
    helloTimeoutMs: passthrough.hello_timeout_ms,
  };
}

/** The connection and request timeouts, renamed to the code's spelling. */
function timeoutsOf(raw: BootstrapConfig): EdgeConfig["timeouts"] {
  return {
    headerMs: raw.timeouts.header_ms,
    idleMs: raw.timeouts.idle_ms,
    requestMs: raw.timeouts.request_ms,
    sendMs: raw.timeouts.send_ms,
    minSendRate: raw.timeouts.min_send_rate,
    tunnelIdleMs: raw.timeouts.tunnel_idle_ms,
  };
}

/** The Via pseudonym (`false`: none) and the client-address header names, folded. */
function forwardingOf(raw: BootstrapConfig): EdgeConfig["forwarding"] {
  return {
    via: raw.forwarding.via === false ? undefined : raw.forwarding.via,
    // Folded as hygiene folds names: lower case, "_" read as "-".
    clientIpHeaders: (raw.forwarding.client_ip_headers ?? DEFAULT_CLIENT_IP_HEADERS).map((name) =>
      name.toLowerCase().replaceAll("_", "-")
    ),
  };
}

/** Observability settings, the salt file resolved. */
function observeOf(raw: BootstrapConfig, resolve: Resolve): EdgeConfig["observe"] {
  return {
    saltFile: optionalPath(raw.observe.salt_file, resolve),
    accessLog: raw.observe.access_log,
    logLevel: raw.observe.log_level,
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

/** Records one problem about a field of the file being resolved. */
type Report = (path: (string | number)[], message: string, value?: unknown) => void;

/** The mode's fields, checked together: a tenants folder for local, a hub and cache for remote. */
function runtimeSource(raw: BootstrapConfig, resolve: Resolve, source: YamlFile): RuntimeSource {
  const problems: ConfigProblem[] = [];
  const report: Report = (path, message, value) =>
    problems.push({ file: source.file, path, value, message, at: source.locate(path) });
  if (raw.mode === "local") checkLocalMode(raw, report);
  else checkRemoteMode(raw, report);
  if (problems.length > 0) throw new ConfigError(problems);
  return raw.mode === "local" ? localSource(raw, resolve) : remoteSource(raw, resolve);
}

/** Local mode reads a tenants folder: it needs one, and takes neither a hub nor a cache. */
function checkLocalMode(raw: BootstrapConfig, report: Report): void {
  if (raw.tenants_dir === undefined) report(["tenants_dir"], "Local mode needs tenants_dir");
  if (raw.hub) report(["hub"], 'hub is for mode "remote"');
  if (raw.cache_dir !== undefined) report(["cache_dir"], 'cache_dir is for mode "remote"');
}

/** Remote mode follows a hub: it needs the hub and a cache, and takes no tenants folder. */
function checkRemoteMode(raw: BootstrapConfig, report: Report): void {
  if (raw.tenants_dir !== undefined) {
    report(["tenants_dir"], "Remote mode takes its tenants from the hub, not a folder");
  }
  if (!raw.hub) report(["hub"], "Remote mode needs hub: {url, ...}");
  if (raw.cache_dir === undefined) report(["cache_dir"], "Remote mode needs cache_dir");
  if (raw.hub) checkHub(raw.hub, report);
}

/** The hub settings as the schema parsed them. */
type HubSettings = NonNullable<BootstrapConfig["hub"]>;

/** The hub's fields: one way to authenticate, matching its scheme, and a backoff under its cap. */
function checkHub(hub: HubSettings, report: Report): void {
  const https = hub.url.startsWith("https:");
  const missing = https
    ? (["ca_file", "cert_file", "key_file"] as const).filter((k) => hub[k] === undefined)
    : hub.token_file === undefined
    ? ["token_file"]
    : [];
  for (const key of missing) {
    report(
      ["hub", key],
      https
        ? "An https hub authenticates this node by client certificate: set ca_file, cert_file " +
          "and key_file"
        : "An http hub authenticates this node by token: set token_file",
    );
  }
  if (https && hub.token_file !== undefined) {
    report(["hub", "token_file"], "An https hub uses the client certificate, not a token");
  }
  if (hub.backoff_initial_ms > hub.backoff_max_ms) {
    report(
      ["hub", "backoff_initial_ms"],
      `The first delay is longer than the cap (${hub.backoff_max_ms} ms)`,
      hub.backoff_initial_ms,
    );
  }
}

/** A checked local mode: the tenants folder, resolved, and how it is watched. */
function localSource(raw: BootstrapConfig, resolve: Resolve): RuntimeSource {
  return {
    kind: "local",
    dir: resolve(raw.tenants_dir!),
    watch: raw.runtime.watch,
    debounceMs: raw.runtime.debounce_ms,
  };
}

/** A checked remote mode: the hub connection and the cache folder, paths resolved. */
function remoteSource(raw: BootstrapConfig, resolve: Resolve): RuntimeSource {
  const hub = raw.hub!;
  const url = new URL(hub.url);
  return {
    kind: "remote",
    hub: {
      url: hub.url,
      address: url.host,
      tls: hub.ca_file
        ? {
          caFile: resolve(hub.ca_file),
          certFile: resolve(hub.cert_file!),
          keyFile: resolve(hub.key_file!),
        }
        : undefined,
      tokenFile: optionalPath(hub.token_file, resolve),
      pollTimeoutMs: hub.poll_timeout_ms,
      backoffInitialMs: hub.backoff_initial_ms,
      backoffMaxMs: hub.backoff_max_ms,
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
