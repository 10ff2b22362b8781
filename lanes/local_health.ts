/**
 * The `local_health` lane: loopback or a Unix socket only. Serves readiness, status, the ledger
 * counters, the egress pool, the live config generation (and a reload), `/metrics` and the drain
 * operation, from a private reserve the public lane can never touch. Its routes are a Hono app
 * (src/server/lane_router.ts); the acting ones need the admin credential.
 *
 * Ready means able to serve every lane: besides boot and drain, `/readyz` is 503 (`lane_down`,
 * naming the lanes) while a lane has no live request worker — all its workers dead or restarting
 * (src/observe/worker_census.ts) — and `/v1/health` says which lane and why; a load balancer
 * polling readiness then moves users away until a replacement is armed. Ready also means holding
 * a verified tenant set with a tenant in it (src/live/readiness.ts): a remote edge is 503 until its
 * hub's set or its verified cache is live, and the body's `reasons` say why (`no_set_yet`,
 * `hub_unreachable` since when, `set_rejected`, `set_pending`, `no_tenants`).
 *
 * @module
 */
import { configStatus } from "../src/live/generations.ts";
import { pendingFactsOf } from "../src/live/followed_sets.ts";
import { LANE_NAMES } from "../src/ledger/lane_names.ts";
import { COUNTER_INDEX, GAUGE_INDEX } from "../src/ledger/memory.ts";
import { formatPath } from "../src/config/problems.ts";
import type { EdgeServices } from "../src/pipeline/services.ts";
import { snapshotLedger } from "../src/ledger/snapshot.ts";
import {
  type LogFacts,
  type PolicyFacts,
  readProcessFacts,
  renderMetrics,
} from "../src/observe/metrics.ts";
import { failureReply } from "../src/request/errors.ts";
import type { LaneDescriptor } from "../src/pipeline/lane_table.ts";
import { jsonReply } from "../src/request/reply.ts";
import { lanesDown, type LaneWorkers } from "../src/observe/worker_census.ts";
import { edgeReasons, type NotReadyReason, readinessReply } from "../src/live/readiness.ts";
import { laneRouter } from "../src/server/lane_router.ts";

const READ = ["GET", "HEAD"] as const;

/** The routes that act on the edge: only with the admin credential. */
const ACTING: ReadonlySet<string> = new Set(["/v1/tls/reload", "/v1/config/reload", "/v1/drain"]);

/** Requests in flight on the public lane: the drain gauge. */
function activeRequests(services: EdgeServices): number {
  return services.ledger.inUse("public");
}

