/**
 * The pool's scaler, as a decision over samples with the time passed in (no timers, no clock of
 * its own), so its timing is tested without waiting.
 *
 * The busy fraction is busy live instances over live instances, where live is `ready` and busy is
 * at or above `busy_streams` active streams. One instance is added (up to the maximum) once the
 * fraction has stayed at or above `scale_up_threshold` for one probe interval; the highest-index
 * instance is removed (down to the minimum) once it has stayed below `scale_down_threshold` for
 * `scale_cooldown_ms`. After a step the clock for the next one starts again. With nothing live
 * there is no fraction and no step: an offline pool neither grows nor shrinks.
 *
 * @module
 */

/** When to step. */
export interface ScalerSettings {
  readonly upThreshold: number;
  readonly downThreshold: number;
  /** How long the fraction must stay high before a step up (one probe interval). */
  readonly upAfterMs: number;
  /** How long it must stay low before a step down. */
  readonly cooldownMs: number;
}

/** One reading of the pool. */
export interface LoadSample {
  readonly now: number;
  /** Live (ready) instances. */
  readonly live: number;
  /** Live instances at or above `busy_streams`. */
  readonly busy: number;
  /** Instances the pool runs (every state). */
  readonly count: number;
  readonly min: number;
  readonly max: number;
}

/** A scaling step. */
export type ScaleStep = "up" | "down";

/**
 * Busy live instances over live instances; undefined when nothing is live.
 *
 * @example
 * ```ts
 * import { busyFraction } from "./scaler.ts";
 * busyFraction(4, 3); // 0.75
 * busyFraction(0, 0); // undefined
 * ```
 */
export function busyFraction(live: number, busy: number): number | undefined {
  return live > 0 ? busy / live : undefined;
}

/** Decides scaling steps from successive samples. */
export class Scaler {
  readonly #settings: ScalerSettings;
  #aboveSince: number | undefined;
  #belowSince: number | undefined;

  constructor(settings: ScalerSettings) {
    this.#settings = settings;
  }

  /** Since when the fraction has been high, and since when low (undefined when it is not). */
  get marks(): { aboveSince?: number; belowSince?: number } {
    return { aboveSince: this.#aboveSince, belowSince: this.#belowSince };
  }

  /**
   * Reads one sample.
   *
   * @returns the step to take now, if any (the caller may still decline a step down)
   * @example
   * ```ts
   * import { Scaler } from "./scaler.ts";
   * const scaler = new Scaler({ upThreshold: 0.8, downThreshold: 0.2, upAfterMs: 1000, cooldownMs: 5000 });
   * const sample = { live: 1, busy: 1, count: 1, min: 1, max: 3 };
   * scaler.decide({ ...sample, now: 0 }); // undefined: high since now
   * scaler.decide({ ...sample, now: 1000 }); // "up"
   * ```
   */
  decide(sample: LoadSample): ScaleStep | undefined {
    const fraction = busyFraction(sample.live, sample.busy);
    const { upThreshold, downThreshold, upAfterMs, cooldownMs } = this.#settings;
    if (fraction === undefined || (fraction < upThreshold && fraction >= downThreshold)) {
      this.#aboveSince = this.#belowSince = undefined;
      return undefined;
    }
    if (fraction >= upThreshold) {
      this.#belowSince = undefined;
      this.#aboveSince ??= sample.now;
      if (sample.now - this.#aboveSince < upAfterMs || sample.count >= sample.max) return undefined;
      this.#aboveSince = sample.now;
      return "up";
    }
    this.#aboveSince = undefined;
    this.#belowSince ??= sample.now;
    if (sample.now - this.#belowSince < cooldownMs || sample.count <= sample.min) return undefined;
    this.#belowSince = sample.now;
    return "down";
  }
}

/**
 * True when the highest-index instance may be removed: it is not the last live one. (With no
 * live instance at all, removing one takes no healthy instance away.)
 *
 * @param states every instance's state, by index
 * @example
 * ```ts
 * import { mayRemoveLast } from "./scaler.ts";
 * mayRemoveLast(["dead", "ready"]); // false: the only ready instance
 * mayRemoveLast(["ready", "ready"]); // true
 * ```
 */
export function mayRemoveLast(states: readonly string[]): boolean {
  if (states.length <= 1) return false;
  const live = states.filter((state) => state === "ready").length;
  return states.at(-1) !== "ready" || live > 1;
}
