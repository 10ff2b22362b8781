/**
 * Loading a hub config: parse, validate, resolve paths against the file's folder, and check the
 * listener rules before anything binds — the API, health, SOCKS relay and HTTPS tunnel listeners
 * pairwise distinct, health on loopback, and exactly one way for nodes to authenticate (mutual TLS or token
 * files) — and the pool's: one host (an edge names an instance by its port alone), each port once,
 * none of them a listener of the hub's own, and a pool for the relay and the tunnel to relay to.
 * The permissions a hub needs are in `grants.ts`.
 *
 * @module
 */
import { isLoopback, overlaps } from "../boot/distinct.ts";
import type { ListenerConfig } from "../config/bootstrap.ts";
import {
  formatAddress,
  type ListenerAddress,
  listenerAddress,
  pathResolver,
} from "../config/load.ts";
import { ConfigError, type ConfigProblem, formatPath } from "../config/problems.ts";
import { validateFile } from "../config/validate.ts";
import { type ErrorsConfig, errorsOf } from "../config/errors_schema.ts";
import { readYaml, type YamlFile } from "../config/yaml_file.ts";
import { isPoolFile, type PoolConfig, resolvePoolConfig } from "../torpool/config.ts";
import { type CaFiles, caFiles } from "../trust/ca.ts";
import { DEFAULT_MAX_STREAM_SECONDS, type HubConfigInput, HubConfigSchema } from "./schema.ts";
import { type DoorsConfig, resolveDoorsConfig } from "./mirrors/config.ts";

/** A hub config, validated and resolved. */
export interface HubConfig {
  /** The config file, as named on the command line. */
  readonly file: string;
  /** The hub's node id. */
  readonly nodeId: string;
  /** The runtime folder it serves to edges, resolved. */
  readonly runtimeDir: string;
  /** Whether the runtime folder is watched for changes. */
  readonly watch: boolean;
  /** The quiet time before a changed folder is read (ms). */
  readonly debounceMs: number;
  /** The API listeners edges and doors follow: addresses, TLS, tokens, allowed nodes. */
  readonly api: {
    readonly listen: readonly ListenerAddress[];
    readonly tls?: {
      readonly certFile: string;
      readonly keyFile: string;
      readonly clientCaFile: string;
    };
    readonly tokensDir?: string;
    /** Nodes allowed to follow; undefined allows every node that authenticates. */
    readonly nodes?: readonly string[];
  };
  /** The fleet CA (`ca`): its files, the certificates' lifetime, renewal and retry limits. */
  readonly ca?: CaSettings;
  /** How often revocations (the CRL, removed token files) are looked for. */
  readonly revocationReloadMs: number;
  /** The health listeners. */
  readonly health: readonly ListenerAddress[];
  /** The SOCKS5-in-mutual-TLS relay (`transport.socks5_tls`), paths resolved. */
  readonly socks5Tls?: HubTlsListener & { readonly alpn: readonly string[] };
  /** The WebSocket tunnel endpoint (`transport.https_tunnel`), paths resolved. */
  readonly httpsTunnel?: HubTlsListener;
  /** The longest a relay or tunnel stream stays open (`transport.max_stream_seconds`), in ms. */
  readonly maxStreamMs: number;
  /** The static SOCKS pool: one host, its ports in the order written. */
  readonly pool?: { readonly hostname: string; readonly ports: readonly number[] };
  /** The embedded Tor pool's config file (`pool.torpool`), resolved; read by {@link loadHubConfig}. */
  readonly torpoolFile?: string;
  /** The embedded Tor pool, validated (set by {@link loadHubConfig}). */
  readonly torpool?: PoolConfig;
  /** Doors (`doors`): the mirror registry and slugs they are served, and the prober. */
  readonly doors?: DoorsConfig;
  /** How long a stream request with nothing new is held (ms). */
  readonly holdMs: number;
  /** Generations kept to answer with a delta. */
  readonly history: number;
  /** Connection timeouts (ms). */
  readonly timeouts: { readonly headerMs: number; readonly idleMs: number };
  /** How failures read to a caller the hub has not authenticated (`errors`), paths resolved. */
  readonly errors: ErrorsConfig;
}

/**
 * The fleet CA's files and the limits of what it signs (`ca`).
 *
 * @internal
 */
export interface CaSettings {
  readonly files: CaFiles;
  readonly lifetimeDays: number;
  /** Renewal is answered only for a certificate with at most this many days left. */
  readonly renewBeforeDays: number;
  /** At most one certificate per node per this many ms (0: no limit). */
  readonly renewIntervalMs: number;
  /** How long a registration may be asked again with the same secret and key (ms; 0: never). */
  readonly retryWindowMs: number;
}

/**
 * A mutual-TLS listener of a transport: its address and TLS files.
 *
 * @internal
 */
export interface HubTlsListener {
  readonly listen: ListenerAddress;
  readonly certFile: string;
  readonly keyFile: string;
  readonly clientCaFile: string;
}

/**
 * The listener kinds of a hub, as diagnostics name them.
 *
 * @internal
 */
