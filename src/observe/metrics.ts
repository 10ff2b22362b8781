/**
 * Prometheus text exposition of the ledger and the lane counters. Counts, gauges and states only:
 * never payload bytes, client addresses or plain tenant hosts.
 *
 * Each `…Families` function below reads one group of families from its input, as data (`Family`
 * in `exposition.ts`, which holds the text format and the sample builders); {@link renderMetrics}
 * lists the groups in page order and `expose` writes them.
 *
 * @module
 */
import { LANE_NAMES, type LaneName } from "../ledger/lane_names.ts";
import { OVERLOAD_KINDS } from "../ledger/overload.ts";
import type { LedgerSnapshot } from "../ledger/snapshot.ts";
import type { EgressSnapshot } from "../egress/egress.ts";
import type { PolicyStats } from "../policy/policy_stats.ts";
import { CUT_REASONS, type ResponseStats, STATUS_CLASSES } from "./response_stats.ts";
import { BUCKETS, type RequestMetrics } from "./request_metrics.ts";
import {
  byLabel,
  byLane,
  byLaneAnd,
  byLaneHistogram,
  counter,
  escapeLabel,
  expose,
  type Family,
  gauge,
  histogram,
  only,
} from "./exposition.ts";

/** Edge-level facts rendered beside the ledger. */
export interface EdgeFacts {
  readonly version: string;
  readonly draining: boolean;
  readonly ready: boolean;
  readonly uptimeSeconds: number;
  /** Upstream sockets and descriptors, summed over the isolates (see lanes/local_health.ts). */
  readonly sockets?: SocketFacts;
}

/** Upstream sockets by state, and the descriptor budget. */
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
    readonly exhausted: boolean;
    readonly exhaustions: number;
    readonly listener_rearms: number;
  };
  /** Per isolate, index = isolate (0 serves the protected lanes): V8 heap bytes. */
  readonly heap?: { readonly used: readonly number[]; readonly total: readonly number[] };
}

/** The policy phase's counters, and evictions summed over every tenant's bounded tables. */
export interface PolicyFacts {
  readonly stats: PolicyStats;
  readonly rateLimitEvictions: number;
  readonly ttlBlockEvictions: number;
}

/** Per-request series, the config generation and certificate expiry. */
export interface ObserveFacts {
  readonly metrics: RequestMetrics;
  /** False when no tenant salt is configured: tenant and route labels are withheld. */
  readonly labelled: boolean;
  readonly generation: number;
  /** A rejected load that the source has not yet superseded. */
  readonly rejectedPending: boolean;
  /** Served certificates: a hashed label of the first name, and the expiry (ms since epoch). */
  readonly certificates: readonly { readonly label: string; readonly notAfter: number }[];
}

/** What the metrics page is rendered from. */
export interface MetricsInput {
  /** A ledger snapshot. */
  readonly ledger: LedgerSnapshot;
  /** The response counters. */
  readonly stats: ResponseStats;
  /** The egress pool state. */
  readonly egress: EgressSnapshot;
  /** Version and lifecycle state. */
  readonly edge: EdgeFacts;
  /** The policy counters. */
  readonly policy: PolicyFacts;
  /** The per-request series, config generation and certificates (left out if absent). */
  readonly observe?: ObserveFacts;
}

/**
 * Renders the metrics page: the families of each part below, in this order.
 *
 * @param input the ledger, response, egress, edge and policy state, and the per-request series
 * @returns the page in the Prometheus text format
 */
export function renderMetrics(input: MetricsInput): string {
  const { ledger, stats, egress, edge, policy, observe } = input;
  return expose([
    ...lifecycleFamilies(edge),
    ...ledgerFamilies(ledger),
    ...reservationFamilies(ledger),
    ...connectionFamilies(ledger),
    ...responseFamilies(stats),
    ...egressInstanceFamilies(egress),
    ...egressPoolFamilies(egress),
    ...processFamilies(edge.sockets),
    // Out of the egress group: the page has always had it here, and its text is kept byte for byte.
    counter(
      "egress_retry_budget_refusals_total",
      "Retries the rolling budget refused.",
      only(egress.retry_budget_refusals),
    ),
    ...policyFamilies(policy),
    ...(observe ? [...requestFamilies(observe), ...configFamilies(observe)] : []),
  ]);
}

