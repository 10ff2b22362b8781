/**
 * Remote mode: an edge follows its hub's config stream. It asks with the hash of the set it serves
 * (`have`) and of one it received but does not serve (`seen`); the hub answers with a snapshot, a
 * delta against `have`, or `current` after a hold. A received set is rebuilt, checked against the
 * hash the hub sent, staged in a fresh cache folder and offered to the store; only a set the store
 * accepts becomes the cache's live generation and the served set. On a failed poll the live
 * generation stays and the edge asks again after a backoff that doubles from `backoff_initial_ms`
 * up to `backoff_max_ms` (30 s by default), with jitter.
 *
 * A set the cache folder cannot take (full, read-only) is no failed poll: it waits, pending, and is
 * tried again from memory on the same backoff until it is applied (followed_sets.ts, which says why
 * the old set is served meanwhile). While it waits, polls are not held — each try is followed by one
 * poll, answered at once, so a newer set, a hub gone back, or a revocation is seen — and `status()`
 * shows the set, the error and the tries. Staging leftovers are removed at start and after every
 * failed write (cache_faults.ts).
 *
 * The cache is verified before its hash is sent (see `cache.ts`): at start, and before every
 * attempt after a failure, since the cache may have changed while the hub was away. A refused cache
 * is logged once with what differed, shown in `status().cache`, and the edge asks with no hash, so
 * the hub answers with a full snapshot rather than a delta against a set the disk no longer holds.
 * A snapshot equal to the live set then rewrites the cache (a new folder, then the pointer).
 *
 * The wire side of a poll — asking, reading the answer, rebuilding and checking the set — is in
 * `hub_answer.ts`, the cache checks and writes in `hub_cache.ts`, and the served, pending and
 * refused sets in `followed_sets.ts`; this module holds the follower's loop, its connection state,
 * and what it does with each answer.
 *
 * @module
 */
import type { ConfigStore, OfferOutcome } from "./generations.ts";
import type { HubClientConfig } from "../config/load.ts";
import {
  type Answer,
  askHub,
  type Base,
  HubRefusal,
  receiveSet,
  UnverifiedSet,
} from "./hub_answer.ts";
import { HubLink } from "./hub_link.ts";
import type { CertificateRenewal } from "./enrol.ts";
import { FollowedCache } from "./hub_cache.ts";
import { FollowedSets, type Taken } from "./followed_sets.ts";
import { CacheWriteError, cleanStaging } from "./cache_faults.ts";
import { backoffDelay, sleep } from "./backoff.ts";

/** A running follower. */
export interface HubFollower {
  /**
   * Asks the hub now (without a hold) and applies the answer, after trying a pending set again;
   * rejects when the hub is away.
   */
  pollNow(): Promise<OfferOutcome>;
  /** The connection's state, for `/v1/config`. */
  status(): Record<string, unknown>;
  /** Stops following (idempotent). */
  stop(): void;
  /**
   * Calls `callback` once if the hub says this node is revoked (`node_revoked`); the follower has
   * stopped by then and does not ask again.
   */
  whenRevoked(callback: (reason: string) => void): void;
}

/** What following needs besides the store. */
export interface FollowOptions {
  readonly nodeId: string;
  readonly hub: HubClientConfig;
  readonly cacheDir: string;
  readonly log: (line: string) => void;
  /** Jitter source (tests inject one). */
  readonly random?: () => number;
  /** Renews a fleet certificate; after each renewal the next poll connects with the new one. */
  readonly renewal?: CertificateRenewal;
}

/**
 * Starts following the hub.
 *
 * @param store the edge's generations; its live hash (from the cache, or "" for none) is the
 *   first `have`
 */
export function followHub(store: ConfigStore, options: FollowOptions): HubFollower {
  const follower = new Follower(store, options);
  follower.start();
  return follower;
}

/** A caller of {@link HubFollower.pollNow} waiting for the next answer. */
interface Urgent {
  readonly resolve: (outcome: OfferOutcome) => void;
  readonly reject: (error: Error) => void;
}

/**
 * One edge following its hub. Its steps, top to bottom: clean and verify the cache, then poll
 * (held, or at once for a waiting caller or while a set is pending), apply the answer, try a
 * pending set again when due, and after a failure back off and verify the cache again.
 */
