/**
 * A circuit breaker for one SOCKS instance (DESIGN §4): closed, it keeps the last `window` outcomes
 * in a fixed ring and opens when at least `minSamples` of them are in and the failure share reaches
 * `failureRatio`; open, it refuses until one probe interval has passed and then admits exactly one
 * trial request, whose outcome closes it (with an empty window) or opens it again from that time.
 *
 * An open breaker keeps the window that opened it, and a failed trial or refused connect is added
 * to it: `/v1/egress` showed `error_rate: 0` for an open instance with 13 failures because opening
 * used to clear the window, so the one number an operator reads during an outage said "no errors".
 * Only a trial success clears it. Each change of state is reported once, to `onTransition`, with
 * the counts as they stood when it was decided (the pool turns it into one log line).
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
  /** Told of every change of state, once, when this breaker decides it. */
  readonly onTransition?: (transition: BreakerTransition) => void;
}

/** What the breaker lets through: everything, one trial, or nothing. */
export type BreakerState = "closed" | "open" | "half_open";

/** The states as `/v1/egress` and the log name them: closed is "healthy", half-open is "trial". */
export type PlainState = "healthy" | "open" | "trial";

/** The operator's name of a breaker state. */
export function plainState(state: BreakerState): PlainState {
  return state === "closed" ? "healthy" : state === "half_open" ? "trial" : "open";
}

/**
 * Why a breaker changed state: the window's failure share reached the ratio; a connect was
 * refused ("unreachable"); a supervised pool does not list the instance ("pool_view"); the probe
 * interval passed and the trial was taken ("probe_due"); the trial succeeded or failed.
 */
export type TransitionReason =
  | "failure_ratio"
  | "unreachable"
  | "pool_view"
  | "probe_due"
  | "probe_ok"
  | "probe_failed";

/** One change of state, with the counts that decided it (before a close clears the window). */
export interface BreakerTransition {
  readonly from: BreakerState;
  readonly to: BreakerState;
  readonly reason: TransitionReason;
  /** Failures and outcomes in the window. */
  readonly failures: number;
  readonly samples: number;
  /** Failed outcomes (requests, refused connects, trials) since the last success. */
  readonly consecutiveFailures: number;
  /** Milliseconds since the breaker first opened in this outage; 0 when it was closed. */
  readonly openForMs: number;
  /** Milliseconds until the next trial; 0 unless it is now open. */
  readonly nextProbeInMs: number;
}

/**
 * One log line for a transition of the breaker of `instance` (its SOCKS address). Openings are
 * warnings; a line that does not open says no "failed", so the log's level filter keeps it at info.
 *
 * @example
 * ```ts
 * import { transitionLine } from "./breaker.ts";
 * const line = transitionLine("127.0.0.1:9050", {
 *   from: "closed", to: "open", reason: "failure_ratio", failures: 13, samples: 20,
 *   consecutiveFailures: 4, openForMs: 0, nextProbeInMs: 30000,
 * });
 * if (!line.startsWith("portcullis: warning: egress: instance 127.0.0.1:9050 breaker healthy -> open")) {
 *   throw new Error(line);
 * }
 * ```
 */
export function transitionLine(instance: string, t: BreakerTransition): string {
  const opening = t.to === "open";
  const open = t.from === "closed" ? "" : `; open ${Math.round(t.openForMs)} ms`;
  const next = opening ? `; next probe in ${Math.round(t.nextProbeInMs)} ms` : "";
  return `portcullis: ${opening ? "warning: " : ""}egress: instance ${instance} breaker ` +
    `${plainState(t.from)} -> ${plainState(t.to)} (${t.reason}): ${t.failures} failures in ` +
    `${t.samples} samples, ${t.consecutiveFailures} consecutive${open}${next}`;
}

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
  readonly #onTransition?: (transition: BreakerTransition) => void;
  /** 1 = failure, 0 = success; slots [0, samples) are valid until the ring first wraps. */
  readonly #ring: Uint8Array;
  #next = 0;
  #samples = 0;
  #failures = 0;
  #openedAt: number | null = null;
  #opens = 0;
  #trialSince: number | null = null;
  /** When it first opened in this outage (a failed trial does not restart it); null while closed. */
  #downSince: number | null = null;
  #consecutive = 0;

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
    this.#onTransition = options.onTransition;
  }

  /** Changes each time the breaker opens; pass it back to {@link record} to drop stale outcomes. */
  get generation(): number {
    return this.#opens;
  }

  /** Failed outcomes (requests, refused connects, trials) since the last success. */
  get consecutiveFailures(): number {
    return this.#consecutive;
  }

  /**
   * When the next trial may be taken: the end of the probe interval, or, with a trial in flight,
   * when it will be presumed lost; undefined while closed.
   */
  nextTrialAt(): number | undefined {
    if (this.#openedAt === null) return undefined;
    return (this.#trialSince ?? this.#openedAt) + this.#probeIntervalMs;
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
    if (answer !== "trial") return answer;
    // A trial taken again because the last one was presumed lost is no new transition.
    const first = this.#trialSince === null;
    this.#trialSince = now;
    if (first) this.#report("open", "half_open", "probe_due", now);
    return answer;
  }

  /**
   * Records the outcome of a request that acquired "pass" or "trial".
   *
   * Closed: the outcome enters the rolling window, and the breaker opens (keeping the window) once
   * samples ≥ minSamples and failures / samples ≥ failureRatio. A trial success closes the breaker
   * with an empty window; a trial failure enters the window and opens it again from `now`. A "pass" outcome arriving
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
      if (ok) this.#close(now);
      else {
        this.#push(1);
        this.#open(now, "probe_failed");
      }
      return;
    }
    if (this.#openedAt !== null) return;
    this.#push(ok ? 0 : 1);
    if (this.#samples >= this.#minSamples && this.#failures / this.#samples >= this.#failureRatio) {
      this.#open(now, "failure_ratio");
    }
  }

  /**
   * Opens a closed breaker at once; an open or half-open one is left as it is. "unreachable" (a
   * connect was refused) is a failed outcome and enters the window; "pool_view" (the supervising
   * pool does not list the instance) is no outcome of this edge's and does not.
   */
  trip(now: number, reason: "unreachable" | "pool_view" = "unreachable"): void {
    if (this.#openedAt !== null) return;
    if (reason === "unreachable") this.#push(1);
    this.#open(now, reason);
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
    this.#consecutive = failed ? this.#consecutive + 1 : 0;
  }

  /** Opens (again) from `now`, keeping the window: it is what an operator reads during the outage. */
  #open(now: number, reason: TransitionReason): void {
    const from: BreakerState = this.#openedAt === null ? "closed" : "half_open";
    this.#openedAt = now;
    this.#downSince ??= now;
    this.#opens++;
    this.#report(from, "open", reason, now);
  }

  /** Closes on a trial success, reporting the window that stood until now, then clearing it. */
  #close(now: number): void {
    this.#openedAt = null;
    this.#report("half_open", "closed", "probe_ok", now);
    this.#downSince = null;
    this.#consecutive = 0;
    this.#samples = 0;
    this.#failures = 0;
    this.#next = 0;
  }

  #report(from: BreakerState, to: BreakerState, reason: TransitionReason, now: number): void {
    if (!this.#onTransition) return;
    this.#onTransition({
      from,
      to,
      reason,
      failures: this.#failures,
      samples: this.#samples,
      consecutiveFailures: this.#consecutive,
      openForMs: this.#downSince === null ? 0 : now - this.#downSince,
      nextProbeInMs: to === "open" ? this.#probeIntervalMs : 0,
    });
  }
}
