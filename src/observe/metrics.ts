/**
 * Prometheus text exposition of the ledger and the lane counters. Counts, gauges and states only:
 * never payload bytes, client addresses or plain tenant hosts.
 *
 * Each `…Families` function reads one group of families from its input, as data (`Family` in
 * `exposition.ts`, which holds the text format and the sample builders); {@link renderMetrics}
 * lists the groups in page order and `expose` writes them. The groups live by what they read:
 * `metrics_ledger.ts` (ledger, responses), `metrics_process.ts` (egress, sockets, policy),
 * `process_stats.ts` (the standard `process_*` series) and `metrics_requests.ts` (per-request
 * series, config); the page order is kept here alone.
 *
 * @module
 */
import type { EgressSnapshot } from "../egress/egress.ts";
import type { LedgerSnapshot } from "../ledger/snapshot.ts";
import { byLabel, counter, expose, type Family, gauge, only } from "./exposition.ts";
import {
  connectionFamilies,
  ledgerFamilies,
  reservationFamilies,
  responseFamilies,
} from "./metrics_ledger.ts";
import {
  egressInstanceFamilies,
  egressPoolFamilies,
  type LogFacts,
  logFamilies,
  type PolicyFacts,
  policyFamilies,
  type SocketFacts,
  socketFamilies,
} from "./metrics_process.ts";
import { configFamilies, type ObserveFacts, requestFamilies } from "./metrics_requests.ts";
import { type ProcessFacts, processFamilies } from "./process_stats.ts";
import type { ResponseStats } from "./response_stats.ts";
import { type LaneWorkers, workerFamilies } from "./worker_census.ts";

export type { LogFacts, PolicyFacts, SocketFacts } from "./metrics_process.ts";
export type { ObserveFacts } from "./metrics_requests.ts";
export { type ProcessFacts, readProcessFacts } from "./process_stats.ts";

/** Edge-level facts rendered beside the ledger. */
export interface EdgeFacts {
  readonly version: string;
  readonly draining: boolean;
  readonly ready: boolean;
  /** Upstream sockets and descriptors, summed over the isolates (see lanes/local_health.ts). */
  readonly sockets?: SocketFacts;
  /** Log lines by stream, summed over the isolates; left out when absent. */
  readonly logs?: LogFacts;
  /** Each lane's request workers (worker_census.ts); left out when absent. */
  readonly workers?: readonly LaneWorkers[];
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
  /** Memory, CPU time and start time (`readProcessFacts`). */
  readonly process: ProcessFacts;
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
  const fds = edge.sockets?.descriptors;
  return expose([
    ...processFamilies(input.process, fds?.limit_exact ? fds.limit ?? undefined : undefined),
    ...lifecycleFamilies(edge),
    ...workerFamilies(edge.workers),
    ...ledgerFamilies(ledger),
    ...reservationFamilies(ledger),
    ...connectionFamilies(ledger),
    ...responseFamilies(stats),
    ...egressInstanceFamilies(egress),
    ...egressPoolFamilies(egress),
    ...socketFamilies(edge.sockets),
    ...logFamilies(edge.logs),
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

/** Version, readiness and draining. */
function lifecycleFamilies(facts: EdgeFacts): Family[] {
  return [
    gauge(
      "build_info",
      "Version of the running gateway.",
      byLabel("version", [[facts.version, 1]]),
    ),
    gauge("ready", "1 when every lane is bound and accepting.", only(facts.ready ? 1 : 0)),
    gauge("draining", "1 while the gateway drains.", only(facts.draining ? 1 : 0)),
  ];
}
