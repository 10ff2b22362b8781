/**
 * Waiting between attempts, shared by everything that follows a hub (an edge's config stream, a
 * door's stream) and by the hub's own timers (the mirror registry, the prober): the delay after a
 * run of failures, and a wait that a stop cuts short, so stopping never waits out an interval.
 *
 * @module
 */

/** The first delay and the cap of a backoff (a config's `backoff_initial_ms` / `backoff_max_ms`). */
export interface BackoffSettings {
  readonly backoffInitialMs: number;
  readonly backoffMaxMs: number;
}

/**
 * The wait before the next attempt after `failures` in a row: a cap that doubles from the first
 * delay up to the maximum, jittered over the cap's upper half (so a fleet that lost its hub at once
 * does not come back at once).
 *
 * @example
 * ```ts
 * import { backoffDelay } from "./backoff.ts";
 * const settings = { backoffInitialMs: 250, backoffMaxMs: 30_000 };
 * backoffDelay(settings, 1, () => 0); // 125: half of the first delay
 * backoffDelay(settings, 20, () => 1); // 30000: the cap
 * ```
 */
export function backoffDelay(
  settings: BackoffSettings,
  failures: number,
  random: () => number,
): number {
  const { backoffInitialMs, backoffMaxMs } = settings;
  const cap = Math.min(backoffMaxMs, backoffInitialMs * 2 ** Math.min(failures - 1, 30));
  return Math.round(cap / 2 + random() * cap / 2);
}

/**
 * Waits `ms`, or less when `signal` aborts (it resolves either way, never rejects).
 *
 * @example
 * ```ts
 * import { sleep } from "./backoff.ts";
 * await sleep(60_000, AbortSignal.abort()); // returns at once
 * ```
 */
export function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal.removeEventListener("abort", done);
      resolve();
    }
    signal.addEventListener("abort", done);
  });
}

/**
 * Long polls held until something changes: each {@link hold} waits up to its time, or until
 * {@link wake} (a change, a stop) or its signal ends it. The hub's config feed and its door feed
 * hold their polls with one of these.
 */
export class HeldPolls {
  readonly #waiters = new Set<() => void>();

  /** Polls held now. */
  get size(): number {
    return this.#waiters.size;
  }

  /** Waits `ms`, or less when woken or when `signal` aborts (it never rejects). */
  hold(ms: number, signal?: AbortSignal): Promise<void> {
    return new Promise<void>((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.#waiters.delete(done);
        signal?.removeEventListener("abort", done);
        resolve();
      };
      const timer = setTimeout(done, ms);
      this.#waiters.add(done);
      signal?.addEventListener("abort", done);
    });
  }

  /** Ends every hold now. */
  wake(): void {
    for (const waiter of [...this.#waiters]) waiter();
  }
}
