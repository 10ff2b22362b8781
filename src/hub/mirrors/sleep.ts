/**
 * The one wait the mirror registry, the prober and the check-host.net client share: a timer that
 * a stop cuts short, so stopping the hub never waits out a 15-minute interval.
 *
 * @module
 */

/**
 * Waits `ms`, or less when `signal` aborts (it resolves either way, never rejects).
 *
 * @example
 * ```ts
 * import { sleep } from "./sleep.ts";
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
