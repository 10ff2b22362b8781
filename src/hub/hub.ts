/**
 * The hub role: serves one runtime folder to edges as a config stream. The folder is validated the
 * way an edge validates it (every tenant, every policy, host uniqueness, backend URLs) before it
 * becomes a generation; an invalid change is rejected, recorded and shown to every edge, and the
 * last good generation keeps being served.
 *
 * Up to four kinds of listener, proven distinct after binding and armed only then: `api` (the
 * edges' stream, each node authenticated), `health` (loopback: status, nodes, reload),
 * `socks5_tls` (the SOCKS relay to the hub's pool, `socks_relay.ts`) and `https_tunnel` (WebSocket
 * streams to the pool, `https_tunnel.ts`, and the api's routes by client certificate). Each
 * answers only its own.
 *
 * {@link startHub} reads top to bottom as the boot's steps; `credentials.ts` reads the TLS files,
 * `listeners.ts` makes, binds and arms the listeners, `hub_app.ts` routes their requests (Hono) to
 * what `routes.ts` answers, and
 * `src/request/write_reply.ts` writes every answer — errors through the failure table the edge uses
 * (`request/errors.ts`).
 *
 * @module
 */
import type https from "node:https";
import { diagnosticSink } from "../observe/diag.ts";
import type { ConfigStore, OfferOutcome } from "../live/generations.ts";
import { formatAddress, type ListenerAddress } from "../config/load.ts";
import { loadErrorPages } from "../config/errors_schema.ts";
import type { FailureKind } from "../request/errors.ts";
import type { ErrorPages } from "../request/error_pages.ts";
import { type RuntimeReloader, runtimeReloader } from "../live/runtime_watch.ts";
import {
  type ApiCredentials,
  makeRelay,
  makeTunnel,
  readApiCredentials,
  type TunnelEndpoint,
} from "./credentials.ts";
import { certificateAuth } from "./auth.ts";
import { type HttpsTunnel, tunnelRoute } from "./https_tunnel.ts";
import type { HubConfig, HubListenerRole } from "./config.ts";
import { ConfigFeed } from "./feed.ts";
import { HubListeners, type ListenerSpec, TlsRefusals } from "./listeners.ts";
import { hubApiApp, hubHealthApp, hubRoute } from "./hub_app.ts";
import { HubRoutes, type NodeRecord } from "./routes.ts";
import type { PoolPorts, SocksRelay } from "./socks_relay.ts";
import { type EmbeddedPool, startEmbeddedPool } from "./embedded_pool.ts";
import { type FleetTrust, loadFleetTrust } from "./fleet_trust.ts";
import { loadFirstGeneration, readHubFolder } from "./folder.ts";
import { DoorService } from "./mirrors/service.ts";
import type { TorPool } from "../torpool/supervisor.ts";

/**
 * The hub's refusals a node's client reads by code (a revoked node stops, a renewal asked too early
 * waits): they keep the envelope whatever `errors` says. Both reach only a node that proved who it
 * is; an unauthenticated caller's refusals read as `errors` says.
 */
const NODE_READ_KINDS: readonly FailureKind[] = ["node_revoked", "renewal_too_early"];

export type { NodeRecord } from "./routes.ts";

/** A running hub. */
export interface Hub {
  /** The served runtime folder's generations. */
  readonly store: ConfigStore;
  /** The stream edges follow. */
  readonly feed: ConfigFeed;
  /** Every bound listener, by role. */
  readonly listeners: readonly { role: HubListenerRole; address: string }[];
  /** The nodes seen, by node id. */
  readonly nodes: ReadonlyMap<string, NodeRecord>;
  /** The SOCKS relay, when `transport.socks5_tls` is configured. */
  readonly relay?: SocksRelay;
  /** The HTTPS tunnel, when `transport.https_tunnel` is configured. */
  readonly tunnel?: HttpsTunnel;
  /** The embedded Tor pool, when `pool.torpool` is configured. */
  readonly torpool?: TorPool;
  /** The door stream (mirror registry, prober), when `doors` is configured. */
  readonly doors?: DoorService;
  /** Reads the folder now. */
  reload(): Promise<OfferOutcome>;
  /** Looks for revocations now (the CRL, removed tokens), as the timer does. */
  lookForRevocations(): Promise<void>;
  /** Releases held polls, closes every listener. */
  close(): Promise<void>;
  /** Resolves when the hub has closed. */
  readonly finished: Promise<void>;
}

