/**
 * Prometheus text exposition of the ledger and the lane counters. Counts, gauges and states only:
 * never payload bytes, client addresses or plain tenant hosts.
 *
 * @module
 */
import { LANE_NAMES } from "../ledger/lane.ts";
import { OVERLOAD_KINDS } from "../ledger/overload.ts";
import type { LedgerSnapshot } from "../ledger/snapshot.ts";
import type { EgressSnapshot } from "../egress/egress.ts";
import type { PolicyStats } from "../policy/stats.ts";
import { CUT_REASONS, type ResponseStats, STATUS_CLASSES } from "./stats.ts";
import { BUCKETS, type RequestMetrics } from "./request_metrics.ts";

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

/**
 * Renders the metrics page.
 *
 * @param ledger a ledger snapshot
 * @param stats the response counters
 * @param egress the egress pool state
 * @param facts version and lifecycle state
 * @param policy the policy counters
 */
export function renderMetrics(
  ledger: LedgerSnapshot,
  stats: ResponseStats,
  egress: EgressSnapshot,
  facts: EdgeFacts,
  policy: PolicyFacts,
  observe?: ObserveFacts,
): string {
  const out: string[] = [];
  const family = (
    name: string,
    type: "counter" | "gauge",
    help: string,
    rows: [string, number][],
  ) => {
    out.push(`# HELP portcullis_${name} ${help}`, `# TYPE portcullis_${name} ${type}`);
    for (const [labels, value] of rows) out.push(`portcullis_${name}${labels} ${value}`);
  };
  const perLane = (pick: (lane: (typeof LANE_NAMES)[number]) => number): [string, number][] =>
    LANE_NAMES.map((lane) => [`{lane="${lane}"}`, pick(lane)]);

  family("build_info", "gauge", "Version of the running gateway.", [[
    `{version="${facts.version}"}`,
    1,
  ]]);
  family("ready", "gauge", "1 when every lane is bound and accepting.", [[
    "",
    facts.ready ? 1 : 0,
  ]]);
  family("draining", "gauge", "1 while the gateway drains.", [["", facts.draining ? 1 : 0]]);
  family("uptime_seconds", "gauge", "Seconds since start.", [[
    "",
    Math.floor(facts.uptimeSeconds),
  ]]);
  family(
    "lane_enabled",
    "gauge",
    "1 when the lane has a listener.",
    perLane((l) => ledger.lanes[l].enabled ? 1 : 0),
  );
  family(
    "ledger_admitted_total",
    "counter",
    "Requests admitted.",
    perLane((l) => ledger.lanes[l].admitted),
  );
  family(
    "ledger_overload_total",
    "counter",
    "Requests refused with a typed overload.",
    LANE_NAMES.flatMap((lane) =>
      OVERLOAD_KINDS.map((kind): [string, number] => [
        `{lane="${lane}",kind="${kind}"}`,
        ledger.lanes[lane].overload[kind],
      ])
    ),
  );
  family(
    "ledger_denied_route_total",
    "counter",
    "Requests outside the lane's routes.",
    perLane((l) => ledger.lanes[l].denied_route),
  );
  family("ledger_in_use", "gauge", "Slots held per lane.", perLane((l) => ledger.lanes[l].in_use));
  family(
    "ledger_reserve",
    "gauge",
    "Private reserve per lane.",
    perLane((l) => ledger.lanes[l].reserve),
  );
  family("ledger_completed_total", "counter", "Reservations released as served.", [[
    "",
    ledger.completed,
  ]]);
  family("ledger_cancelled_total", "counter", "Reservations released as not served.", [[
    "",
    ledger.cancelled,
  ]]);
  family("ledger_double_release_total", "counter", "Releases of already released reservations.", [[
    "",
    ledger.double_release,
  ]]);
  family("ledger_outstanding", "gauge", "Reservations not yet released.", [[
    "",
    ledger.outstanding,
  ]]);
  family("ledger_high_water_slots", "gauge", "Most slots ever held at once.", [[
    "",
    ledger.high_water_slots,
  ]]);
  family("ledger_application_slots", "gauge", "Process-wide slot ceiling.", [[
    "",
    ledger.application_slots,
  ]]);
  family("ledger_general_pool", "gauge", "Slots not reserved to a lane.", [[
    "",
    ledger.general_pool,
  ]]);
  family("ledger_bytes_in_use", "gauge", "In-flight bytes held.", [["", ledger.bytes_in_use]]);
  family("ledger_inflight_bytes", "gauge", "Shared in-flight byte budget.", [[
    "",
    ledger.inflight_bytes,
  ]]);
  family(
    "lane_connections",
    "gauge",
    "Open connections per lane.",
    perLane((l) => ledger.lanes[l].connections),
  );
  family(
    "lane_connections_refused_total",
    "counter",
    "Connections closed at the lane's ceiling.",
    perLane((l) => ledger.lanes[l].connections_refused),
  );
  family(
    "responses_total",
    "counter",
    "Responses per lane and status class.",
    LANE_NAMES.flatMap((lane) => {
      const read = stats.read(lane);
      return STATUS_CLASSES.map((cls): [string, number] => [
        `{lane="${lane}",class="${cls}"}`,
        read.responses[cls],
      ]);
    }),
  );
  family(
    "responses_withheld_total",
    "counter",
    "Requests answered by dropping or holding the connection.",
    perLane((l) => stats.read(l).withheld),
  );
  family(
    "protocol_errors_total",
    "counter",
    "Malformed or timed-out request heads.",
    perLane((l) => stats.read(l).protocol_errors),
  );
  family(
    "responses_cut_total",
    "counter",
    "Replies cut off after they started: the client did not take them (send_timeout) or a tunnel idled out (tunnel_idle).",
    LANE_NAMES.flatMap((lane) => {
      const read = stats.read(lane);
      return CUT_REASONS.map((reason): [string, number] => [
        `{lane="${lane}",reason="${reason}"}`,
        read.cut[reason],
      ]);
    }),
  );
  family(
    "pipelined_abandoned_total",
    "counter",
    "Pipelined requests dropped unserved because their client closed the connection.",
    perLane((l) => stats.read(l).abandoned),
  );
  const perInstance = (
    pick: (i: EgressSnapshot["instances"][number]) => number,
  ): [string, number][] =>
    egress.instances.map((instance) => [`{instance="${instance.address}"}`, pick(instance)]);
  family(
    "egress_instance_open",
    "gauge",
    "1 when the SOCKS instance's breaker is not closed.",
    perInstance((i) => i.state === "closed" ? 0 : 1),
  );
  family(
    "egress_instance_active",
    "gauge",
    "Attempts in flight per SOCKS instance.",
    perInstance((i) => i.active),
  );
  family(
    "egress_instance_latency_ms",
    "gauge",
    "Smoothed time to response headers per SOCKS instance.",
    perInstance((i) => Math.round(i.latency_ms)),
  );
  family(
    "egress_instance_error_rate",
    "gauge",
    "Failure share in the breaker window per SOCKS instance.",
    perInstance((i) => i.error_rate),
  );
  family(
    "egress_instance_requests_total",
    "counter",
    "Attempts per SOCKS instance.",
    perInstance((i) => i.requests),
  );
  family(
    "egress_instance_failures_total",
    "counter",
    "Failed attempts per SOCKS instance.",
    perInstance((i) => i.failures),
  );
  family(
    "egress_instance_opens_total",
    "counter",
    "Times the breaker opened per SOCKS instance.",
    perInstance((i) => i.opens),
  );
  family("egress_cold_backends", "gauge", "Backends in the negative cache.", [[
    "",
    egress.cold_backends.length,
  ]]);
  family("egress_retries_total", "counter", "Retries sent.", [["", egress.retries]]);
  family("egress_probes_total", "counter", "Half-open probes (SOCKS greetings) sent.", [[
    "",
    egress.probes,
  ]]);
  family("egress_probe_failures_total", "counter", "Half-open probes that failed.", [[
    "",
    egress.failed_probes,
  ]]);
  const sockets = facts.sockets;
  if (sockets) {
    const upstream = sockets.connections.upstream;
    family(
      "upstream_sockets",
      "gauge",
      "Upstream sockets by state: carrying a request, pooled idle, connecting, raw tunnel.",
      [
        ['{state="active"}', upstream.active],
        ['{state="idle"}', upstream.idle],
        ['{state="connecting"}', upstream.connecting],
        ['{state="tunnel"}', upstream.tunnels],
      ],
    );
    const fds = sockets.descriptors;
    if (fds.limit !== null) {
      family("descriptors_limit", "gauge", "The open-file limit measured at boot.", [[
        "",
        fds.limit,
      ]]);
    }
    family("descriptors_exhausted", "gauge", "1 while file descriptors are exhausted.", [[
      "",
      fds.exhausted ? 1 : 0,
    ]]);
    family(
      "descriptor_exhaustions_total",
      "counter",
      "Times file descriptors ran out (EMFILE).",
      [["", fds.exhaustions]],
    );
    family(
      "listener_rearms_total",
      "counter",
      "Listeners re-armed after descriptor exhaustion.",
      [["", fds.listener_rearms]],
    );
    if (sockets.heap) {
      const { used, total } = sockets.heap;
      const perIsolate = (values: readonly number[]) =>
        values.map((bytes, isolate): [string, number] => [`{isolate="${isolate}"}`, bytes]);
      family(
        "isolate_heap_used_bytes",
        "gauge",
        "V8 heap in use per isolate (0 serves the protected lanes), reported once a second.",
        perIsolate(used),
      );
      family(
        "isolate_heap_total_bytes",
        "gauge",
        "V8 heap allocated per isolate, reported once a second.",
        perIsolate(total),
      );
    }
  }
  family("egress_retry_budget_refusals_total", "counter", "Retries the rolling budget refused.", [[
    "",
    egress.retry_budget_refusals,
  ]]);
  family(
    "policy_denied_total",
    "counter",
    "Requests a live policy answered, by phase.",
    policy.stats.deniedCounts().map(([phase, n]) => [`{phase="${phase}"}`, n]),
  );
  family(
    "policy_dry_run_total",
    "counter",
    "Requests a policy in dry run would have answered, by phase and route.",
    policy.stats.dryRunCounts().map(([phase, route, n]) => [
      `{phase="${phase}",route="${escapeLabel(route)}"}`,
      n,
    ]),
  );
  family("policy_rate_limit_evictions_total", "counter", "Client buckets evicted (LRU).", [[
    "",
    policy.rateLimitEvictions,
  ]]);
  family("policy_ttl_block_evictions_total", "counter", "Blocked addresses evicted (LRU).", [[
    "",
    policy.ttlBlockEvictions,
  ]]);
  if (observe) renderObserved(observe, family, out);
  return out.join("\n") + "\n";
}

