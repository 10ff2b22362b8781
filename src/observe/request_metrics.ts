/**
 * Per-request metrics: requests by lane, tenant label, route and status class, and three latency
 * histograms per lane — the whole request as the gateway saw it (first byte read to last byte
 * written), the time the gateway added, and the time spent waiting for upstreams. Tenant labels
 * are hashed (`TenantLabels`); with no salt the tenant and route are left out of the series
 * entirely. Keys come from configuration (lanes × tenants × routes × 6 classes), so the table
 * stays bounded; a cap guards it anyway.
 *
 * The buckets start at 100 µs: the gateway adds about 0.1 ms to a proxied request, so a lowest
 * bucket of 1 ms (the usual default) would put every request it serves well in the first bucket.
 *
 * With request workers each worker keeps its own, and worker 0 adds the latest counts the others
 * sent ({@link RequestMetrics.absorb}).
 *
 * @module
 */
import { LANE_NAMES, type LaneName } from "../ledger/lane_names.ts";

/** Histogram bucket upper bounds, in seconds: 100 µs to 60 s. */
export const BUCKETS = [
  0.0001,
  0.00025,
  0.0005,
  0.001,
  0.0025,
  0.005,
  0.01,
  0.025,
  0.05,
  0.1,
  0.25,
  0.5,
  1,
  2.5,
  5,
  10,
  30,
  60,
];
const SERIES_CAP = 50_000;

/** The histograms kept per lane. */
export const HISTOGRAMS = ["request", "gateway", "upstream"] as const;
/** One of {@link HISTOGRAMS}. */
export type HistogramName = typeof HISTOGRAMS[number];

/** One worker's counts as plain data. */
export interface MetricCounts {
  /** `lane\ttenant\troute\tclass` → count. */
  readonly requests: [string, number][];
  /** Per lane and histogram: `buckets…, +Inf, sum`. */
  readonly histograms: [string, HistogramName, number[]][];
}

/** One finished request, as {@link RequestMetrics.record} counts it. */
export interface FinishedRequest {
  readonly lane: LaneName;
  /** The hashed tenant label, or undefined to leave tenant and route out. */
  readonly tenant: string | undefined;
  readonly route: string;
  /** The status sent, or 0 when the connection was dropped or held instead. */
  readonly status: number;
  /** Seconds from the request's arrival to its last byte written. */
  readonly totalS: number;
  /** Seconds spent waiting for upstream response headers (0: no upstream). */
  readonly upstreamS: number;
}

/** The per-request counters and histograms of one worker. */
export class RequestMetrics {
  readonly #requests = new Map<string, number>();
  /** Per lane, per histogram: buckets, +Inf, sum. */
  readonly #histograms = new Map<LaneName, Record<HistogramName, Float64Array>>();
  readonly #others = new Map<number, MetricCounts>();

  constructor() {
    for (const lane of LANE_NAMES) {
      const empty = () => new Float64Array(BUCKETS.length + 2);
      this.#histograms.set(lane, { request: empty(), gateway: empty(), upstream: empty() });
    }
  }

  /** Counts one finished request: its series, and its time in each histogram. */
  record(request: FinishedRequest): void {
    const { lane, tenant, route, status, totalS, upstreamS } = request;
    const cls = status === 0 ? "none" : `${Math.min(Math.max(Math.floor(status / 100), 1), 5)}xx`;
    const key = tenant === undefined
      ? `${lane}\t\t\t${cls}`
      : `${lane}\t${tenant}\t${route}\t${cls}`;
    const count = this.#requests.get(key);
    if (count !== undefined) this.#requests.set(key, count + 1);
    else if (this.#requests.size < SERIES_CAP) this.#requests.set(key, 1);
    const histograms = this.#histograms.get(lane)!;
    observe(histograms.request, totalS);
    observe(histograms.gateway, Math.max(0, totalS - upstreamS));
    if (upstreamS > 0) observe(histograms.upstream, upstreamS);
  }

  /** This worker's own counts, as plain data. */
  counts(): MetricCounts {
    return {
      requests: [...this.#requests],
      histograms: LANE_NAMES.flatMap((lane) =>
        HISTOGRAMS.map((which): [string, HistogramName, number[]] => [
          lane,
          which,
          [...this.#histograms.get(lane)![which]],
        ])
      ),
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

  /** One lane's histogram, every worker summed: buckets, +Inf, sum. */
  histogram(lane: LaneName, which: HistogramName): number[] {
    const total = [...this.#histograms.get(lane)![which]];
    for (const counts of this.#others.values()) {
      const entry = counts.histograms.find(([l, w]) => l === lane && w === which);
      entry?.[2].forEach((n, i) => total[i] += n);
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