class Follower implements HubFollower {
  readonly #store: ConfigStore;
  readonly #options: FollowOptions;
  readonly #random: () => number;
  /** The connection: answered or not, failures, backoff, the HTTP client. */
  readonly #link: HubLink;
  readonly #cache: FollowedCache;
  /** The served set (the next poll's `have`), and a set pending or refused (its `seen`). */
  readonly #sets: FollowedSets;
  #stopped = false;
  /** Aborts the poll in flight, or the sleep after it. */
  #current: AbortController | undefined;
  /** The poll in flight is a held one. */
  #holding = false;
  /** Sleeping (a backoff, a pending set's wait, a pause after a repeat): `pollNow()` cuts it. */
  #resting = false;
  /** Answers in a row that repeated a set already seen (a hub that does not read `seen`). */
  #repeats = 0;
  #urgent: Urgent[] = [];
  #revoked: { at: string; reason: string } | undefined;
  /** The last answer's set did not check (readiness: `set_rejected`); cleared by the next good one. */
  #unverified: { at: string; message: string } | undefined;
  #onRevoked: ((reason: string) => void) | undefined;

  /**
   * @param store the edge's generations
   * @param options the hub, node id, cache folder, log and jitter source
   */
  constructor(store: ConfigStore, options: FollowOptions) {
    const { hub, cacheDir, log } = options;
    this.#store = store;
    this.#options = options;
    this.#random = options.random ?? Math.random;
    this.#link = new HubLink(hub, log, this.#random);
    this.#cache = new FollowedCache(cacheDir, log);
    this.#sets = new FollowedSets({
      store,
      cache: this.#cache,
      cacheDir,
      hub,
      log,
      random: this.#random,
    });
  }

  /** Starts the poll loop (it runs until {@link stop}) and the renewal checks. */
  start(): void {
    this.#run();
    this.#options.renewal?.start(() => this.#link.close());
  }

  whenRevoked(callback: (reason: string) => void): void {
    this.#onRevoked = callback;
    if (this.#revoked) callback(this.#revoked.reason);
  }

  /** Asks now: cuts a held poll or a sleep short, and waits for the answer the loop gets. */
  pollNow(): Promise<OfferOutcome> {
    if (this.#stopped) return Promise.reject(new Error("The edge stopped following the hub"));
    return new Promise<OfferOutcome>((resolve, reject) => {
      this.#urgent.push({ resolve, reject });
      if (this.#holding || this.#resting) this.#current?.abort();
    });
  }

  /** The connection's state, for `/v1/config`. */
  status(): Record<string, unknown> {
    return {
      ...this.#link.status(),
      revoked: this.#revoked ?? null,
      renewal: this.#options.renewal?.status() ?? null,
      received_hash: this.#sets.served?.hash ?? null,
      unverified: this.#unverified ?? null,
      ...this.#sets.status(),
      cache: this.#cache.status(),
      ...this.#link.hubStatus(),
    };
  }

  /** Stops following: the loop ends after the poll or sleep it is in is aborted. */
  stop(): void {
    this.#stopped = true;
    this.#options.renewal?.stop();
    this.#current?.abort();
  }

  /**
   * The loop: polls (and tries a pending set) until stopped, then closes the HTTP client and fails
   * any waiting caller.
   */
  async #run(): Promise<void> {
    await this.#clean("at start");
    const sets = this.#sets;
    sets.served = await this.#cache.check(this.#store.current.hash, true);
    while (!this.#stopped) {
      // The cache may have changed while the hub was away: check it before its hash is sent.
      if (this.#link.failures > 0 && sets.served) {
        sets.served = await this.#cache.check(this.#store.current.hash, false, sets.served);
      }
      if (this.#stopped) break;
      await this.#pollOnce();
      if (sets.pending && !this.#stopped) await this.#retryPending();
    }
    this.#link.close();
    this.#settleUrgent(new Error("The edge stopped following the hub"));
  }

  /** Removes staging leftovers from the cache folder, saying so when there were any. */
  async #clean(when: string): Promise<void> {
    const { cacheDir, log } = this.#options;
    const removed = await cleanStaging(cacheDir);
    if (removed.length > 0) {
      log(`portcullis: cache ${cacheDir}: removed ${removed.length} staging leftovers ${when}`);
    }
  }

  /**
   * Waits for the pending set's next try (`pollNow()` cuts it short), then tries it from memory:
   * the hub need not be reachable. A set that went live but whose pointer could not be renamed is
   * a failure: the check after it finds the cache stale and the next snapshot rewrites it.
   */
  async #retryPending(): Promise<void> {
    await this.#rest(this.#sets.dueIn());
    if (this.#stopped) return;
    const url = this.#options.hub.url;
    try {
      const outcome = await this.#sets.retry((generation) =>
        `hub ${url} (hub generation ${generation})`
      );
      // A caller of `pollNow()` hears that the set it waited for went live.
      if (outcome?.outcome === "loaded") this.#settleUrgent(outcome);
    } catch (error) {
      await this.#backOff(error);
    }
  }

  /** Sleeps `ms`, cut short by `pollNow()` or `stop()`. */
  async #rest(ms: number): Promise<void> {
    const current = this.#current = new AbortController();
    this.#resting = true;
    await sleep(ms, current.signal);
    this.#resting = false;
  }

  /**
   * One poll: held unless a caller waits or a set is pending; its answer is applied; after a
   * failure, a backoff. A held poll cut short for a waiting caller is no failure: the loop asks
   * again at once.
   */
  async #pollOnce(): Promise<void> {
    const current = this.#current = new AbortController();
    const wait = this.#urgent.length === 0 && !this.#sets.pending;
    this.#holding = wait;
    try {
      const answer = await this.#request(wait, current.signal);
      this.#holding = false;
      this.#link.answered(answer);
      const outcome = await this.#apply(answer);
      this.#unverified = undefined;
      if (!wait) this.#settleUrgent(this.#sets.pending ? pendingOutcome(outcome) : outcome);
      // A hub that does not read `seen` answers a held poll at once with the set seen: pace it.
      this.#repeats = outcome.repeat && wait ? this.#repeats + 1 : 0;
      if (this.#repeats > 0) {
        await this.#rest(backoffDelay(this.#options.hub, this.#repeats, this.#random));
      }
    } catch (error) {
      this.#holding = false;
      if (this.#stopped) return;
      if (error instanceof HubRefusal && error.code === "node_revoked") {
        return this.#revoke(error.message);
      }
      if (current.signal.aborted && this.#urgent.length > 0 && wait) return;
      await this.#backOff(error);
    }
  }

  /** The hub says this node is revoked: stop asking, and tell whoever stops the edge. */
  #revoke(message: string): void {
    this.#revoked = { at: new Date().toISOString(), reason: message };
    this.#link.lost();
    this.#options.log(
      `portcullis: hub ${this.#options.hub.url}: this node is revoked (${message})`,
    );
    this.stop();
    this.#onRevoked?.(message);
  }

  /**
   * After a failure (the hub's, or the disk's after a set went live): logs it, cleans what a failed
   * write left, fails waiting callers, and sleeps the backoff — cut short by `pollNow()` or `stop()`.
   */
  async #backOff(error: unknown): Promise<void> {
    const disk = error instanceof CacheWriteError;
    if (disk) await this.#clean("after a failed write");
    const { message, delay } = this.#link.failed(error);
    this.#settleUrgent(new Error(disk ? message : `The hub could not be reached: ${message}`));
    await this.#rest(delay);
  }

  /** Asks the hub for the set after the served one (held if `wait`), within the poll timeout. */
  #request(wait: boolean, signal: AbortSignal): Promise<Answer> {
    const { hub, nodeId } = this.#options;
    const { have, seen } = this.#sets;
    return askHub({ hub, nodeId, have, seen, wait, client: () => this.#link.client(), signal });
  }

  /**
   * Applies an answer: `current` for a set this node serves or has seen changes nothing; otherwise
   * the set it describes is rebuilt and taken (followed_sets.ts).
   */
  async #apply(answer: Answer): Promise<Taken> {
    if (answer.type === "current" && this.#sets.current(answer.hash)) {
      return { outcome: "unchanged", generation: this.#store.current };
    }
    const received = await this.#receive(answer);
    const origin = `hub ${this.#options.hub.url} (hub generation ${answer.generation})`;
    return await this.#sets.take(received, answer.generation, origin);
  }

  /**
   * Rebuilds the set an answer describes (a delta against the served set) and checks it against
   * the hash the hub sent. On failure there is no served set to build on: the next poll asks for a
   * snapshot.
   */
  async #receive(answer: Answer): Promise<Base> {
    try {
      return await receiveSet(answer, this.#sets.served);
    } catch (error) {
      this.#sets.served = undefined;
      const unverified = new UnverifiedSet(error);
      this.#unverified = { at: new Date().toISOString(), message: unverified.message };
      throw unverified;
    }
  }

  /** Answers every waiting `pollNow()` caller with an outcome or an error. */
  #settleUrgent(result: OfferOutcome | Error): void {
    const waiting = this.#urgent;
    this.#urgent = [];
    for (const w of waiting) result instanceof Error ? w.reject(result) : w.resolve(result);
  }
}

/** What a caller of `pollNow()` hears while a set still waits: `pending`, the live generation. */
function pendingOutcome(outcome: OfferOutcome): OfferOutcome {
  if (outcome.outcome === "rejected" || outcome.outcome === "loaded") return outcome;
  return { outcome: "pending", generation: outcome.generation };
}
