/**
 * Whether a fleet store answers, as one isolate sees it. A connection the client calls ready is not
 * enough: a store that hangs (a stopped process, a machine out of memory, a network that drops
 * packets) keeps its TCP connection open, so the client stays ready while every decision waits out
 * its `timeout_ms` and falls back — and `/v1/health` and `portcullis_policy_store_up` said `up`
 * throughout (seen with a SIGSTOPped redis-server). Here the store is up only while its connection
 * is ready **and** it answers in time:
 *
 * - up after the first answer in time on a ready connection (a ping is sent the moment the
 *   connection is ready: the kernel accepts a connection for a stopped server too);
 * - down after {@link LATE_LIMIT} answers in a row came late (decisions, block publications or
 *   pings), or when the connection is lost;
 * - up again on the first answer in time.
 *
 * While it is down decisions fall back at once, without a round trip, so nothing probes the store
 * but this: a ping with the deadline every {@link PROBE_DOWN_MS} while down, and every
 * {@link PROBE_UP_MS} while up when nothing else answered in that time (an isolate that makes no
 * decisions — worker 0 beside request workers — would otherwise never see its store hang). At most
 * {@link LATE_LIMIT} pings wait unanswered at once, so a long hang does not queue pings without
 * bound. Each change is reported once, with its reason.
 *
 * @module
 */

/** Late answers in a row that make a ready store down (one late answer is a hiccup). */
export const LATE_LIMIT = 3;
/** How often a down store is pinged (the longest it stays down after it answers again). */
export const PROBE_DOWN_MS = 250;
/** How often an up store is pinged when nothing else was answered meanwhile. */
export const PROBE_UP_MS = 1000;

/** What {@link StoreLiveness} drives. */
export interface LivenessHooks {
  /**
   * Sends one ping; settles when the store answered it, however late, or the connection failed
   * (the link reports it answered in time or late on its own).
   */
  readonly ping: () => Promise<unknown>;
  /** Told each change between up and down, with why it changed. */
  readonly changed: (up: boolean, reason: string) => void;
  /** A monotonic clock in milliseconds. */
  readonly clock: () => number;
}

/** One store's liveness in one isolate. */
export class StoreLiveness {
  readonly #hooks: LivenessHooks;
  #ready = false;
  #answering = false;
  #late = 0;
  #pings = 0;
  #lastAnswer = Number.NEGATIVE_INFINITY;
  #lastPing = Number.NEGATIVE_INFINITY;

  /** @param hooks the ping, the change report and the clock */
  constructor(hooks: LivenessHooks) {
    this.#hooks = hooks;
  }

  /** True while the connection is ready and the store answers in time. */
  get up(): boolean {
    return this.#ready && this.#answering;
  }

  /** The connection is ready (again): pinged at once, up on the first answer in time. */
  ready(): void {
    this.#ready = true;
    this.#probe();
  }

  /** The connection was lost or refused. */
  lost(): void {
    const was = this.up;
    this.#ready = false;
    this.#answering = false;
    this.#late = 0;
    if (was) this.#hooks.changed(false, "its connection was lost");
  }

  /** A command was answered within its deadline. */
  answered(): void {
    this.#late = 0;
    this.#lastAnswer = this.#hooks.clock();
    if (this.#answering || !this.#ready) return;
    this.#answering = true;
    this.#hooks.changed(true, "it answers in time");
  }

  /** A command's deadline passed before its answer. */
  late(deadlineMs: number): void {
    if (++this.#late < LATE_LIMIT || !this.#answering) return;
    const was = this.up;
    this.#answering = false;
    if (was) {
      this.#hooks.changed(false, `${LATE_LIMIT} answers in a row came later than ${deadlineMs} ms`);
    }
  }

  /** Pings when due (the link's timer calls this every {@link PROBE_DOWN_MS}). */
  tick(): void {
    if (!this.#ready) return;
    const now = this.#hooks.clock();
    // An up store with a late answer outstanding is asked again soon: a hang without traffic shows
    // within about LATE_LIMIT × PROBE_DOWN_MS.
    const every = this.up && this.#late === 0 ? PROBE_UP_MS : PROBE_DOWN_MS;
    if (now - Math.max(this.#lastAnswer, this.#lastPing) < every) return;
    this.#probe();
  }

  #probe(): void {
    if (this.#pings >= LATE_LIMIT) return;
    this.#pings++;
    this.#lastPing = this.#hooks.clock();
    this.#hooks.ping().catch(() => {}).finally(() => this.#pings--);
  }
}
