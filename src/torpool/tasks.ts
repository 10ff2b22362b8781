/**
 * The pool's background work as one group: every promise it starts is tracked, waits are
 * cancelled when the group stops, and stopping waits for whatever is still running — so a stopped
 * pool leaves no timer and no operation behind (the test sanitizers check both).
 *
 * @module
 */

/** Tracked work and cancellable waits, ended together. */
export class TaskGroup {
  readonly #pending = new Set<Promise<unknown>>();
  readonly #stopping = new AbortController();
  readonly #onError: (error: unknown) => void;

  /** @param onError told about a tracked promise that rejected (it is not rethrown) */
  constructor(onError: (error: unknown) => void) {
    this.#onError = onError;
  }

  /** True once {@link stop} was called. */
  get stopped(): boolean {
    return this.#stopping.signal.aborted;
  }

  /** Tracks `promise` until it settles. */
  track(promise: Promise<unknown>): void {
    const tracked = promise.catch(this.#onError).finally(() => this.#pending.delete(tracked));
    this.#pending.add(tracked);
  }

  /** Waits `ms` (an unref'd timer), or less when the group stops. */
  sleep(ms: number): Promise<void> {
    const signal = this.#stopping.signal;
    return new Promise((resolve) => {
      const onAbort = () => {
        clearTimeout(timer);
        resolve();
      };
      const timer = setTimeout(() => {
        signal.removeEventListener("abort", onAbort);
        resolve();
      }, ms);
      Deno.unrefTimer(timer);
      signal.addEventListener("abort", onAbort, { once: true });
    });
  }

  /** Marks the group stopped (waits end at once). */
  stop(): void {
    this.#stopping.abort();
  }

  /** Resolves when every tracked promise has settled, including those tracked meanwhile. */
  async settled(): Promise<void> {
    while (this.#pending.size > 0) await Promise.allSettled([...this.#pending]);
  }
}
