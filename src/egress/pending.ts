/**
 * Requests in flight per backend, bounded by the backend's `max_pending`: a backend that is slow
 * or stuck cannot gather every request of the lane while the others wait behind it. A request
 * counts from its attempt's start until its response has ended (or the attempt failed); a backend
 * at its bound is passed over for another, and when every backend of a route is at its bound the
 * request is answered 503 `upstream_saturated` at once. Counted per isolate: with request workers
 * each keeps its own count, so an edge holds at most `max_pending` × workers.
 *
 * @module
 */

/** Requests in flight, by backend key. */
export class PendingBackends {
  readonly #counts = new Map<string, number>();

  /** Requests in flight to `key` now. */
  count(key: string): number {
    return this.#counts.get(key) ?? 0;
  }

  /** True when `key` holds `max` or more (never with no bound). */
  full(key: string, max: number | undefined): boolean {
    return max !== undefined && this.count(key) >= max;
  }

  /**
   * Counts one request in flight to `key`.
   *
   * @returns the release, which counts it out once however often it is called
   * @example
   * ```ts
   * import { PendingBackends } from "./pending.ts";
   * const pending = new PendingBackends();
   * const release = pending.enter("http://a.test");
   * pending.full("http://a.test", 1); // true
   * release();
   * pending.full("http://a.test", 1); // false
   * ```
   */
  enter(key: string): () => void {
    this.#counts.set(key, this.count(key) + 1);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const left = this.count(key) - 1;
      if (left > 0) this.#counts.set(key, left);
      else this.#counts.delete(key);
    };
  }
}
