/**
 * The counters each public worker sends worker 0 twice a second (policy denials, requests and
 * latency histograms, fleet-store counters), kept monotonic across the workers that fill one slot.
 * Worker 0 keeps the latest counts of each slot and adds them to its own; a replacement counts from
 * zero, so the counts of every dead worker of a slot are carried and added to what the replacement
 * sends — otherwise `/metrics` counters would drop after a restart, which Prometheus reads as a
 * reset and a rate over it as a burst. What a worker counted in the last half second before it died
 * is not carried (it never sent it). A store's `up` and `isolates` are gauges, not counters: a dead
 * worker's are not carried.
 *
 * @module
 */
import type { PolicyCounts } from "../policy/policy_stats.ts";
import type { MetricCounts } from "../observe/request_metrics.ts";
import type { StoreCounts } from "../fleet/store_counters.ts";
import type { EdgeServices } from "../pipeline/services.ts";

/** What one worker sends in a `counts` message. */
export interface WorkerCounts {
  readonly policy: PolicyCounts;
  readonly requests: MetricCounts;
  readonly stores?: StoreCounts;
}

/** Each slot's counts: the latest a worker sent, plus what its dead predecessors had counted. */
export class CarriedCounts {
  /** By slot: the sum of the last counts of every worker of the slot that died. */
  readonly #carried = new Map<number, WorkerCounts>();
  /** By slot: the last counts its current worker sent. */
  readonly #last = new Map<number, WorkerCounts>();

  /** Worker `slot` sent `counts`: worker 0's services absorb them plus the slot's carried counts. */
  absorb(services: EdgeServices, slot: number, counts: WorkerCounts): void {
    this.#last.set(slot, counts);
    this.#apply(services, slot, addCounts(this.#carried.get(slot), counts));
  }

  /** Worker `slot` died: what it last sent is carried for the workers that replace it. */
  retire(services: EdgeServices, slot: number): void {
    const last = this.#last.get(slot);
    if (!last) return;
    this.#last.delete(slot);
    const carried = addCounts(this.#carried.get(slot), { ...last, stores: withoutGauges(last) });
    this.#carried.set(slot, carried);
    this.#apply(services, slot, carried);
  }

  #apply(services: EdgeServices, slot: number, counts: WorkerCounts): void {
    services.policyStats.absorb(slot, counts.policy);
    services.observer.metrics.absorb(slot, counts.requests);
    if (counts.stores) services.storeCounters?.absorb(slot, counts.stores);
  }
}

/** `next` plus `base` (when there is one), key by key. */
function addCounts(base: WorkerCounts | undefined, next: WorkerCounts): WorkerCounts {
  if (!base) return next;
  return {
    policy: {
      denied: addPairs(base.policy.denied, next.policy.denied),
      dryRun: addPairs(base.policy.dryRun, next.policy.dryRun),
    },
    requests: {
      requests: addPairs(base.requests.requests, next.requests.requests),
      histograms: addHistograms(base.requests.histograms, next.requests.histograms),
    },
    stores: base.stores || next.stores
      ? addStores(base.stores ?? [], next.stores ?? [])
      : undefined,
  };
}

/** Two `[key, count]` lists summed by key. */
function addPairs(a: readonly [string, number][], b: readonly [string, number][]) {
  const sum = new Map(a);
  for (const [key, n] of b) sum.set(key, (sum.get(key) ?? 0) + n);
  return [...sum];
}

/** Two histogram lists summed bucket by bucket, by lane and histogram. */
function addHistograms(
  a: MetricCounts["histograms"],
  b: MetricCounts["histograms"],
): MetricCounts["histograms"] {
  const sum = new Map<string, MetricCounts["histograms"][number]>();
  for (const [lane, which, counts] of [...a, ...b]) {
    const into = sum.get(`${lane}\t${which}`)?.[2];
    if (into) counts.forEach((n, i) => into[i] = (into[i] ?? 0) + n);
    else sum.set(`${lane}\t${which}`, [lane, which, [...counts]]);
  }
  return [...sum.values()];
}

/** Two stores' counters summed by URL and field. */
function addStores(a: StoreCounts, b: StoreCounts): StoreCounts {
  const sum = new Map(a.map(([url, count]) => [url, { ...count }]));
  for (const [url, count] of b) {
    const into = sum.get(url);
    if (!into) {
      sum.set(url, { ...count });
      continue;
    }
    for (const field of Object.keys(count) as (keyof typeof count)[]) into[field] += count[field];
  }
  return [...sum];
}

/** A dead worker's store counters without its gauges (`up`, `isolates`): it holds no store now. */
function withoutGauges(counts: WorkerCounts): StoreCounts | undefined {
  return counts.stores?.map(([url, count]) => [url, { ...count, up: 0, isolates: 0 }]);
}