/**
 * Boots a hub: the first generation, its reloader and feed, the api credentials, then the
 * listeners (bound, proven distinct, armed) — in that order, each undoing what came before when it
 * fails.
 *
 * @throws {ConfigError} when the runtime folder is not a valid generation
 * @throws {BootError} when a credential file cannot be read or a listener cannot bind
 */
export async function startHub(
  config: HubConfig,
  options: {
    readonly log?: (line: string) => void;
    /** The pool the relay serves (default: the config's static `pool.socks`). */
    readonly pool?: PoolPorts;
  } = {},
): Promise<Hub> {
  const log = options.log ?? diagnosticSink();
  const store = await loadFirstGeneration(config);
  const feed = new ConfigFeed(store, { nodeId: config.nodeId, history: config.history });
  const reloader = runtimeReloader(config.runtimeDir, store, {
    watch: config.watch,
    debounceMs: config.debounceMs,
    log,
    read: (dir) => readHubFolder(dir, store.current.files),
  });
  let credentials: ApiCredentials;
  let relay: SocksRelay | undefined;
  let tunnel: TunnelEndpoint | undefined;
  let embedded: EmbeddedPool | undefined;
  let trust: FleetTrust;
  let doors: DoorService | undefined;
  let errorPages: ErrorPages;
  try {
    errorPages = (await loadErrorPages(config.errors, config)).keeping(NODE_READ_KINDS);
    trust = await loadFleetTrust(config, log);
    doors = config.doors &&
      new DoorService(config.doors, { log, holdMs: config.holdMs, hubId: config.nodeId });
    await doors?.start();
    const { revocations } = trust;
    credentials = await readApiCredentials(config, log, revocations);
    if (config.torpool && !options.pool) embedded = await startEmbeddedPool(config.torpool, log);
    // Who may use the transports: an active, unrevoked node that is no door, its certificate of
    // its current incarnation and not in the CRL (node_standing.ts).
    const admits = trust.admitsTransport;
    relay = await makeRelay(config, options.pool ?? embedded?.ports, log, revocations, admits);
    tunnel = await makeTunnel(config, options.pool ?? embedded?.ports, log, revocations, admits);
  } catch (error) {
    reloader.stop();
    doors?.stop();
    await embedded?.close();
    throw error;
  }
  const refusals = new TlsRefusals(log);
  const { authenticate, tls } = credentials;
  const pool = poolView(options.pool ?? embedded?.ports, embedded?.pool, config);
  const routes = new HubRoutes({
    config,
    store,
    feed,
    reloader,
    authenticate,
    refusals,
    pool,
    ...trust,
    doors,
  });
  const listeners = new HubListeners(listenerSpecs(config, routes, { tls, relay, tunnel, trust }), {
    timeouts: config.timeouts,
    refusals,
    errorPages,
  });
  let actual: { role: HubListenerRole; address: ListenerAddress }[];
  try {
    actual = await listeners.bind();
  } catch (error) {
    reloader.stop();
    doors?.stop();
    await embedded?.close();
    throw error;
  }
  listeners.arm();
  // Each revocation look ends the transport streams of nodes no longer admitted.
  trust.revocations.onLook(() => void relay?.recheck());
  trust.revocations.onLook(() => void tunnel?.tunnel.recheck());
  trust.revocations.start();
  for (const { role, address } of actual) {
    const auth = (role === "api" && tls) || role === "socks5_tls" || role === "https_tunnel"
      ? " (mutual TLS)"
      : role === "api"
      ? " (tokens)"
      : "";
    log(`portcullis: hub ${role} listening on ${formatAddress(address)}${auth}`);
  }
  return runningHub({
    store,
    feed,
    reloader,
    routes,
    listeners,
    actual,
    relay,
    tunnel: tunnel?.tunnel,
    embedded,
    trust,
    doors,
  });
}