/** Version, readiness, draining and uptime. */
function lifecycleFamilies(facts: EdgeFacts): Family[] {
  return [
    gauge(
      "build_info",
      "Version of the running gateway.",
      byLabel("version", [[facts.version, 1]]),
    ),
    gauge("ready", "1 when every lane is bound and accepting.", only(facts.ready ? 1 : 0)),
    gauge("draining", "1 while the gateway drains.", only(facts.draining ? 1 : 0)),
    gauge("uptime_seconds", "Seconds since start.", only(Math.floor(facts.uptimeSeconds))),
  ];
}

/** The admission ledger per lane: listeners, admissions, refusals, slots held and reserved. */
function ledgerFamilies(ledger: LedgerSnapshot): Family[] {
  const lane = (l: LaneName) => ledger.lanes[l];
  return [
    gauge(
      "lane_enabled",
      "1 when the lane has a listener.",
      byLane((l) => lane(l).enabled ? 1 : 0),
    ),
    counter("ledger_admitted_total", "Requests admitted.", byLane((l) => lane(l).admitted)),
    counter(
      "ledger_overload_total",
      "Requests refused with a typed overload.",
      byLaneAnd("kind", OVERLOAD_KINDS, (l, kind) => lane(l).overload[kind]),
    ),
    counter(
      "ledger_denied_route_total",
      "Requests outside the lane's routes.",
      byLane((l) => lane(l).denied_route),
    ),
    gauge("ledger_in_use", "Slots held per lane.", byLane((l) => lane(l).in_use)),
    gauge("ledger_reserve", "Private reserve per lane.", byLane((l) => lane(l).reserve)),
  ];
}

/** The ledger's reservations and shared pools: releases, high water, slot and byte budgets. */
function reservationFamilies(ledger: LedgerSnapshot): Family[] {
  return [
    counter("ledger_completed_total", "Reservations released as served.", only(ledger.completed)),
    counter(
      "ledger_cancelled_total",
      "Reservations released as not served.",
      only(ledger.cancelled),
    ),
    counter(
      "ledger_double_release_total",
      "Releases of already released reservations.",
      only(ledger.double_release),
    ),
    gauge("ledger_outstanding", "Reservations not yet released.", only(ledger.outstanding)),
    gauge(
      "ledger_high_water_slots",
      "Most slots ever held at once.",
      only(ledger.high_water_slots),
    ),
    gauge(
      "ledger_application_slots",
      "Process-wide slot ceiling.",
      only(ledger.application_slots),
    ),
    gauge("ledger_general_pool", "Slots not reserved to a lane.", only(ledger.general_pool)),
    gauge("ledger_bytes_in_use", "In-flight bytes held.", only(ledger.bytes_in_use)),
    gauge("ledger_inflight_bytes", "Shared in-flight byte budget.", only(ledger.inflight_bytes)),
  ];
}

/** Open connections per lane, and those refused at the lane's ceiling. */
function connectionFamilies(ledger: LedgerSnapshot): Family[] {
  return [
    gauge(
      "lane_connections",
      "Open connections per lane.",
      byLane((l) => ledger.lanes[l].connections),
    ),
    counter(
      "lane_connections_refused_total",
      "Connections closed at the lane's ceiling.",
      byLane((l) => ledger.lanes[l].connections_refused),
    ),
  ];
}

/** Responses per lane: status classes, withheld, protocol errors, cut-off and abandoned replies. */
function responseFamilies(stats: ResponseStats): Family[] {
  const reads = new Map(LANE_NAMES.map((lane) => [lane, stats.read(lane)]));
  const read = (lane: LaneName) => reads.get(lane)!;
  return [
    counter(
      "responses_total",
      "Responses per lane and status class.",
      byLaneAnd("class", STATUS_CLASSES, (l, cls) => read(l).responses[cls]),
    ),
    counter(
      "responses_withheld_total",
      "Requests answered by dropping or holding the connection.",
      byLane((l) => read(l).withheld),
    ),
    counter(
      "protocol_errors_total",
      "Malformed or timed-out request heads.",
      byLane((l) => read(l).protocol_errors),
    ),
    counter(
      "responses_cut_total",
      "Replies cut off after they started: the client did not take them (send_timeout) or a tunnel idled out (tunnel_idle).",
      byLaneAnd("reason", CUT_REASONS, (l, reason) => read(l).cut[reason]),
    ),
    counter(
      "pipelined_abandoned_total",
      "Pipelined requests dropped unserved because their client closed the connection.",
      byLane((l) => read(l).abandoned),
    ),
  ];
}

