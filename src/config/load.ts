/**
 * Loads the bootstrap config: parse, validate, and resolve every path against the config file's
 * folder.
 *
 * What the result looks like is in `edge_config.ts`; the rules tying `mode` to the tenants folder
 * or the hub are in `runtime_source.ts`. Both are re-exported here, so callers keep one import.
 *
 * @module
 */
import { dirname, join, normalize } from "node:path";
import type { LaneName } from "../ledger/lane_names.ts";
import { DEFAULT_CLIENT_IP_HEADERS } from "../request/client_ip_headers.ts";
import { splitTarget } from "../request/host.ts";
import { type BootstrapConfig, BootstrapSchema, type ListenerConfig } from "./bootstrap.ts";
import type { EdgeConfig, LaneConfig, ListenerAddress, PublicTls } from "./edge_config.ts";
import type { EgressConfig } from "./egress_schema.ts";
import { resolveForwarding } from "./forwarding_schema.ts";
import { errorsOf } from "./errors_schema.ts";
import { ConfigError } from "./problems.ts";
import { runtimeSource } from "./runtime_source.ts";
import { validateFile } from "./validate.ts";
import { readYaml, type YamlFile } from "./yaml_file.ts";

export type {
  CertificateSource,
  EdgeConfig,
  LaneConfig,
  ListenerAddress,
  PublicTls,
} from "./edge_config.ts";
export type { HubClientConfig, RuntimeSource } from "./runtime_source.ts";

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
  const egress = egressOf(raw, resolve, source);
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
    forwarding: resolveForwarding(raw.forwarding, DEFAULT_CLIENT_IP_HEADERS, source),
    errors: errorsOf(raw.errors, resolve),
    limits: {
      headerBytes: raw.limits.header_bytes,
      headers: raw.limits.headers,
      targetBytes: raw.limits.target_bytes,
    },
    drainMs: raw.drain.timeout_ms,
    lameDuckMs: raw.drain.lame_duck_ms,
    emptyTenants: raw.readiness.empty_tenants,
    memory: {
      quietAfter: raw.memory.quiet_collect_bytes,
      collectEvery: raw.memory.collect_every_bytes,
    },
    tls: publicTls,
    acme: acmeOf(raw, resolve),
    passthrough: passthroughOf(raw, resolve),
    adminGate: adminGateOf(raw, resolve),
    trustedProxies: raw.trusted_proxies,
    policyStores: policyStoresOf(raw, source),
    admin: { tokenFile: optionalPath(raw.admin.token_file, resolve), realm: raw.admin.realm },
    observe: observeOf(raw, resolve),
    egress,
    ledger: raw.ledger,
    source,
  };
}

/**
 * The fleet stores, which need the tenant salt: a key in a shared store is a salted hash of the
 * tenant and the client, so no plain host or address is ever written there.
 *
 * @throws {ConfigError} when stores are listed without `observe.salt_file`
 */
function policyStoresOf(raw: BootstrapConfig, source: YamlFile): readonly string[] {
  const stores = [...new Set(raw.policy_stores)];
  if (stores.length > 0 && raw.observe.salt_file === undefined) {
    const path = ["policy_stores"];
    throw new ConfigError([{
      file: source.file,
      path,
      value: stores.join(", "),
      message: "A fleet store needs observe.salt_file: its keys are salted hashes of tenant and " +
        "client, and every edge of the fleet must use the same salt",
      at: source.locate(path),
    }]);
  }
  return stores;
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

/**
 * The public lane's TLS with certificate paths resolved. The bootstrap name is the operator's or
 * absent (a random one per boot): the node id would name the node to every prober.
 */
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
    name: tls.name,
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

/** The public lane's admin gate, its file resolved (read at boot, never by `check`). */
function adminGateOf(raw: BootstrapConfig, resolve: Resolve): EdgeConfig["adminGate"] {
  const gate = raw.lanes.public.admin_gate;
  return gate && { file: resolve(gate.file) };
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

/** Observability settings, the salt file resolved. */
function observeOf(raw: BootstrapConfig, resolve: Resolve): EdgeConfig["observe"] {
  return {
    saltFile: optionalPath(raw.observe.salt_file, resolve),
    accessLog: raw.observe.access_log,
    logLevel: raw.observe.log_level,
  };
}

/**
 * The egress section as the edge uses it: with a transport, `egress.socks` must be empty and the
 * instances are the hub's pool ports — for `socks5_tls` and `https_tunnel` each one dials the
 * hub (entry address: the hub; `pool_port`: the port named by the relay preamble or by the tunnel's dial op),
 * for `wireguard` the hub's private address and the port — and the transport's files are
 * resolved. `isolate_tenants` stays as written: its default depends on the transport, so it is
 * read through `isolatesTenants`.
 *
 * @throws {ConfigError} when both `egress.socks` and `egress.transport` are set
 */
function egressOf(raw: BootstrapConfig, resolve: Resolve, source: YamlFile): EgressConfig {
  const { socks, transport, ...rest } = raw.egress;
  if (transport && rest.torpool) {
    const path = ["egress", "torpool"];
    throw new ConfigError([{
      file: source.file,
      path,
      value: rest.torpool.api_socket,
      message: `With egress.transport (${transport.kind}) the hub's relay serves only live pool ` +
        "ports: a local Tor pool's socket is for local mode (leave egress.torpool out)",
      at: source.locate(path),
    }]);
  }
  if (!transport) return { ...rest, socks };
  if (socks.length > 0) {
    const path = ["egress", "socks"];
    throw new ConfigError([{
      file: source.file,
      path,
      value: socks.map((s) => formatAddress({ kind: "tcp", ...s })).join(", "),
      message: `With egress.transport (${transport.kind}) the SOCKS instances are the hub's ` +
        "pool ports (egress.transport.ports): leave egress.socks out",
      at: source.locate(path),
    }]);
  }
  if (transport.kind === "wireguard") {
    const entries = transport.ports.map((port) => ({ hostname: transport.hub, port }));
    return { ...rest, transport, socks: entries };
  }
  // The schema checked the spelling: a host and a port.
  const hub = splitTarget(transport.hub)!;
  return {
    ...rest,
    transport: {
      ...transport,
      cert_file: resolve(transport.cert_file),
      key_file: resolve(transport.key_file),
      ca_file: resolve(transport.ca_file),
    },
    socks: transport.ports.map((port) => ({ hostname: hub.host, port: hub.port, pool_port: port })),
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
