/**
 * The backend negative cache (DESIGN §4): a backend that fails `failures` times in a row goes cold
 * for `ttlMs`, and {@link pickBackend} leaves it out of the weighted choice while it is cold.
 *
 * Memory is bounded by the configured backends that are failing: an entry exists only after a
 * failure, a success deletes it, and an entry whose cold period has ended with no failure since is
 * dropped when next read. When a cold period ends the backend starts over: it takes another
 * `failures` consecutive failures to make it cold again.
 *
 * Each change is logged once, in the isolate that decides it: `healthy -> cold` at the threshold,
 * and `cold -> healthy` at the first success since, or when the cold period is found over (the
 * backend is tried again). The snapshot's `consecutive_failures` is the whole run since the last
 * success, so a cold backend does not read 0.
 *
 * @module
 */

/** Options for {@link NegativeCache}. */
export interface NegativeCacheOptions {
  /** Consecutive failures that make a backend cold. Default 3. */
  readonly failures?: number;
  /** How long a backend stays cold (ms). */
  readonly ttlMs: number;
  /** Where the `healthy -> cold` and `cold -> healthy` lines go; default nowhere. */
  readonly log?: (line: string) => void;
}

/** One backend as {@link NegativeCache.snapshot} reports it. */
export interface NegativeCacheEntry {
  backend: string;
  /** "cold" while it is left out of the choice; "healthy" with a failure run below the threshold. */
  state: "healthy" | "cold";
  /** Failures in a row since its last success. */
  consecutive_failures: number;
  /** Milliseconds it stays cold; 0 when it is not cold. */
  cold_for_ms: number;
}

interface Entry {
  /** Failures toward the threshold (reset when it goes cold). */
  consecutive: number;
  /** Failures since the last success. */
  run: number;
  coldUntil: number;
  /** The cold line was logged and its `cold -> healthy` was not yet. */
  cold: boolean;
}

/**
 * Consecutive-failure bookkeeping per backend key.
 *
 * @example
 * ```ts
 * import { NegativeCache } from "./negative_cache.ts";
 * let now = 0;
 * const cache = new NegativeCache({ failures: 2, ttlMs: 1000 }, () => now);
 * cache.failure("http://a.onion");
 * cache.failure("http://a.onion");
 * if (!cache.isCold("http://a.onion")) throw new Error("not cold after 2 failures");
 * now = 1000;
 * if (cache.isCold("http://a.onion")) throw new Error("still cold after the TTL");
 * ```
 */
export class NegativeCache {
  readonly #threshold: number;
  readonly #ttlMs: number;
  readonly #clock: () => number;
  readonly #log: (line: string) => void;
  readonly #entries = new Map<string, Entry>();

  /**
   * @param options threshold and TTL
   * @param clock monotonic milliseconds
   * @throws {RangeError} when `failures` is not a whole number ≥ 1 or `ttlMs` is negative
   */
  constructor(options: NegativeCacheOptions, clock: () => number) {
    const failures = options.failures ?? 3;
    if (!Number.isInteger(failures) || failures < 1) {
      throw new RangeError(`Negative cache failures must be a whole number ≥ 1, got "${failures}"`);
    }
    if (!(options.ttlMs >= 0 && Number.isFinite(options.ttlMs))) {
      throw new RangeError(
        `Negative cache ttlMs must be a finite number ≥ 0, got "${options.ttlMs}"`,
      );
    }
    this.#threshold = failures;
    this.#ttlMs = options.ttlMs;
    this.#clock = clock;
    this.#log = options.log ?? (() => {});
  }

  /** True while `key` is cold. */
  isCold(key: string): boolean {
    const entry = this.#entries.get(key);
    if (entry === undefined) return false;
    const now = this.#clock();
    if (entry.coldUntil > now) return true;
    this.#warmed(key, entry, now);
    if (entry.consecutive === 0) this.#entries.delete(key);
    return false;
  }

