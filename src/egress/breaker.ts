/**
 * A circuit breaker for one SOCKS instance (DESIGN §4): closed, it keeps the last `window` outcomes
 * in a fixed ring and opens when at least `minSamples` of them are in and the failure share reaches
 * `failureRatio`; open, it refuses until one probe interval has passed and then admits exactly one
 * trial request, whose outcome closes it (with an empty window) or opens it again from that time.
 *
 * Outcomes carry the breaker's {@link Breaker.generation} from when the request was admitted, so a
 * slow request admitted before the breaker opened cannot count against the next closed period: a
 * "pass" outcome that finishes after the breaker opened is ignored, as is a trial outcome when no
 * trial is in flight. A trial that never reports is presumed lost after one more probe interval,
 * and the next caller gets a new trial, so a leaked trial cannot wedge the breaker half-open.
 *
 * Pure logic: every method takes the time (ms, monotonic) from the caller.
 *
 * @module
 */

/** Options for {@link Breaker}. */
export interface BreakerOptions {
  /** Outcomes kept in the rolling window. Default 20. */
  readonly window?: number;
  /** Outcomes needed in the window before the breaker may open. Default 10. */
  readonly minSamples?: number;
  /** Failure share (0 to 1) of the window that opens the breaker. Default 0.5. */
  readonly failureRatio?: number;
  /** How long an open breaker refuses before it admits one trial (ms). */
  readonly probeIntervalMs: number;
}

/** What the breaker lets through: everything, one trial, or nothing. */
export type BreakerState = "closed" | "open" | "half_open";

/** The answer to {@link Breaker.acquire}. */
export type BreakerAdmission = "pass" | "trial" | "refuse";

/** Counters for reporting, as {@link Breaker.snapshot} returns them. */
export interface BreakerSnapshot {
  state: BreakerState;
  /** Outcomes in the rolling window. */
  samples: number;
  /** Failures among them. */
  failures: number;
  /** When the breaker last opened (ms), or null while closed. */
  opened_at: number | null;
  /** Times the breaker opened since it was made (a failed trial counts again). */
  opens: number;
  /** Milliseconds until an open breaker admits a trial; 0 otherwise. */
  retry_in_ms: number;
}

/** Defaults of the optional {@link BreakerOptions}. */
export const BREAKER_DEFAULTS = Object.freeze({ window: 20, minSamples: 10, failureRatio: 0.5 });

/**
 * The breaker of one instance.
 *
 * @example
 * ```ts
 * import { Breaker } from "./breaker.ts";
 * const breaker = new Breaker({ window: 4, minSamples: 2, failureRatio: 0.5, probeIntervalMs: 1000 });
 * breaker.record(false, false, 0);
 * breaker.record(false, false, 0); // 2 of 2 failed: open
 * if (breaker.acquire(500) !== "refuse") throw new Error("open breaker passed");
 * if (breaker.acquire(1000) !== "trial") throw new Error("no trial after the probe interval");
 * breaker.record(true, true, 1010);
 * if (breaker.state(1010) !== "closed") throw new Error("trial success did not close");
 * ```
 */
export class Breaker {
  readonly #window: number;
  readonly #minSamples: number;
  readonly #failureRatio: number;
  readonly #probeIntervalMs: number;
  /** 1 = failure, 0 = success; slots [0, samples) are valid until the ring first wraps. */
  readonly #ring: Uint8Array;
  #next = 0;
  #samples = 0;
  #failures = 0;
  #openedAt: number | null = null;
  #opens = 0;
  #trialSince: number | null = null;

  /**
   * @param options window, thresholds and probe interval
   * @throws {RangeError} when a number is out of range, or `minSamples` exceeds `window` (the
   *   breaker could never open)
   */
  constructor(options: BreakerOptions) {
    const window = options.window ?? BREAKER_DEFAULTS.window;
    const minSamples = options.minSamples ?? BREAKER_DEFAULTS.minSamples;
    const failureRatio = options.failureRatio ?? BREAKER_DEFAULTS.failureRatio;
    if (!Number.isInteger(window) || window < 1) {
      throw new RangeError(`Breaker window must be a whole number ≥ 1, got "${window}"`);
    }
    if (!Number.isInteger(minSamples) || minSamples < 1 || minSamples > window) {
      throw new RangeError(
        `Breaker minSamples must be a whole number from 1 to the window "${window}", got "${minSamples}"`,
      );
    }
    if (!(failureRatio >= 0 && failureRatio <= 1)) {
      throw new RangeError(`Breaker failureRatio must be from 0 to 1, got "${failureRatio}"`);
    }
    if (!(options.probeIntervalMs >= 0 && Number.isFinite(options.probeIntervalMs))) {
      throw new RangeError(
        `Breaker probeIntervalMs must be a finite number ≥ 0, got "${options.probeIntervalMs}"`,
      );
    }
    this.#window = window;
    this.#minSamples = minSamples;
    this.#failureRatio = failureRatio;
    this.#probeIntervalMs = options.probeIntervalMs;
    this.#ring = new Uint8Array(window);
  }