export type HubListenerRole = "api" | "health" | "socks5_tls" | "https_tunnel";

/** The transports' roles: each a listener at `transport.<role>`. */
export const TRANSPORTS = ["socks5_tls", "https_tunnel"] as const;

/**
 * Validates and resolves a parsed hub config file, and reads the embedded Tor pool's `pool.yaml`
 * when `pool.torpool` names one (its problems name that file).
 *
 * @throws {ConfigError} naming file, field and value of every problem found
 */
export async function loadHubConfig(source: YamlFile): Promise<HubConfig> {
  const config = resolveHubConfig(source);
  if (config.torpoolFile === undefined) return config;
  const pool = await readYaml(config.torpoolFile);
  if (Array.isArray(pool)) throw new ConfigError(pool);
  if (!isPoolFile(pool)) {
    throw new ConfigError([{
      file: source.file,
      path: ["pool", "torpool"],
      value: config.torpoolFile,
      message: "Expected a Tor pool config (a file that says role: torpool)",
      at: source.locate(["pool", "torpool"]),
    }]);
  }
  return { ...config, torpool: resolvePoolConfig(pool) };
}

/** True when a parsed YAML file says `role: hub`. */
export function isHubFile(source: YamlFile): boolean {
  const value = source.value as Record<string, unknown> | null;
  return typeof value === "object" && value !== null && value.role === "hub";
}

/**
 * Validates and resolves a parsed hub config file.
 *
 * @throws {ConfigError} naming file, field and value of every problem found
 */
export function resolveHubConfig(source: YamlFile): HubConfig {
  const checked = validateFile(HubConfigSchema, source);
  if (!checked.ok) throw new ConfigError(checked.problems);
  const raw = checked.value;
  const file = source.file;
  const resolve = pathResolver(file);
  const problems: ConfigProblem[] = [];
  const report: Report = (path, message, value) =>
    problems.push({ file, path, value, message, at: source.locate(path) });
  checkNodeAuthentication(raw.api, report);
  checkClientCas(raw, report);
  const listeners = hubListeners(raw, resolve);
  checkListeners(listeners, report);
  checkPool(raw, listeners, report);
  if (problems.length > 0) throw new ConfigError(problems);
  const ca: CaSettings | undefined = raw.ca && {
    files: caFiles(resolve(raw.ca.dir)),
    lifetimeDays: raw.ca.lifetime_days,
    renewBeforeDays: raw.ca.renew_before_days,
    renewIntervalMs: raw.ca.renew_interval_seconds * 1000,
    retryWindowMs: raw.ca.registration_retry_seconds * 1000,
  };
  const clientCa = (written: string | undefined) =>
    written === undefined ? ca!.files.rootCert : resolve(written);
  const tlsListener = (role: typeof TRANSPORTS[number]): HubTlsListener | undefined => {
    const written = raw.transport?.[role];
    return written && {
      listen: addressesOf(listeners, role)[0],
      certFile: resolve(written.cert_file),
      keyFile: resolve(written.key_file),
      clientCaFile: clientCa(written.client_ca_file),
    };
  };
  return {
    file,
    nodeId: raw.node_id,
    runtimeDir: resolve(raw.runtime_dir),
    watch: raw.runtime.watch,
    debounceMs: raw.runtime.debounce_ms,
    api: {
      listen: addressesOf(listeners, "api"),
      tls: raw.api.tls && {
        certFile: resolve(raw.api.tls.cert_file),
        keyFile: resolve(raw.api.tls.key_file),
        clientCaFile: clientCa(raw.api.tls.client_ca_file),
      },
      tokensDir: raw.api.tokens_dir === undefined ? undefined : resolve(raw.api.tokens_dir),
      nodes: raw.api.nodes,
    },
    ca,
    revocationReloadMs: raw.revocation.reload_ms,
    health: addressesOf(listeners, "health"),
    socks5Tls: raw.transport?.socks5_tls && {
      ...tlsListener("socks5_tls")!,
      alpn: raw.transport.socks5_tls.alpn,
    },
    httpsTunnel: tlsListener("https_tunnel"),
    maxStreamMs: (raw.transport?.max_stream_seconds ?? DEFAULT_MAX_STREAM_SECONDS) * 1000,
    pool: raw.pool?.socks && {
      hostname: raw.pool.socks[0].hostname,
      ports: raw.pool.socks.map((instance) => instance.port),
    },
    torpoolFile: raw.pool?.torpool === undefined ? undefined : resolve(raw.pool.torpool),
    doors: raw.doors && resolveDoorsConfig(raw.doors, resolve),
    holdMs: raw.stream.hold_ms,
    history: raw.stream.history,
    timeouts: { headerMs: raw.timeouts.header_ms, idleMs: raw.timeouts.idle_ms },
    errors: errorsOf(raw.errors, resolve),
  };
}

/** Records one problem about a field of the hub config. */
type Report = (path: (string | number)[], message: string, value?: unknown) => void;

/** One listener of the hub, with where it was written (`<role>.listen[<index>]`). */
interface HubListener {
  readonly role: HubListenerRole;
  readonly index: number;
  readonly address: ListenerAddress;
}

