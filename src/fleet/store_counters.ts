/**
 * What the fleet stores did, per store: decisions the store made, decisions the edge made on its
 * own table instead (the fallback) and why (the store was down, or late, or failed), refusals the
 * local pre-check made without a round trip, and blocks published and received. Each isolate
 * counts its own; with request workers, worker 0 keeps the latest counts each worker sent (they
 * ride the policy counters' message) and reports the sum, so `/v1/health` and `/metrics` show the
 * whole edge.
 *
 * @module
 */

/** One store's counters. */
export interface StoreCount {
  /** 1 while this isolate's connection is ready (a sum over isolates is the number up). */
  up: number;
  /** Isolates that use the store (a sum over isolates). */
  isolates: number;
  /** Round trips sent: decisions, block publications and block scans. */
  roundTrips: number;
  /** Decisions the store made. */
  decisions: number;
  /** Decisions made on the edge's own table instead. */
  fallbacks: number;
  /** Of the fallbacks: the store did not answer within `timeout_ms`. */
  timeouts: number;
  /** Of the fallbacks: the store was known to be down (no round trip was tried). */
  down: number;
  /** Refusals the local pre-check made (no round trip). */
  prechecked: number;
  /** Blocks this edge published. */
  blocksPublished: number;
  /** Blocks other edges published that this edge wrote into its tables. */
  blocksReceived: number;
}

/** Counters of every store, by URL, as plain data. */
export type StoreCounts = [url: string, count: StoreCount][];

/** A fresh set of counters. */
export function emptyCount(): StoreCount {
  return {
    up: 0,
    isolates: 0,
    roundTrips: 0,
    decisions: 0,
    fallbacks: 0,
    timeouts: 0,
    down: 0,
    prechecked: 0,
    blocksPublished: 0,
    blocksReceived: 0,
  };
}

/**
 * One isolate's store counters, and (in worker 0) the latest counts of every other worker.
 *
 * @internal
 */
export class StoreCounters {
  readonly #own = new Map<string, StoreCount>();
  readonly #others = new Map<number, StoreCounts>();

  /** This isolate's counters of `url` (created at first use). */
  of(url: string): StoreCount {
    let count = this.#own.get(url);
    if (!count) this.#own.set(url, count = { ...emptyCount(), isolates: 1 });
    return count;
  }

  /** This isolate's counts, as plain data. */
  counts(): StoreCounts {
    return [...this.#own].map(([url, count]) => [url, { ...count }]);
  }

  /** Keeps the latest counts request worker `worker` sent (they replace its earlier ones). */
  absorb(worker: number, counts: StoreCounts): void {
    this.#others.set(worker, counts);
  }

  /**
   * Every store's counters summed over the isolates, by URL order.
   *
   * @example
   * ```ts
   * import { StoreCounters } from "./store_counters.ts";
   * const counters = new StoreCounters();
   * counters.of("redis://127.0.0.1:6379").decisions++;
   * counters.absorb(1, [["redis://127.0.0.1:6379", { ...counters.of("redis://127.0.0.1:6379") }]]);
   * counters.total()[0][1].decisions; // 2
   * ```
   */
  total(): StoreCounts {
    const sum = new Map<string, StoreCount>();
    for (const counts of [this.counts(), ...this.#others.values()]) {
      for (const [url, count] of counts) {
        const into = sum.get(url) ?? sum.set(url, emptyCount()).get(url)!;
        for (const field of Object.keys(count) as (keyof StoreCount)[]) {
          into[field] += count[field];
        }
      }
    }
    return [...sum].sort(([a], [b]) => a < b ? -1 : a > b ? 1 : 0);
  }
}