/** The local-health lane. */
export const localHealthLane: LaneDescriptor<EdgeServices> = {
  name: "local_health",
  summary: "health, readiness, ledger, metrics and drain; loopback or Unix socket only",
  reach: "loopback_or_unix",
  defaults: {
    reserve: 4,
    footprint_bytes: 16_384,
    deadline_ms: 5000,
    max_connections: 64,
  },
  routes: [
    {
      path: "/healthz",
      methods: READ,
      handle: function localHealth(_context, services) {
        return jsonReply({ status: services.state.draining ? "draining" : "ok" });
      },
    },
    {
      path: "/readyz",
      methods: READ,
      handle: async function readiness(context, services) {
        const down = lanesDown(services.worker.census?.() ?? []);
        const lanes = down.length > 0 ? { lanes_down: down.map((lane) => lane.lane) } : {};
        return readinessReply(await reasonsOf(services, down), context.requestId, lanes);
      },
    },
    {
      path: "/v1/health",
      methods: READ,
      handle: async function health(_context, services) {
        const census = services.worker.census?.() ?? [];
        const reasons = await reasonsOf(services, lanesDown(census));
        return jsonReply({
          status: services.state.draining ? "draining" : "ok",
          ready: reasons.length === 0,
          reasons,
          ...(reasons.length > 0 ? { reason: reasons.map((r) => r.message).join("; ") } : {}),
          lanes: lanesView(census),
          version: services.version,
          node_id: services.nodeId,
          uptime_seconds: Math.floor((Date.now() - services.startedAt) / 1000),
          active_requests: activeRequests(services),
          tenants: services.tenants().tenants.length,
          workers: workersView(services),
          served_by_worker: services.worker.index,
          policy_stores: storesView(services),
          tls: services.tls?.status() ?? null,
          ...socketsView(services),
          logs: logsView(services),
        });
      },
    },
    {
      path: "/v1/ledger",
      methods: READ,
      handle: function ledger(context, services) {
        return jsonReply(snapshotLedger(services.ledger, context.ticket));
      },
    },
    {
      path: "/v1/egress",
      methods: READ,
      handle: function egress(_context, services) {
        return jsonReply(services.egress.snapshot());
      },
    },
    {
      path: "/metrics",
      methods: READ,
      handle: async function metrics(context, services) {
        const hub = services.hubStatus ? await services.hubStatus() : undefined;
        const text = renderMetrics({
          ledger: snapshotLedger(services.ledger, context.ticket),
          stats: services.stats,
          egress: services.egress.snapshot(),
          edge: {
            version: services.version,
            draining: services.state.draining,
            ready: (await reasonsOf(services, lanesDown(services.worker.census?.() ?? [])))
              .length === 0,
            sockets: socketsView(services),
            logs: logsView(services),
            workers: services.worker.census?.(),
          },
          process: readProcessFacts(),
          policy: policyFacts(services),
          observe: {
            metrics: services.observer.metrics,
            labelled: services.observer.labelled,
            generation: services.config.current.number,
            loadedAt: services.config.current.number > 0
              ? services.config.current.loadedAt
              : undefined,
            rejectedAt: services.config.lastRejected?.at,
            rejectedPending: services.config.lastRejected !== undefined &&
              !services.config.rejectionSuperseded,
            pending: pendingFactsOf(hub),
            // Without a salt, certificates are told apart by position, never by name.
            certificates: (services.tls?.status().certificates ?? []).map((c, i) => ({
              label: !services.observer.labelled
                ? String(i + 1)
                : services.observer.label(c.names[0]),
              notAfter: Date.parse(c.not_after),
            })),
          },
        });
        return {
          status: 200,
          headers: { "content-type": "text/plain; version=0.0.4; charset=utf-8" },
          body: text,
        };
      },
    },
    {
      path: "/v1/tls/reload",
      methods: ["POST"],
      handle: async function reloadTls(context, services) {
        if (!services.tls) return failureReply("route_not_allowed", context.requestId);
        const problems = await services.tls.reload();
        return jsonReply({ reloaded: problems.length === 0, problems, tls: services.tls.status() });
      },
    },
    {
      path: "/v1/config",
      methods: READ,
      handle: async function config(_context, services) {
        return jsonReply({
          ...configStatus(services.config, (p) => formatPath(p.path)),
          served_by_worker: services.worker.index,
          policy_stores: storesView(services),
          ...(services.hubStatus ? { hub: await services.hubStatus() } : {}),
        });
      },
    },
    {
      path: "/v1/config/reload",
      methods: ["POST"],
      handle: async function reloadConfig(context, services) {
        if (!services.reloadConfig) return failureReply("route_not_allowed", context.requestId);
        let outcome;
        try {
          outcome = await services.reloadConfig();
        } catch (error) {
          return jsonReply({
            outcome: "unreachable",
            message: (error as Error).message,
            ...configStatus(services.config, (p) => formatPath(p.path)),
          }, 502);
        }
        const status = configStatus(services.config, (p) => formatPath(p.path));
        return jsonReply(
          { outcome: outcome.outcome, ...status, served_by_worker: services.worker.index },
          // pending: the set could not be written to the cache; it is tried again (hub.pending).
          outcome.outcome === "rejected" ? 422 : outcome.outcome === "pending" ? 503 : 200,
        );
      },
    },
    {
      path: "/v1/drain",
      methods: ["POST"],
      handle: function drain(_context, services) {
        services.drain();
        return jsonReply({ draining: true, active_requests: activeRequests(services) }, 202);
      },
    },
  ],
  drains: false,
  // Routed by a Hono app; the acting routes need the admin credential (see server/admin.ts).
  router: (routes) =>
    laneRouter(routes, { acting: ACTING, credential: (services) => services.admin }),
};

/**
 * Why the edge is not ready now (none: ready), for `/readyz`, `/v1/health` and `/metrics` alike:
 * drain, boot, lanes with no live worker (`down`), and the live tenant set — held or not, verified
 * or not, with a tenant or not — with the hub follower's view of why (src/live/readiness.ts).
 */
async function reasonsOf(
  services: EdgeServices,
  down: readonly LaneWorkers[],
): Promise<NotReadyReason[]> {
  const store = services.config;
  const live = store.current;
  const rejected = store.rejectionSuperseded ? undefined : store.lastRejected;
  const follower = services.hubStatus ? await services.hubStatus() : undefined;
  return edgeReasons({
    draining: services.state.draining,
    armed: services.state.ready,
    down,
    set: {
      generation: live.number,
      tenants: live.registry.tenants.length,
      rejection: rejected && { at: rejected.at, problems: rejected.problems.length },
      follower,
      emptyTenants: services.emptyTenants ?? "not_ready",
    },
  });
}

/**
 * Each lane's workers for `/v1/health`: `{public: {workers: 1, live: 0, starting: 0, waiting: 1,
 * restarts: 2, deaths: 3, up: false}}`; empty when the edge does not count them.
 */