/** Nodes authenticate exactly one way: mutual TLS or token files, never neither nor both. */
function checkNodeAuthentication(api: HubConfigInput["api"], report: Report): void {
  const { tls, tokens_dir: tokensDir } = api;
  if (!tls && tokensDir === undefined) {
    report(
      ["api"],
      "Nodes must authenticate: set api.tls (mutual TLS) or api.tokens_dir (one token per node)",
    );
  }
  if (tls && tokensDir !== undefined) {
    report(
      ["api", "tokens_dir"],
      "With api.tls nodes authenticate by certificate; drop tokens_dir",
    );
  }
}

/** Every mutual-TLS listener names the CA its clients chain to, unless the fleet CA is the one. */
function checkClientCas(raw: HubConfigInput, report: Report): void {
  if (raw.ca && !raw.api.tls) {
    report(["ca"], "The fleet CA registers nodes over TLS: set api.tls (cert_file, key_file)");
  }
  if (raw.ca) return;
  const written: [(string | number)[], { client_ca_file?: string } | undefined][] = [
    [["api", "tls"], raw.api.tls],
    ...TRANSPORTS.map((role): [(string | number)[], { client_ca_file?: string } | undefined] => [
      ["transport", role],
      raw.transport?.[role],
    ]),
  ];
  for (const [path, tls] of written) {
    if (tls && tls.client_ca_file === undefined) {
      report(
        [...path, "client_ca_file"],
        "Set client_ca_file (the CA nodes' certificates chain to), or ca (the hub's fleet CA)",
      );
    }
  }
}

/** Every listener, API ones first, each resolved and tagged with where it was written. */
function hubListeners(raw: HubConfigInput, resolve: (path: string) => string): HubListener[] {
  const tagged = (role: HubListenerRole) => (listener: ListenerConfig, index: number) => ({
    role,
    index,
    address: listenerAddress(listener, resolve),
  });
  return [
    ...raw.api.listen.map(tagged("api")),
    ...(raw.health?.listen ?? []).map(tagged("health")),
    ...TRANSPORTS.flatMap((role) => {
      const written = raw.transport?.[role];
      return written ? [tagged(role)(written.listen, 0)] : [];
    }),
  ];
}

/** Where a hub listener was written, as a field path. */
function listenerPath(listener: HubListener): (string | number)[] {
  return listener.role === "socks5_tls" || listener.role === "https_tunnel"
    ? ["transport", listener.role, "listen"]
    : [listener.role, "listen", listener.index];
}

/**
 * The pool's rules: the relay and the tunnel have a pool; every instance on the first one's host,
 * each port once; no instance is one of the hub's own listeners (the relay would dial itself).
 */
function checkPool(raw: HubConfigInput, listeners: readonly HubListener[], report: Report): void {
  for (const role of TRANSPORTS) {
    if (!raw.transport?.[role] || raw.pool) continue;
    const what = role === "socks5_tls" ? "relay" : "tunnel";
    report(
      ["transport", role],
      `The ${what} needs a pool to relay to: set pool.socks or pool.torpool`,
    );
  }
  const socks = raw.pool?.socks ?? [];
  const seen = new Set<number>();
  for (const [index, instance] of socks.entries()) {
    if (instance.hostname !== socks[0].hostname) {
      report(
        ["pool", "socks", index, "hostname"],
        `Every pool instance must be on ${socks[0].hostname}: an edge names an instance by its ` +
          "port alone",
        instance.hostname,
      );
    }
    if (seen.has(instance.port)) {
      report(["pool", "socks", index, "port"], "Each pool port may appear once", instance.port);
    }
    seen.add(instance.port);
    const address: ListenerAddress = { kind: "tcp", ...instance };
    const own = listeners.find((listener) => overlaps(listener.address, address));
    if (own) {
      report(
        ["pool", "socks", index],
        `Is the hub's own ${formatPath(listenerPath(own))} (${formatAddress(own.address)})`,
        formatAddress(address),
      );
    }
  }
}

/** The listener rules: health only on loopback (or a Unix socket), and no two listeners alike. */
function checkListeners(listeners: readonly HubListener[], report: Report): void {
  for (const [i, a] of listeners.entries()) {
    if (a.role === "health" && a.address.kind === "tcp" && !isLoopback(a.address.hostname)) {
      report(
        ["health", "listen", a.index, "hostname"],
        "The health listener serves reloads and node status: bind it to loopback or a Unix socket",
        a.address.hostname,
      );
    }
    for (const b of listeners.slice(i + 1)) {
      if (!overlaps(a.address, b.address)) continue;
      report(
        listenerPath(b),
        `Overlaps ${formatPath(listenerPath(a))} (${formatAddress(a.address)}): each listener ` +
          "must be its own socket",
        formatAddress(b.address),
      );
    }
  }
}

/** The addresses of one role's listeners, in the order written. */
function addressesOf(listeners: readonly HubListener[], role: HubListenerRole): ListenerAddress[] {
  return listeners.filter((l) => l.role === role).map((l) => l.address);
}
