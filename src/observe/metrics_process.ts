/**
 * The metrics page's families about the process beside the ledger: its ways out (each SOCKS
 * instance's breaker and latency, the egress pool), its resources (upstream sockets, descriptors,
 * per-isolate heap) and its policies (denials, dry runs, table evictions). The standard
 * `process_*` series are `process_stats.ts`.
 *
 * Split from `metrics.ts`, which lists every group in page order; each function here reads one
 * input and returns its families as data (`Family`, in `exposition.ts`).
 *
 * @module
 */
import type { EgressSnapshot } from "../egress/egress.ts";
import type { PolicyStats } from "../policy/policy_stats.ts";
import {
  byLabel,
  counter,
  escapeLabel,
  type Family,
  gauge,
  only,
  type Sample,
} from "./exposition.ts";

/** Upstream sockets by state, and the descriptor budget. */
/** One stream's log lines, summed over the isolates (`logsView` in lanes/local_health.ts). */
export interface LogStreamFacts {
  readonly written: number;
  readonly dropped: number;
  readonly episodes: number;
  readonly queued_bytes: number;
}

/** Log lines by stream. */
export interface LogFacts {
  readonly stdout: LogStreamFacts;
  readonly stderr: LogStreamFacts;
}

/**
 * The log streams' families: lines written and dropped (a stalled or failed reader), episodes of
 * drops, and bytes queued.
 */
export function logFamilies(logs: LogFacts | undefined): Family[] {
  if (!logs) return [];
  const streams = Object.entries(logs) as [string, LogStreamFacts][];
  return [
    counter(
      "log_lines_total",
      "Log lines by stream (stdout: access log, stderr: diagnostics) and outcome: written, or dropped because the stream's reader stalled or a write failed.",
      streams.flatMap(([stream, facts]): Sample[] => [
        [`{stream="${stream}",outcome="written"}`, facts.written],
        [`{stream="${stream}",outcome="dropped"}`, facts.dropped],
      ]),
    ),
    counter(
      "log_drop_episodes_total",
      "Episodes in which a stream dropped log lines (each is one line on stderr when it begins).",
      byLabel("stream", streams.map(([stream, facts]) => [stream, facts.episodes])),
    ),
    gauge(
      "log_queue_bytes",
      "Log bytes queued for a stream, waiting for its reader (bounded; beyond the bound lines are dropped).",
      byLabel("stream", streams.map(([stream, facts]) => [stream, facts.queued_bytes])),
    ),
  ];
}

export interface SocketFacts {
  readonly connections: {
    readonly upstream: {
      readonly active: number;
      readonly idle: number;
      readonly connecting: number;
      readonly tunnels: number;
    };
  };
  readonly descriptors: {
    readonly limit: number | null;
    /** True when `limit` is the limit itself, not a number it is at least. */
    readonly limit_exact?: boolean;
    readonly exhausted: boolean;
    readonly exhaustions: number;
    readonly listener_rearms: number;
  };
  /** Per isolate, index = isolate (0 serves the protected lanes): V8 heap bytes. */
  readonly heap?: {
    readonly used: readonly number[];
    readonly total: readonly number[];
    /** Memory outside each heap (array buffers), bytes. */
    readonly external: readonly number[];
    /** Collections each isolate's relays asked for (young and quiet). */
    readonly collections: readonly number[];
  };
}

/** The policy phase's counters, and evictions summed over every tenant's bounded tables. */
export interface PolicyFacts {
  readonly stats: PolicyStats;
  readonly rateLimitEvictions: number;
  readonly ttlBlockEvictions: number;
  /** Each fleet store's counters, summed over the isolates (src/fleet/store_counters.ts). */
  readonly stores?: readonly (readonly [string, StoreFacts])[];
}

