/**
 * The SOCKS instance pool of the edge (DESIGN §4): chooses an instance for each upstream attempt by
 * breaker state and the score `2·active + latency_ms/100 + 10·error_rate` (lower is better), and
 * takes each attempt's outcome back into the instance's active count, latency average and breaker.
 *
 * Choice order for one attempt, skipping the instances this request already tried (`exclude`):
 *
 * 1. the lowest score among instances whose breaker passes;
 * 2. the lowest score among already-tried instances whose breaker passes — a retry goes back to a
 *    healthy instance rather than to one whose breaker is open;
 * 3. when every breaker refuses: the untried instance whose last such attempt succeeded, else
 *    round-robin over the untried instances (over all, when every one was tried): with every
 *    breaker open the gateway still sends, rather than failing every request, and once one instance
 *    is seen to answer, requests stay on it instead of alternating with the dead ones (a 502/200
 *    pattern for a whole probe interval after an outage). Only its probe closes its breaker.
 *
 * A client request is never an open breaker's half-open trial: that trial is the gateway's own
 * probe (a SOCKS greeting, see egress.ts), taken with {@link InstancePool.beginProbe} — a client's
 * POST must not be the experiment that tells whether a dead instance came back. An instance that
 * cannot even be connected to is tripped at once ({@link InstancePool.trip}), so the requests that
 * start after an instance dies go to the live ones instead of filling its breaker window first.
 *
 * Equal scores rotate: the scan starts after the last chosen instance, so an idle pool spreads
 * requests instead of sending them all to instance 0. Pure logic: time comes from the clock.
 *
 * @module
 */
import {
  Breaker,
  type BreakerOptions,
  type BreakerTransition,
  type PlainState,
  plainState,
} from "./breaker.ts";

/** Options for {@link InstancePool}. */
export interface PoolOptions {
  /** Options of every instance's breaker. */
  readonly breaker: BreakerOptions;
  /** Weight of a new latency sample in the moving average, in (0, 1]. Default 0.2. */
  readonly latencyAlpha?: number;
  /** Monotonic milliseconds. */
  readonly clock: () => number;
  /** Told of each breaker's every change of state, once (see {@link Breaker}). */
  readonly onTransition?: (index: number, transition: BreakerTransition) => void;
}

/** One attempt's hold on an instance, from {@link InstancePool.pick} to {@link InstancePool.finish}. */
export interface Pick {
  /** The instance's index in the pool. */
  readonly index: number;
  /** Every instance's breaker was refusing: round-robin fallback. */
  readonly fallback: boolean;
  /** The breaker's generation at pick time (stale outcomes are dropped). */
  readonly generation: number;
}

/** A pick as the pool issues it: it knows its pool and whether it was finished. */
class IssuedPick implements Pick {
  readonly index: number;
  readonly fallback: boolean;
  readonly generation: number;
  readonly pool: InstancePool;
  open = true;

  constructor(pool: InstancePool, index: number, fallback: boolean, generation: number) {
    this.pool = pool;
    this.index = index;
    this.fallback = fallback;
    this.generation = generation;
  }
}

/** One instance as {@link InstancePool.snapshot} reports it. */
export interface InstanceSnapshot {
  address: string;
  /** "healthy" (breaker closed), "open", or "trial" (its probe is due or in flight). */
  state: PlainState;
  active: number;
  /** Moving average of time to response headers; 0 until the first success. */
  latency_ms: number;
  /** window.failures / window.samples; 0 when the window is empty. */
  failure_ratio: number;
  /** The breaker's rolling window; an open breaker keeps the one that opened it. */
  window: { failures: number; samples: number };
  /** Failed outcomes (requests, refused connects, probes) since the last success. */
  consecutive_failures: number;
  /** Attempts finished on this instance since boot. */
  requests: number;
  /** Failed attempts among them, since boot. */
  failures: number;
  score: number;
  /** Milliseconds until an open breaker's next probe; 0 otherwise. */
  retry_in_ms: number;
  /** Times the breaker opened. */
  opens: number;
}

/**
 * The pool of SOCKS instances.
 *
 * @example
 * ```ts
 * import { InstancePool } from "./pool.ts";
 * let now = 0;
 * const pool = new InstancePool(["127.0.0.1:9050", "127.0.0.1:9051"], {
 *   breaker: { probeIntervalMs: 30_000 },
 *   clock: () => now,
 * });
 * const first = pool.pick()!;
 * const retry = pool.pick(new Set([first.index]))!; // a retry goes to the other instance
 * if (retry.index === first.index) throw new Error("retried on the same instance");
 * now = 120;
 * pool.finish(first, false);
 * pool.finish(retry, true, 120);
 * if (pool.snapshot()[retry.index].latency_ms !== 120) throw new Error("latency not recorded");
 * ```
 */