function lanesView(census: readonly LaneWorkers[]) {
  return Object.fromEntries(
    census.map(({ lane, ...counts }) => [lane, { ...counts, up: counts.live > 0 }]),
  );
}

/**
 * The isolates serving this edge and the requests each admitted (all lanes): worker 0 serves the
 * protected lanes, workers 1 … N the public lane. Shows how evenly the kernel spreads connections.
 */
function workersView(services: EdgeServices): { count: number; admitted: number[] } {
  const memory = services.ledger.memory;
  const admitted = new Array(memory.buffers.stripes).fill(0);
  LANE_NAMES.forEach((_, lane) => {
    memory.perStripe(COUNTER_INDEX.admitted(lane)).forEach((n, stripe) => admitted[stripe] += n);
  });
  return { count: services.worker.count, admitted };
}

/**
 * Connections and descriptors, summed over every isolate: client connections by lane (the
 * ledger's gauges), upstream sockets by state and descriptor exhaustion (each isolate's report of
 * the last second), and the open-file limit measured at boot. A count that keeps growing with no
 * traffic is a leak.
 */
export function socketsView(services: EdgeServices) {
  const memory = services.ledger.memory;
  const clients = Object.fromEntries(
    LANE_NAMES.map((lane, index) => [lane, memory.gauge(GAUGE_INDEX.connections(index))]),
  );
  const files = services.files;
  return {
    connections: {
      clients,
      upstream: {
        active: memory.total(COUNTER_INDEX.upstreamActive),
        idle: memory.total(COUNTER_INDEX.upstreamIdle),
        connecting: memory.total(COUNTER_INDEX.upstreamConnecting),
        tunnels: memory.total(COUNTER_INDEX.tunnels),
      },
    },
    descriptors: {
      limit: files?.limit.limit ?? null,
      limit_exact: files?.limit.exact ?? false,
      reserved: files?.reserved ?? null,
      exhausted: memory.total(COUNTER_INDEX.descriptorsExhausted) > 0,
      exhaustions: memory.total(COUNTER_INDEX.descriptorExhaustions),
      listener_rearms: memory.total(COUNTER_INDEX.listenerRearms),
    },
    // Per isolate (0 serves the protected lanes): what each V8 heap holds, for finding growth.
    heap: {
      used: memory.perStripe(COUNTER_INDEX.heapUsed).slice(0, services.worker.count),
      total: memory.perStripe(COUNTER_INDEX.heapTotal).slice(0, services.worker.count),
      external: memory.perStripe(COUNTER_INDEX.heapExternal).slice(0, services.worker.count),
      collections: memory.perStripe(COUNTER_INDEX.relayCollections)
        .slice(0, services.worker.count),
    },
  };
}

/**
 * Log lines by stream, summed over every isolate (each one's report of the last second): written,
 * dropped because the stream's reader stalled or its writes failed, the episodes of drops, and the
 * bytes queued now (observe/log_outlet.ts).
 */
export function logsView(services: EdgeServices): LogFacts {
  const memory = services.ledger.memory;
  const view = (index: number) => ({
    written: memory.total(COUNTER_INDEX.logWritten(index)),
    dropped: memory.total(COUNTER_INDEX.logDropped(index)),
    episodes: memory.total(COUNTER_INDEX.logEpisodes(index)),
    queued_bytes: memory.total(COUNTER_INDEX.logQueued(index)),
  });
  return { stdout: view(0), stderr: view(1) };
}

/**
 * Each fleet store as the whole edge sees it: `up` while every isolate's connection is ready, and
 * its counters summed over the isolates; empty without stores.
 */
function storesView(services: EdgeServices) {
  return (services.storeCounters?.total() ?? []).map(([url, c]) => ({
    url,
    up: c.isolates > 0 && c.up === c.isolates,
    isolates_up: c.up,
    isolates: c.isolates,
    round_trips: c.roundTrips,
    decisions: c.decisions,
    fallbacks: c.fallbacks,
    fallbacks_down: c.down,
    fallbacks_timeout: c.timeouts,
    prechecked: c.prechecked,
    blocks_published: c.blocksPublished,
    blocks_received: c.blocksReceived,
  }));
}

/** The policy counters, with evictions summed over the globals' and every tenant's tables. */
function policyFacts(services: EdgeServices): PolicyFacts {
  const registry = services.tenants();
  let rateLimitEvictions = 0;
  let ttlBlockEvictions = 0;
  for (const policies of [registry.globalPolicies, ...registry.tenants.map((t) => t.policies)]) {
    rateLimitEvictions += policies.rateLimit?.limiter.evictions ?? 0;
    ttlBlockEvictions += policies.ttlBlock?.list.evictions ?? 0;
  }
  const stores = services.storeCounters?.total();
  return { stats: services.policyStats, rateLimitEvictions, ttlBlockEvictions, stores };
}