/** What one fleet store did (the counters of `src/fleet/store_counters.ts`). */
export interface StoreFacts {
  readonly up: number;
  readonly isolates: number;
  readonly roundTrips: number;
  readonly decisions: number;
  readonly fallbacks: number;
  readonly timeouts: number;
  readonly down: number;
  readonly prechecked: number;
  readonly blocksPublished: number;
  readonly blocksReceived: number;
}

/**
 * Per SOCKS instance: breaker state, attempts in flight, latency, failure ratio, failures, opens.
 * The label is `socks_instance`: a scrape sets `instance` itself (the gateway's own address).
 */
export function egressInstanceFamilies(egress: EgressSnapshot): Family[] {
  type Instance = EgressSnapshot["instances"][number];
  const perInstance = (pick: (instance: Instance) => number) =>
    byLabel("socks_instance", egress.instances.map((i) => [i.address, pick(i)]));
  return [
    gauge(
      "egress_instance_open",
      "1 when the SOCKS instance's breaker is not closed.",
      perInstance((i) => i.state === "healthy" ? 0 : 1),
    ),
    gauge(
      "egress_instance_active",
      "Attempts in flight per SOCKS instance.",
      perInstance((i) => i.active),
    ),
    gauge(
      "egress_instance_latency_seconds",
      "Smoothed time to response headers per SOCKS instance.",
      perInstance((i) => i.latency_ms / 1000),
    ),
    gauge(
      "egress_instance_failure_ratio",
      "Share of failed attempts in the breaker window per SOCKS instance (0 to 1).",
      perInstance((i) => i.failure_ratio),
    ),
    counter(
      "egress_instance_requests_total",
      "Attempts per SOCKS instance.",
      perInstance((i) => i.requests),
    ),
    counter(
      "egress_instance_failures_total",
      "Failed attempts per SOCKS instance.",
      perInstance((i) => i.failures),
    ),
    counter(
      "egress_instance_opens_total",
      "Times the breaker opened per SOCKS instance.",
      perInstance((i) => i.opens),
    ),
  ];
}

/** The egress pool: backends in the negative cache, retries and half-open probes. */
export function egressPoolFamilies(egress: EgressSnapshot): Family[] {
  return [
    gauge(
      "egress_cold_backends",
      "Backends in the negative cache.",
      only(egress.cold_backends.length),
    ),
    counter("egress_retries_total", "Retries sent.", only(egress.retries)),
    counter("egress_probes_total", "Half-open probes (SOCKS greetings) sent.", only(egress.probes)),
    counter(
      "egress_probe_failures_total",
      "Half-open probes that failed.",
      only(egress.failed_probes),
    ),
  ];
}

/** Upstream sockets, file descriptors and per-isolate heap, when the edge reports them. */
export function socketFamilies(sockets: SocketFacts | undefined): Family[] {
  if (!sockets) return [];
  const { upstream } = sockets.connections;
  const fds = sockets.descriptors;
  const limit = fds.limit === null ? [] : [
    gauge(
      "descriptors_limit",
      "The open-file limit measured at boot, or the number it is at least when the probe stopped at its ceiling.",
      only(fds.limit),
    ),
  ];
  return [
    gauge(
      "upstream_sockets",
      "Upstream sockets by state: carrying a request, pooled idle, connecting, raw tunnel.",
      byLabel("state", [
        ["active", upstream.active],
        ["idle", upstream.idle],
        ["connecting", upstream.connecting],
        ["tunnel", upstream.tunnels],
      ]),
    ),
    ...limit,
    gauge(
      "descriptors_exhausted",
      "1 while file descriptors are exhausted.",
      only(fds.exhausted ? 1 : 0),
    ),
    counter(
      "descriptor_exhaustions_total",
      "Times file descriptors ran out (EMFILE).",
      only(fds.exhaustions),
    ),
    counter(
      "listener_rearms_total",
      "Listeners re-armed after descriptor exhaustion.",
      only(fds.listener_rearms),
    ),
    ...(sockets.heap ? isolateFamilies(sockets.heap) : []),
  ];
}

