/**
 * Retry policy of the proxy dataplane (DESIGN §4): which methods may be retried, a rolling-window
 * retry budget that keeps retries a bounded share of traffic, and exponential backoff with full
 * jitter between attempts.
 *
 * @module
 */

/** Methods safe to send twice (RFC 9110 §9.2.2), minus DELETE, which the gateway never retries. */
const RETRYABLE = new Set(["GET", "HEAD", "OPTIONS", "TRACE", "PUT"]);

/**
 * GET, HEAD, OPTIONS, TRACE, PUT are retry-eligible; POST only when `retryPost`; every other
 * method (PATCH, DELETE, CONNECT, custom) never. Methods are case-sensitive (RFC 9110 §9.1):
 * `get` is a custom method and is not retried.
 *
 * @param method the request method as received
 * @param retryPost the route's opt-in for POST
 * @example
 * ```ts
 * import { retryEligible } from "./retry.ts";
 * if (!retryEligible("GET", false) || retryEligible("POST", false)) throw new Error("wrong");
 * if (!retryEligible("POST", true) || retryEligible("PATCH", true)) throw new Error("wrong");
 * ```
 */
export function retryEligible(method: string, retryPost: boolean): boolean {
  return RETRYABLE.has(method) || (retryPost && method === "POST");
}

/** Options for {@link RetryBudget}. */
export interface RetryBudgetOptions {
  /** Retries may be at most this share of the requests in the window. Default in config: 0.2. */
  readonly ratio: number;
  /** Retries per window always allowed, however few the requests. Default in config: 10. */
  readonly minRetries: number;
  /** Length of the rolling window (ms). Default in config: 10000. */
  readonly windowMs: number;
}

/** Counters of a {@link RetryBudget}. */
export interface RetryBudgetSnapshot {
  /** First attempts in the window. */
  requests: number;
  /** Retries spent in the window. */
  retries: number;
  /** Retries refused since the budget was made. */
  refused: number;
}

const BUCKETS = 10;

/**
 * A rolling-window retry budget: a fixed ring of 10 buckets of `windowMs / 10` each, rotated by the
 * clock, so the window covers the current bucket and the nine before it (between 90 % and 100 % of
 * `windowMs` of history). A clock that steps backwards keeps counting into the current bucket.
 *
 * @example
 * ```ts
 * import { RetryBudget } from "./retry.ts";
 * let now = 0;
 * const budget = new RetryBudget({ ratio: 0.5, minRetries: 1, windowMs: 1000 }, () => now);
 * budget.request();
 * if (!budget.tryRetry() || budget.tryRetry()) throw new Error("min 1 allows exactly one");
 * now = 1000; // the window has moved past both
 * if (!budget.tryRetry()) throw new Error("the window did not roll");
 * ```
 */
export class RetryBudget {
  readonly #ratio: number;
  readonly #minRetries: number;
  readonly #bucketMs: number;
  readonly #clock: () => number;
  readonly #requests = new Float64Array(BUCKETS);
  readonly #retries = new Float64Array(BUCKETS);
  #tick: number;
  #requestSum = 0;
  #retrySum = 0;
  #refused = 0;

  /**
   * @param options ratio, floor and window
   * @param clock monotonic milliseconds
   * @throws {RangeError} when `ratio` is negative, `minRetries` is not a whole number ≥ 0, or
   *   `windowMs` is not positive
   */
  constructor(options: RetryBudgetOptions, clock: () => number) {
    if (!(options.ratio >= 0 && Number.isFinite(options.ratio))) {
      throw new RangeError(
        `Retry budget ratio must be a finite number ≥ 0, got "${options.ratio}"`,
      );
    }
    if (!Number.isInteger(options.minRetries) || options.minRetries < 0) {
      throw new RangeError(
        `Retry budget minRetries must be a whole number ≥ 0, got "${options.minRetries}"`,
      );
    }
    if (!(options.windowMs > 0 && Number.isFinite(options.windowMs))) {
      throw new RangeError(`Retry budget windowMs must be positive, got "${options.windowMs}"`);
    }
    this.#ratio = options.ratio;
    this.#minRetries = options.minRetries;
    this.#bucketMs = options.windowMs / BUCKETS;
    this.#clock = clock;
    this.#tick = Math.floor(clock() / this.#bucketMs);
  }

  /** Counts one request (its first attempt). */
  request(): void {
    const slot = this.#rotate();
    this.#requests[slot]++;
    this.#requestSum++;
  }

  /**
   * Asks to spend one retry: true (and counts it) when retries in the window are fewer than
   * max(minRetries, ratio × requests in the window); otherwise false, counted as refused.
   */
  tryRetry(): boolean {
    const slot = this.#rotate();
    if (this.#retrySum >= Math.max(this.#minRetries, this.#ratio * this.#requestSum)) {
      this.#refused++;
      return false;
    }
    this.#retries[slot]++;
    this.#retrySum++;
    return true;
  }

  /** Requests and retries in the window, and refusals since boot. */
  snapshot(): RetryBudgetSnapshot {
    this.#rotate();
    return { requests: this.#requestSum, retries: this.#retrySum, refused: this.#refused };
  }

  /** Clears the buckets the clock has moved past and returns the current bucket's slot. */
  #rotate(): number {
    const tick = Math.floor(this.#clock() / this.#bucketMs);
    if (tick > this.#tick) {
      const steps = Math.min(BUCKETS, tick - this.#tick);
      for (let k = 1; k <= steps; k++) {
        const slot = (this.#tick + k) % BUCKETS;
        this.#requestSum -= this.#requests[slot];
        this.#retrySum -= this.#retries[slot];
        this.#requests[slot] = 0;
        this.#retries[slot] = 0;
      }
      this.#tick = tick;
    }
    return ((this.#tick % BUCKETS) + BUCKETS) % BUCKETS;
  }
}

/**
 * Exponential backoff with full jitter: random() × min(capMs, baseMs × 2^(attempt − 1)).
 *
 * @param attempt the retry about to be made, from 1
 * @param options base and cap in milliseconds
 * @param random uniform in [0, 1)
 * @throws {RangeError} when `attempt` is not a whole number ≥ 1
 * @example
 * ```ts
 * import { backoffMs } from "./retry.ts";
 * const half = () => 0.5;
 * if (backoffMs(3, { baseMs: 25, capMs: 250 }, half) !== 50) throw new Error("not 0.5 × 100");
 * if (backoffMs(9, { baseMs: 25, capMs: 250 }, half) !== 125) throw new Error("cap ignored");
 * ```
 */
export function backoffMs(
  attempt: number,
  options: { readonly baseMs: number; readonly capMs: number },
  random: () => number,
): number {
  if (!Number.isInteger(attempt) || attempt < 1) {
    throw new RangeError(`Backoff attempt must be a whole number ≥ 1, got "${attempt}"`);
  }
  return random() * Math.min(options.capMs, options.baseMs * 2 ** (attempt - 1));
}
