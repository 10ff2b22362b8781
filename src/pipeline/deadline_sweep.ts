/**
 * Deadlines of requests still waiting for their reply, checked by one periodic sweep per lane
 * server instead of one timer per request (a timer per request measurably cost proxy throughput).
 * A deadline fires within one sweep interval after it passes; the interval is a tenth of the
 * lane's deadline, between 10 and 250 ms.
 *
 * @module
 */

/** Something with a deadline and an action to take when it passes. */
export interface Expiring {
  readonly deadline: number;
  expire(): void;
}

/** The pending deadlines of one lane server. */
export class DeadlineSweep {
  readonly #pending = new Set<Expiring>();
  readonly #intervalMs: number;
  readonly #now: () => number;
  #timer: number | undefined;

  /**
   * @param laneDeadlineMs the lane's deadline (sets the sweep interval)
   * @param now the clock the deadlines are on
   */
  constructor(laneDeadlineMs: number, now: () => number) {
    this.#intervalMs = Math.min(250, Math.max(10, Math.floor(laneDeadlineMs / 10)));
    this.#now = now;
  }

  /** Starts watching `entry`; returns the function that stops watching it. */
  add(entry: Expiring): () => void {
    this.#pending.add(entry);
    if (this.#timer === undefined) {
      // Deno's timers are numbers (node's types say Timeout); unref: it must not keep a process up.
      const timer = setInterval(() => this.#sweep(), this.#intervalMs) as unknown as number;
      Deno.unrefTimer(timer);
      this.#timer = timer;
    }
    return () => this.#pending.delete(entry);
  }

  /** Stops the sweep (the server closed). */
  stop(): void {
    if (this.#timer !== undefined) clearInterval(this.#timer);
    this.#timer = undefined;
    this.#pending.clear();
  }

  #sweep(): void {
    if (this.#pending.size === 0) return;
    const now = this.#now();
    for (const entry of this.#pending) {
      if (!(now < entry.deadline)) {
        this.#pending.delete(entry);
        entry.expire();
      }
    }
  }
}