/** Per SOCKS instance: breaker state, attempts in flight, latency, error rate, failures, opens. */
function egressInstanceFamilies(egress: EgressSnapshot): Family[] {
  type Instance = EgressSnapshot["instances"][number];
  const perInstance = (pick: (instance: Instance) => number) =>
    byLabel("instance", egress.instances.map((i) => [i.address, pick(i)]));
  return [
    gauge(
      "egress_instance_open",
      "1 when the SOCKS instance's breaker is not closed.",
      perInstance((i) => i.state === "closed" ? 0 : 1),
    ),
    gauge(
      "egress_instance_active",
      "Attempts in flight per SOCKS instance.",
      perInstance((i) => i.active),
    ),
    gauge(
      "egress_instance_latency_ms",
      "Smoothed time to response headers per SOCKS instance.",
      perInstance((i) => Math.round(i.latency_ms)),
    ),
    gauge(
      "egress_instance_error_rate",
      "Failure share in the breaker window per SOCKS instance.",
      perInstance((i) => i.error_rate),
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
function egressPoolFamilies(egress: EgressSnapshot): Family[] {
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
function processFamilies(sockets: SocketFacts | undefined): Family[] {
  if (!sockets) return [];
  const { upstream } = sockets.connections;
  const fds = sockets.descriptors;
  const limit = fds.limit === null
    ? []
    : [gauge("descriptors_limit", "The open-file limit measured at boot.", only(fds.limit))];
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
  ];
}

/** Live policy denials, dry-run would-be denials, and evictions from the policies' tables. */
function policyFamilies(policy: PolicyFacts): Family[] {
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
  ];
}

/** Finished requests by lane, tenant, route and class, and the two latency histograms. */
function requestFamilies(observe: ObserveFacts): Family[] {
  return [
    gauge(
      "tenant_labels",
      "1 when tenant series are labelled with salted hashes; 0 when no salt is configured and tenant labels are withheld.",
      only(observe.labelled ? 1 : 0),
    ),
    counter(
      "requests_total",
      "Finished requests by lane, hashed tenant, route and status class (tenant and route only with a salt).",
      [...observe.metrics.requests()].sort(([a], [b]) => a < b ? -1 : 1).map(([key, n]) => {
        const [lane, tenant, route, cls] = key.split("\t");
        const labels = tenant === ""
          ? `{lane="${lane}",class="${cls}"}`
          : `{lane="${lane}",tenant="${tenant}",route="${escapeLabel(route)}",class="${cls}"}`;
        return [labels, n];
      }),
    ),
    latencyHistogram(
      observe.metrics,
      "gateway",
      "Time the gateway added to a request (total minus upstream waiting), seconds.",
    ),
    latencyHistogram(
      observe.metrics,
      "upstream",
      "Time spent waiting for upstream response headers, seconds.",
    ),
  ];
}

/** One lane-labelled histogram: cumulative buckets, `+Inf`, sum and count per lane. */
function latencyHistogram(
  metrics: RequestMetrics,
  which: "gateway" | "upstream",
  help: string,
): Family {
  return histogram(
    `${which}_seconds`,
    help,
    byLaneHistogram(BUCKETS, (lane) => metrics.histogram(lane, which)),
  );
}

/** The live config generation, a pending rejection, and each served certificate's expiry. */
function configFamilies(observe: ObserveFacts): Family[] {
  return [
    gauge("config_generation", "The live configuration generation.", only(observe.generation)),
    gauge(
      "config_rejected_pending",
      "1 while the last load was rejected and the source still holds it.",
      only(observe.rejectedPending ? 1 : 0),
    ),
    gauge(
      "tls_certificate_expiry_seconds",
      "Seconds until each served certificate expires (labelled by the hashed first name).",
      byLabel(
        "certificate",
        observe.certificates.map((c) => [c.label, Math.round((c.notAfter - Date.now()) / 1000)]),
      ),
    ),
  ];
}