export class InstancePool {
  /** Number of instances. */
  readonly size: number;
  readonly #addresses: readonly string[];
  readonly #breakers: Breaker[];
  readonly #active: Int32Array;
  readonly #latency: Float64Array;
  readonly #sampled: Uint8Array;
  readonly #requests: Float64Array;
  readonly #failures: Float64Array;
  /** 1 when the instance's last fallback attempt (every breaker refusing) succeeded. */
  readonly #answered: Uint8Array;
  readonly #alpha: number;
  readonly #clock: () => number;
  /** Picks not yet finished; finishing one twice (or a foreign one) changes nothing. */
  #rotation = 0;
  #fallbackCursor = 0;

  /**
   * @param addresses the instances' SOCKS addresses, in index order
   * @param options breaker options, latency weight and clock
   * @throws {RangeError} when `latencyAlpha` is outside (0, 1] or a breaker option is out of range
   */
  constructor(addresses: readonly string[], options: PoolOptions) {
    const alpha = options.latencyAlpha ?? 0.2;
    if (!(alpha > 0 && alpha <= 1)) {
      throw new RangeError(`Pool latencyAlpha must be in (0, 1], got "${alpha}"`);
    }
    const size = addresses.length;
    this.size = size;
    this.#addresses = [...addresses];
    const told = options.onTransition;
    this.#breakers = this.#addresses.map((_, i) =>
      new Breaker({
        ...options.breaker,
        onTransition: (transition) => {
          if (transition.to === "open") this.#answered[i] = 0;
          told?.(i, transition);
        },
      })
    );
    this.#active = new Int32Array(size);
    this.#latency = new Float64Array(size);
    this.#sampled = new Uint8Array(size);
    this.#requests = new Float64Array(size);
    this.#failures = new Float64Array(size);
    this.#answered = new Uint8Array(size);
    this.#alpha = alpha;
    this.#clock = options.clock;
  }

  /**
   * Chooses an instance for one attempt (see the module doc for the order) and counts it active.
   *
   * @param exclude indices this request already tried
   * @returns the pick to pass to {@link finish}; undefined only when the pool is empty
   */
  pick(exclude?: ReadonlySet<number>): Pick | undefined {
    const size = this.size;
    if (size === 0) return undefined;
    const now = this.#clock();
    const skip = exclude && exclude.size > 0 && !this.#coversAll(exclude) ? exclude : undefined;

    let best = -1;
    let bestScore = Infinity;
    let retryBest = -1;
    let retryScore = Infinity;
    for (let k = 0; k < size; k++) {
      const i = (this.#rotation + k) % size;
      // Open, or half-open (its trial is the gateway's probe): not for a client.
      if (this.#breakers[i].peek(now) !== "pass") continue;
      const excluded = skip !== undefined && skip.has(i);
      const score = this.score(i);
      if (!excluded && score < bestScore) {
        best = i;
        bestScore = score;
      } else if (excluded && score < retryScore) {
        retryBest = i;
        retryScore = score;
      }
    }

    const chosen = best >= 0 ? best : retryBest;
    if (chosen >= 0) return this.#take(chosen, false);
    return this.#take(this.#nextFallback(skip), true);
  }

  /** When the next probe of any instance is due (ms, the pool's clock); undefined if none is open. */
  nextProbeAt(): number | undefined {
    let next: number | undefined;
    for (const breaker of this.#breakers) {
      const at = breaker.nextTrialAt();
      if (at !== undefined && (next === undefined || at < next)) next = at;
    }
    return next;
  }

  /** Instances whose breaker is due for its half-open trial (a probe of the gateway's own). */
  dueProbes(): number[] {
    const now = this.#clock();
    const due: number[] = [];
    for (let i = 0; i < this.size; i++) if (this.#breakers[i].peek(now) === "trial") due.push(i);
    return due;
  }

  /**
   * Takes instance `index`'s half-open trial for a probe.
   *
   * @returns false when no trial is due (or one is already in flight)
   */
  beginProbe(index: number): boolean {
    return this.#breakers[index].acquire(this.#clock()) === "trial";
  }

  /** Records a probe's outcome: success closes the breaker, failure opens it again. */
  endProbe(index: number, ok: boolean): void {
    this.#breakers[index].record(ok, true, this.#clock());
  }

  /**
   * Takes a latency the pool itself measured (a Tor pool's probes, through the hub or its socket)
   * for instance `index`, until this edge has a sample of its own: the score then starts from what
   * the pool knows instead of from zero.
   */
  seedLatency(index: number, latencyMs: number): void {
    if (this.#sampled[index] || !(latencyMs >= 0) || !Number.isFinite(latencyMs)) return;
    this.#latency[index] = latencyMs;
  }

  /**
   * Opens instance `index`'s breaker at once: its supervising pool does not list it (pool_view.ts),
   * or, with `"unreachable"`, it could not even be connected to (a failed outcome).
   */
  trip(index: number, reason: "pool_view" | "unreachable" = "pool_view"): void {
    this.#breakers[index].trip(this.#clock(), reason);
  }

  /**
   * Ends an attempt begun by {@link pick}: active−−, a latency sample on success, the breaker
   * outcome (none for a fallback attempt, which the breaker did not admit) and the counters.
   *
   * @param pick what {@link pick} returned
   * @param ok whether the attempt succeeded
   * @param latencyMs milliseconds to the response headers (taken on success only)
   * @param down the instance could not be connected to at all: trip its breaker now
   * @returns false, changing nothing, when the pick was already finished or is not this pool's
   */
  finish(pick: Pick, ok: boolean | undefined, latencyMs?: number, down = false): boolean {
    // A flag on the pick, not a WeakSet of open picks: per-request entries in a long-lived
    // collection measurably raised garbage-collection cost on the proxy path.
    if (!(pick instanceof IssuedPick) || pick.pool !== this || !pick.open) return false;
    pick.open = false;
    const i = pick.index;
    this.#active[i]--;
    // No verdict (the client went away): the instance is neither credited nor charged.
    if (ok === undefined && !down) return true;
    this.#requests[i]++;
    if (!ok) this.#failures[i]++;
    if (ok && latencyMs !== undefined && latencyMs >= 0 && Number.isFinite(latencyMs)) {
      this.#latency[i] = this.#sampled[i]
        ? this.#latency[i] + this.#alpha * (latencyMs - this.#latency[i])
        : latencyMs;
      this.#sampled[i] = 1;
    }
    if (pick.fallback) this.#answered[i] = ok ? 1 : 0;
    if (down) this.#breakers[i].trip(this.#clock(), "unreachable");
    else if (!pick.fallback) {
      this.#breakers[i].record(ok === true, false, this.#clock(), pick.generation);
    }
    return true;
  }

  /**
   * Records an outcome another request worker observed on instance `index`: counters and the
   * breaker's window (ignored while the breaker is not closed, like any late outcome).
   */
  observe(index: number, ok: boolean, down = false): void {
    this.#requests[index]++;
    if (!ok) this.#failures[index]++;
    if (down) this.#breakers[index].trip(this.#clock(), "unreachable");
    else this.#breakers[index].record(ok, false, this.#clock());
  }

  /** `2·active + latency_ms/100 + 10·error_rate` of instance `index`; lower is better. */
  score(index: number): number {
    return 2 * this.#active[index] + this.#latency[index] / 100 +
      10 * this.#breakers[index].errorRate();
  }

  /** Every instance's state and counters, in index order. */
  snapshot(): InstanceSnapshot[] {
    const now = this.#clock();
    return this.#addresses.map((address, i) => {
      const breaker = this.#breakers[i].snapshot(now);
      return {
        address,
        state: plainState(breaker.state),
        active: this.#active[i],
        latency_ms: this.#latency[i],
        failure_ratio: this.#breakers[i].errorRate(),
        window: { failures: breaker.failures, samples: breaker.samples },
        consecutive_failures: this.#breakers[i].consecutiveFailures,
        requests: this.#requests[i],
        failures: this.#failures[i],
        score: this.score(i),
        retry_in_ms: breaker.retry_in_ms,
        opens: breaker.opens,
      };
    });
  }

  /** Marks instance `index` active and issues the pick. */
  #take(index: number, fallback: boolean): Pick {
    this.#active[index]++;
    if (!fallback) this.#rotation = (index + 1) % this.size;
    return new IssuedPick(this, index, fallback, this.#breakers[index].generation);
  }

  /**
   * The untried instance whose last fallback attempt succeeded, else the next in fallback
   * round-robin order that is not in `skip`.
   */
  #nextFallback(skip: ReadonlySet<number> | undefined): number {
    for (let i = 0; i < this.size; i++) {
      if (this.#answered[i] && !(skip !== undefined && skip.has(i))) return i;
    }
    for (let k = 0; k < this.size; k++) {
      const i = (this.#fallbackCursor + k) % this.size;
      if (skip !== undefined && skip.has(i)) continue;
      this.#fallbackCursor = (i + 1) % this.size;
      return i;
    }
    return this.#fallbackCursor; // unreachable: `skip` never covers every instance
  }

  /** True when `exclude` names every instance, so nothing would remain to skip to. */
  #coversAll(exclude: ReadonlySet<number>): boolean {
    for (let i = 0; i < this.size; i++) if (!exclude.has(i)) return false;
    return true;
  }
}
