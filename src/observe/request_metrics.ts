/**
 * Per-request metrics: requests by lane, tenant label, route and status class, and two latency
 * histograms per lane — the time the gateway added, and the time spent waiting for upstreams.
 * Tenant labels are hashed (`TenantLabels`); with no salt the tenant and route are left out of the
 * series entirely. Keys come from configuration (lanes × tenants × routes × 5 classes), so the
 * table stays bounded; a cap guards it anyway.
 *
 * With request workers each worker keeps its own, and worker 0 adds the latest counts the others
 * sent ({@link RequestMetrics.absorb}).
 *
 * @module
 */
import { LANE_NAMES, type LaneName } from "../ledger/lane_names.ts";

/** Histogram bucket upper bounds, in seconds. */
export const BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];
const SERIES_CAP = 50_000;

/** One worker's counts as plain data. */
export interface MetricCounts {
  /** `lane\ttenant\troute\tclass` → count. */
  readonly requests: [string, number][];
  /** Per lane: gateway and upstream histograms, each `buckets…, +Inf, sum`. */
  readonly histograms: [string, number[], number[]][];
}

/** The per-request counters and histograms of one worker. */
export class RequestMetrics {
  readonly #requests = new Map<string, number>();
  readonly #gateway = new Map<string, Float64Array>();
  readonly #upstream = new Map<string, Float64Array>();
  readonly #others = new Map<number, MetricCounts>();

  constructor() {
    for (const lane of LANE_NAMES) {
      this.#gateway.set(lane, new Float64Array(BUCKETS.length + 2));
      this.#upstream.set(lane, new Float64Array(BUCKETS.length + 2));
    }
  }

  /**
   * Counts one finished request.
   *
   * @param tenant the hashed tenant label, or undefined to leave tenant and route out
   * @param gatewayS seconds the gateway added (total minus upstream waiting)
   * @param upstreamS seconds spent waiting for upstream response headers (0: no upstream)
   */
  record(
    lane: LaneName,
    tenant: string | undefined,
    route: string,
    status: number,
    gatewayS: number,
    upstreamS: number,
  ): void {
    const cls = status === 0 ? "none" : `${Math.min(Math.max(Math.floor(status / 100), 1), 5)}xx`;
    const key = tenant === undefined
      ? `${lane}\t\t\t${cls}`
      : `${lane}\t${tenant}\t${route}\t${cls}`;
    const count = this.#requests.get(key);
    if (count !== undefined) this.#requests.set(key, count + 1);
    else if (this.#requests.size < SERIES_CAP) this.#requests.set(key, 1);
    observe(this.#gateway.get(lane)!, gatewayS);
    if (upstreamS > 0) observe(this.#upstream.get(lane)!, upstreamS);
  }

  /** This worker's own counts, as plain data. */
  counts(): MetricCounts {
    return {
      requests: [...this.#requests],
      histograms: LANE_NAMES.map((lane) => [
        lane,
        [...this.#gateway.get(lane)!],
        [...this.#upstream.get(lane)!],
      ]),
    };
  }

  /** Keeps the latest counts request worker `worker` sent. */
  absorb(worker: number, counts: MetricCounts): void {
    this.#others.set(worker, counts);
  }

  /** Requests by key, every worker summed. */
  requests(): Map<string, number> {
    const total = new Map(this.#requests);
    for (const counts of this.#others.values()) {
      for (const [key, n] of counts.requests) total.set(key, (total.get(key) ?? 0) + n);
    }
    return total;
  }

  /** One lane's histogram (`gateway` or `upstream`), every worker summed: buckets, +Inf, sum. */
  histogram(lane: LaneName, which: "gateway" | "upstream"): number[] {
    const own = (which === "gateway" ? this.#gateway : this.#upstream).get(lane)!;
    const total = [...own];
    for (const counts of this.#others.values()) {
      const entry = counts.histograms.find(([name]) => name === lane);
      const theirs = entry?.[which === "gateway" ? 1 : 2] ?? [];
      theirs.forEach((n, i) => total[i] += n);
    }
    return total;
  }
}

/** Adds one observation: its bucket (cumulative later), the +Inf count, the sum. */
function observe(histogram: Float64Array, seconds: number): void {
  let i = 0;
  while (i < BUCKETS.length && seconds > BUCKETS[i]) i++;
  histogram[i]++;
  histogram[BUCKETS.length + 1] += seconds;
}