  /** Changes each time the breaker opens; pass it back to {@link record} to drop stale outcomes. */
  get generation(): number {
    return this.#opens;
  }

  /** The state at `now`: an open breaker whose probe interval has passed reads "half_open". */
  state(now: number): BreakerState {
    if (this.#openedAt === null) return "closed";
    return now - this.#openedAt >= this.#probeIntervalMs ? "half_open" : "open";
  }

  /** What {@link acquire} would answer at `now`, without marking a trial in flight. */
  peek(now: number): BreakerAdmission {
    const state = this.state(now);
    if (state === "closed") return "pass";
    if (state === "open") return "refuse";
    const trialLost = this.#trialSince !== null && now - this.#trialSince >= this.#probeIntervalMs;
    return this.#trialSince === null || trialLost ? "trial" : "refuse";
  }

  /**
   * Asks to send one request: "closed" → "pass"; "half_open" with no trial in flight → "trial"
   * (and marks the trial in flight); otherwise "refuse".
   */
  acquire(now: number): BreakerAdmission {
    const answer = this.peek(now);
    if (answer === "trial") this.#trialSince = now;
    return answer;
  }

  /**
   * Records the outcome of a request that acquired "pass" or "trial".
   *
   * Closed: the outcome enters the rolling window, and the breaker opens (window cleared) once
   * samples ≥ minSamples and failures / samples ≥ failureRatio. A trial success closes the breaker
   * with an empty window; a trial failure opens it again from `now`. A "pass" outcome arriving
   * while the breaker is not closed, or whose `generation` is not the current one, is ignored, as
   * is a trial outcome with no trial in flight.
   *
   * @param ok whether the request succeeded
   * @param wasTrial whether it was admitted as the trial
   * @param now the time it finished
   * @param generation {@link generation} when the request was admitted (omit to skip that check)
   */
  record(ok: boolean, wasTrial: boolean, now: number, generation?: number): void {
    if (generation !== undefined && generation !== this.#opens) return;
    if (wasTrial) {
      if (this.#trialSince === null) return;
      this.#trialSince = null;
      if (ok) this.#openedAt = null;
      else this.#open(now);
      return;
    }
    if (this.#openedAt !== null) return;
    this.#push(ok ? 0 : 1);
    if (this.#samples >= this.#minSamples && this.#failures / this.#samples >= this.#failureRatio) {
      this.#open(now);
    }
  }

  /**
   * Opens a closed breaker at once (the instance could not be connected to); an open or
   * half-open one is left as it is.
   */
  trip(now: number): void {
    if (this.#openedAt === null) this.#open(now);
  }

  /** Counters for reporting at `now`. */
  snapshot(now: number): BreakerSnapshot {
    const state = this.state(now);
    const retryIn = state === "open" ? this.#openedAt! + this.#probeIntervalMs - now : 0;
    return {
      state,
      samples: this.#samples,
      failures: this.#failures,
      opened_at: this.#openedAt,
      opens: this.#opens,
      retry_in_ms: Math.max(0, retryIn),
    };
  }

  /** Failures / samples over the rolling window; 0 when it is empty. */
  errorRate(): number {
    return this.#samples === 0 ? 0 : this.#failures / this.#samples;
  }

  /** Writes one outcome into the ring, evicting the oldest once it is full. */
  #push(failed: 0 | 1): void {
    if (this.#samples === this.#window) this.#failures -= this.#ring[this.#next];
    else this.#samples++;
    this.#ring[this.#next] = failed;
    this.#failures += failed;
    this.#next = (this.#next + 1) % this.#window;
  }

  /** Opens from `now` with an empty window. */
  #open(now: number): void {
    this.#openedAt = now;
    this.#opens++;
    this.#samples = 0;
    this.#failures = 0;
    this.#next = 0;
  }
}
