/**
 * How long a dead request worker waits before it is started again: 100 ms after the first death,
 * doubling with each death that follows (a replacement that failed to boot counts as one) up to
 * 30 s, so a worker that dies at once every time costs a start every 30 s, never a tight loop.
 * A worker that served for a minute has earned a fresh start: its next death waits 100 ms again.
 * Pure arithmetic over the times it is given, so tests drive it without a clock.
 *
 * @module
 */

/** The delays of a {@link RestartBackoff}, in milliseconds. */
export interface BackoffSettings {
  /** The wait after the first death. */
  readonly firstMs: number;
  /** The longest wait. */
  readonly maxMs: number;
  /** Serving this long since it was armed resets the doubling. */
  readonly resetAfterMs: number;
}

/** 100 ms doubling to 30 s; reset after a minute of serving. */
export const RESTART_BACKOFF: BackoffSettings = {
  firstMs: 100,
  maxMs: 30_000,
  resetAfterMs: 60_000,
};

/** The restart delays of one worker slot, across the workers that fill it. */
export class RestartBackoff {
  readonly #settings: BackoffSettings;
  /** Deaths since the slot last served for `resetAfterMs`. */
  #deaths = 0;
  /** When the slot's current worker was armed; undefined while it has none serving. */
  #servingSince?: number;

  constructor(settings: BackoffSettings = RESTART_BACKOFF) {
    this.#settings = settings;
  }

  /** The slot's worker was armed at `now` (milliseconds on any monotonic clock). */
  served(now: number): void {
    this.#servingSince = now;
  }

  /**
   * The slot's worker died at `now` (or its replacement failed to boot).
   *
   * @returns how long to wait before starting the next one
   * @example
   * ```ts
   * import assert from "node:assert/strict";
   * import { RestartBackoff } from "./restart_backoff.ts";
   * const backoff = new RestartBackoff();
   * assert.deepEqual([0, 1, 2, 3].map((t) => backoff.died(t)), [100, 200, 400, 800]);
   * backoff.served(10);
   * assert.equal(backoff.died(60_010), 100);
   * ```
   */
  died(now: number): number {
    const { firstMs, maxMs, resetAfterMs } = this.#settings;
    const since = this.#servingSince;
    if (since !== undefined && now - since >= resetAfterMs) this.#deaths = 0;
    this.#servingSince = undefined;
    // Once the wait reached the cap the count stops growing, so it never overflows.
    const previous = this.#deaths === 0 ? 0 : firstMs * 2 ** (this.#deaths - 1);
    if (previous < maxMs) this.#deaths++;
    return Math.min(firstMs * 2 ** (this.#deaths - 1), maxMs);
  }
}