/**
 * The listeners to make, in the order they bind: every api address (with TLS when set), every
 * health address, the SOCKS relay's, then the HTTPS tunnel's — whose ordinary requests are the
 * api's routes, the node authenticated by its client certificate.
 */
function listenerSpecs(
  config: HubConfig,
  routes: HubRoutes,
  parts: {
    readonly tls: https.ServerOptions | undefined;
    readonly relay: SocksRelay | undefined;
    readonly tunnel: TunnelEndpoint | undefined;
    readonly trust: FleetTrust;
  },
): ListenerSpec[] {
  const { tls, relay, tunnel, trust } = parts;
  const api = hubRoute(hubApiApp(routes, routes.options.authenticate));
  const health = hubRoute(hubHealthApp(routes));
  const tunnelApi = tunnelRoute(hubRoute(hubApiApp(routes, certificateAuth(trust.revocations))));
  const { socks5Tls, httpsTunnel } = config;
  return [
    ...config.api.listen.map((address) => ({ role: "api" as const, address, route: api, tls })),
    ...config.health.map((address) => ({ role: "health" as const, address, route: health })),
    ...(relay && socks5Tls
      ? [{ role: "socks5_tls" as const, address: socks5Tls.listen, server: relay.server }]
      : []),
    ...(tunnel && httpsTunnel
      ? [{
        role: "https_tunnel" as const,
        address: httpsTunnel.listen,
        route: tunnelApi,
        tls: tunnel.tls,
        upgrade: tunnel.tunnel.upgrade.bind(tunnel.tunnel),
      }]
      : []),
  ];
}

/**
 * The {@link Hub} a boot hands back. Closing stops the reloader, releases held polls, closes the
 * feed, then the listeners; `finished` resolves after.
 */
function runningHub(parts: {
  readonly store: ConfigStore;
  readonly feed: ConfigFeed;
  readonly reloader: RuntimeReloader;
  readonly routes: HubRoutes;
  readonly listeners: HubListeners;
  readonly actual: readonly { role: HubListenerRole; address: ListenerAddress }[];
  readonly relay?: SocksRelay;
  readonly tunnel?: HttpsTunnel;
  readonly embedded?: EmbeddedPool;
  readonly trust: FleetTrust;
  readonly doors?: DoorService;
}): Hub {
  const { store, feed, reloader, routes, listeners, actual, relay, tunnel, embedded, trust } =
    parts;
  const doors = parts.doors;
  let resolveFinished!: () => void;
  const finished = new Promise<void>((resolve) => resolveFinished = resolve);
  let closing: Promise<void> | undefined;
  return {
    store,
    feed,
    nodes: routes.nodes,
    relay,
    tunnel,
    torpool: embedded?.pool,
    doors,
    listeners: actual.map(({ role, address }) => ({ role, address: formatAddress(address) })),
    reload: () => reloader.reload(),
    lookForRevocations: () => trust.revocations.look(),
    close() {
      closing ??= (async () => {
        reloader.stop();
        trust.revocations.stop();
        doors?.stop();
        routes.stop();
        feed.close();
        await listeners.close();
        await embedded?.close();
        resolveFinished();
      })();
      return closing;
    },
    finished,
  };
}

/**
 * The pool's view for edges (`/v1/pool`): an embedded Tor pool's live ports with latency and error
 * counts; a static pool's ports, which the hub cannot judge; none without a pool.
 */
function poolView(
  ports: PoolPorts | undefined,
  tor: TorPool | undefined,
  config: HubConfig,
): (() => readonly { port: number; latencyMs?: number | null; errors?: number }[]) | undefined {
  if (tor) {
    return () => tor.backends().map(({ port, latencyMs, errors }) => ({ port, latencyMs, errors }));
  }
  const pool = ports ?? (config.pool && { ports: () => config.pool!.ports });
  return pool && (() => pool.ports().map((port) => ({ port })));
}