/** A label value with `\\`, `"` and newlines escaped (Prometheus text format). */
function escapeLabel(value: string): string {
  return value.replaceAll("\\", "\\\\").replaceAll('"', '\\"').replaceAll("\n", "\\n");
}

/** The per-request series, config and certificate families. */
function renderObserved(
  observe: ObserveFacts,
  family: (name: string, type: "counter" | "gauge", help: string, rows: [string, number][]) => void,
  out: string[],
): void {
  family(
    "tenant_labels",
    "gauge",
    "1 when tenant series are labelled with salted hashes; 0 when no salt is configured and tenant labels are withheld.",
    [["", observe.labelled ? 1 : 0]],
  );
  family(
    "requests_total",
    "counter",
    "Finished requests by lane, hashed tenant, route and status class (tenant and route only with a salt).",
    [...observe.metrics.requests()].sort(([a], [b]) => a < b ? -1 : 1).map(([key, n]) => {
      const [lane, tenant, route, cls] = key.split("\t");
      const labels = tenant === ""
        ? `{lane="${lane}",class="${cls}"}`
        : `{lane="${lane}",tenant="${tenant}",route="${escapeLabel(route)}",class="${cls}"}`;
      return [labels, n];
    }),
  );
  for (
    const [which, help] of [
      ["gateway", "Time the gateway added to a request (total minus upstream waiting), seconds."],
      ["upstream", "Time spent waiting for upstream response headers, seconds."],
    ] as const
  ) {
    const name = `portcullis_${which}_seconds`;
    out.push(`# HELP ${name} ${help}`, `# TYPE ${name} histogram`);
    for (const lane of LANE_NAMES) {
      const histogram = observe.metrics.histogram(lane, which);
      let cumulative = 0;
      BUCKETS.forEach((bound, i) => {
        cumulative += histogram[i];
        out.push(`${name}_bucket{lane="${lane}",le="${bound}"} ${cumulative}`);
      });
      cumulative += histogram[BUCKETS.length];
      out.push(`${name}_bucket{lane="${lane}",le="+Inf"} ${cumulative}`);
      out.push(`${name}_sum{lane="${lane}"} ${histogram[BUCKETS.length + 1]}`);
      out.push(`${name}_count{lane="${lane}"} ${cumulative}`);
    }
  }
  family("config_generation", "gauge", "The live configuration generation.", [[
    "",
    observe.generation,
  ]]);
  family(
    "config_rejected_pending",
    "gauge",
    "1 while the last load was rejected and the source still holds it.",
    [["", observe.rejectedPending ? 1 : 0]],
  );
  family(
    "tls_certificate_expiry_seconds",
    "gauge",
    "Seconds until each served certificate expires (labelled by the hashed first name).",
    observe.certificates.map((c) => [
      `{certificate="${c.label}"}`,
      Math.round((c.notAfter - Date.now()) / 1000),
    ]),
  );
}