  /** How long `key` stays cold (ms), 0 when it is not. */
  coldForMs(key: string): number {
    const entry = this.#entries.get(key);
    return entry === undefined ? 0 : Math.max(0, entry.coldUntil - this.#clock());
  }

  /** Counts one failure of `key`; at the threshold it goes cold for the TTL (count reset). */
  failure(key: string): void {
    let entry = this.#entries.get(key);
    if (entry === undefined) {
      entry = { consecutive: 0, run: 0, coldUntil: -Infinity, cold: false };
      this.#entries.set(key, entry);
    }
    const now = this.#clock();
    this.#warmed(key, entry, now);
    entry.consecutive++;
    entry.run++;
    if (entry.consecutive >= this.#threshold) {
      entry.consecutive = 0;
      entry.coldUntil = now + this.#ttlMs;
      if (!entry.cold) {
        entry.cold = true;
        this.#log(
          `portcullis: warning: egress: backend ${key} healthy -> cold: ${entry.run} consecutive ` +
            `failures; cold for ${this.#ttlMs} ms`,
        );
      }
    }
  }

  /** Ends `key`'s failure run (and any cold period): its entry is deleted. */
  success(key: string): void {
    const entry = this.#entries.get(key);
    if (entry === undefined) return;
    if (entry.cold) {
      this.#log(
        `portcullis: egress: backend ${key} cold -> healthy (success): a request succeeded after ` +
          `${entry.run} consecutive failures`,
      );
    }
    this.#entries.delete(key);
  }

  /** Every backend with a failure run or a cold period, in first-failure order. */
  snapshot(): NegativeCacheEntry[] {
    const now = this.#clock();
    const out: NegativeCacheEntry[] = [];
    for (const [backend, entry] of this.#entries) {
      const coldFor = Math.max(0, entry.coldUntil - now);
      if (coldFor === 0) this.#warmed(backend, entry, now);
      if (entry.consecutive === 0 && coldFor === 0) {
        this.#entries.delete(backend);
        continue;
      }
      out.push({
        backend,
        state: coldFor > 0 ? "cold" : "healthy",
        consecutive_failures: entry.run,
        cold_for_ms: coldFor,
      });
    }
    return out;
  }

  /** Logs `cold -> healthy` once when `entry`'s cold period is found over at `now`. */
  #warmed(key: string, entry: Entry, now: number): void {
    if (!entry.cold || entry.coldUntil > now) return;
    entry.cold = false;
    this.#log(
      `portcullis: egress: backend ${key} cold -> healthy (ttl): cold for ${this.#ttlMs} ms after ` +
        `${entry.run} consecutive failures; it is tried again`,
    );
  }
}

/**
 * Picks a backend by weight among those not cold; when every backend is cold, by weight among all
 * (fail open: a cold backend may have recovered, and refusing outright helps no one). Backends of
 * weight 0 (or less) are never picked.
 *
 * @param backends the candidates with their keys and weights
 * @param cache the negative cache the keys are looked up in
 * @param random uniform in [0, 1)
 * @returns the chosen backend; undefined when no backend has a positive weight
 * @example
 * ```ts
 * import { NegativeCache, pickBackend } from "./negative_cache.ts";
 * const cache = new NegativeCache({ failures: 1, ttlMs: 1000 }, () => 0);
 * cache.failure("a");
 * const backends = [{ key: "a", weight: 9 }, { key: "b", weight: 1 }];
 * if (pickBackend(backends, cache, () => 0)?.key !== "b") throw new Error("picked the cold one");
 * ```
 */
export function pickBackend<T extends { key: string; weight: number }>(
  backends: readonly T[],
  cache: NegativeCache,
  random: () => number,
): T | undefined {
  let warm = 0;
  let all = 0;
  for (const backend of backends) {
    if (!(backend.weight > 0)) continue;
    all += backend.weight;
    if (!cache.isCold(backend.key)) warm += backend.weight;
  }
  if (all === 0) return undefined;
  const failOpen = warm === 0;
  let remaining = random() * (failOpen ? all : warm);
  let last: T | undefined;
  for (const backend of backends) {
    if (!(backend.weight > 0) || (!failOpen && cache.isCold(backend.key))) continue;
    last = backend;
    remaining -= backend.weight;
    if (remaining < 0) return backend;
  }
  return last; // rounding left a sliver past the last weight
}