/** V8 heap in use and allocated, per isolate. */
function isolateFamilies(heap: NonNullable<SocketFacts["heap"]>): Family[] {
  const perIsolate = (values: readonly number[]) =>
    byLabel("isolate", values.map((bytes, isolate) => [isolate, bytes]));
  return [
    gauge(
      "isolate_heap_used_bytes",
      "V8 heap in use per isolate (0 serves the protected lanes), reported once a second.",
      perIsolate(heap.used),
    ),
    gauge(
      "isolate_heap_total_bytes",
      "V8 heap allocated per isolate, reported once a second.",
      perIsolate(heap.total),
    ),
    gauge(
      "isolate_external_memory_bytes",
      "Memory outside each isolate's V8 heap (array buffers: socket reads awaiting a collection).",
      perIsolate(heap.external),
    ),
    counter(
      "relay_collections_total",
      "Collections an isolate's relays asked for (memory.quiet_collect_bytes, collect_every_bytes).",
      perIsolate(heap.collections),
    ),
  ];
}

/** Live policy denials, dry-run would-be denials, and evictions from the policies' tables. */
export function policyFamilies(policy: PolicyFacts): Family[] {
  return [
    counter(
      "policy_denied_total",
      "Requests a live policy answered, by phase.",
      byLabel("phase", policy.stats.deniedCounts()),
    ),
    counter(
      "policy_dry_run_total",
      "Requests a policy in dry run would have answered, by phase and route.",
      policy.stats.dryRunCounts().map(([phase, route, n]) => [
        `{phase="${phase}",route="${escapeLabel(route)}"}`,
        n,
      ]),
    ),
    counter(
      "policy_rate_limit_evictions_total",
      "Client buckets evicted (LRU).",
      only(policy.rateLimitEvictions),
    ),
    counter(
      "policy_ttl_block_evictions_total",
      "Blocked addresses evicted (LRU).",
      only(policy.ttlBlockEvictions),
    ),
    ...storeFamilies(policy.stores ?? []),
  ];
}

/** Per fleet store: up, round trips, decisions, fallbacks by reason, pre-checks, blocks. */
function storeFamilies(stores: readonly (readonly [string, StoreFacts])[]): Family[] {
  if (stores.length === 0) return [];
  const per = (pick: (facts: StoreFacts) => number) =>
    stores.map(([url, facts]): [string, number] => [`{store="${escapeLabel(url)}"}`, pick(facts)]);
  const fallbacks = stores.flatMap(([url, f]) =>
    (["down", "timeout", "error"] as const).map((reason): [string, number] => [
      `{store="${escapeLabel(url)}",reason="${reason}"}`,
      reason === "down" ? f.down : reason === "timeout" ? f.timeouts : f.fallbacks - f.down -
        f.timeouts,
    ])
  );
  return [
    gauge(
      "policy_store_up",
      "1 while every isolate's connection to the fleet store is ready.",
      per((f) => f.isolates > 0 && f.up === f.isolates ? 1 : 0),
    ),
    counter(
      "policy_store_round_trips_total",
      "Commands sent to the fleet store.",
      per((f) => f.roundTrips),
    ),
    counter(
      "policy_store_decisions_total",
      "Rate decisions the fleet store made.",
      per((f) => f.decisions),
    ),
    counter(
      "policy_store_fallbacks_total",
      "Decisions and block publications made locally instead, by reason.",
      fallbacks,
    ),
    counter(
      "policy_store_prechecked_total",
      "Requests the local pre-check refused without a round trip.",
      per((f) => f.prechecked),
    ),
    counter(
      "policy_store_blocks_published_total",
      "TTL blocks this edge published to the fleet.",
      per((f) => f.blocksPublished),
    ),
    counter(
      "policy_store_blocks_received_total",
      "TTL blocks from other edges written into this edge's tables.",
      per((f) => f.blocksReceived),
    ),
  ];
}
