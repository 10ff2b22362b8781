/**
 * What a remote edge holds of its hub's sets, and how a received set becomes the served one. At
 * most one of each:
 *
 * - **served** — the live generation's set, with its files: the base of the hub's deltas and the
 *   `have` of every poll, so the hub's view of a node is what the node serves. Issue 32 found an
 *   edge that took a set it could not write to its cache as received: it told the hub it had it,
 *   the hub held its polls as current, and the set was never sent or tried again.
 * - **pending** — a set received and checked against the hub's hash that could not be staged (the
 *   cache folder could not be written: full, read-only). It is kept in memory and tried again with
 *   a backoff that doubles from `backoff_initial_ms` to `backoff_max_ms`, jittered (backoff.ts),
 *   until it is applied, a newer set replaces it, or the hub's live set is the served one again.
 *   The hub need not be reachable for a try: the set is already here and checked.
 * - **refused** — a set the store rejected; it is not offered again.
 *
 * A pending or refused set is `seen`: a poll names it beside `have`, and the hub holds a poll whose
 * `seen` is its live set as it holds one whose `have` is, so such a node neither gets the set again
 * nor polls in a loop. A set a hub sends anyway (one that does not read `seen`) is a repeat.
 *
 * While a set waits, the edge serves the old one, from memory and disk alike. Serving the new set
 * without its cache folder is not possible — a generation's body files are read from its folder at
 * request time, in every worker — and would not be wanted: the cache is what the edge serves after a
 * restart while the hub is away, so an edge serving a set its cache does not hold would, on such a
 * restart, silently go back to the old one, and an operator could not tell which set a node will
 * serve from what it serves now. Instead the delay is shown where it is watched: `/v1/config`
 * (`hub.pending`, with the hash, the error and the retries), `/metrics` (`config_pending`), and the
 * hub's view of the node (`have` stays the old hash).
 *
 * @module
 */
import { runtimeTextsOf } from "../config/file_set.ts";
import type { HubClientConfig } from "../config/load.ts";
import { backoffDelay } from "./backoff.ts";
import { discardStaged, type StagedGeneration, stageGeneration } from "./cache.ts";
import { type CacheFault, CacheWriteError, cleanStaging } from "./cache_faults.ts";
import { short } from "./cache_manifest.ts";
import type { ConfigStore, OfferOutcome } from "./generations.ts";
import type { Base } from "./hub_answer.ts";
import type { FollowedCache } from "./hub_cache.ts";
import { reportOutcome } from "./runtime_watch.ts";
import type { PendingFacts } from "../observe/metrics_pending.ts";

/** What taking a received set did; `repeat` when it was a set already seen (pending or refused). */
export type Taken = OfferOutcome & { readonly repeat?: boolean };

/** A received set waiting for its cache folder to be writable. */
interface Pending {
  readonly set: Base;
  readonly hubGeneration: number;
  /** When the first try of this episode failed (ms since the epoch). */
  readonly since: number;
  /** Tries that failed in this episode (a newer set replacing this one keeps counting). */
  readonly attempts: number;
  readonly error: { readonly at: number; readonly message: string; readonly fault: CacheFault };
  /** When the next try is due (ms since the epoch). */
  readonly retryAt: number;
}

/** What the sets need: the store, the cache, the hub's backoff, the log and a jitter source. */
export interface SetsOptions {
  readonly store: ConfigStore;
  readonly cache: FollowedCache;
  readonly cacheDir: string;
  readonly hub: HubClientConfig;
  readonly log: (line: string) => void;
  readonly random: () => number;
}

/** The served, pending and refused sets of one follower. */
export class FollowedSets {
  /** The set the live generation was built from, with its files; none asks for a snapshot. */
  served: Base | undefined;
  readonly #options: SetsOptions;
  #pending: Pending | undefined;
  #refused: string | undefined;
  /** Cache writes that failed since start (the `/metrics` counter). */
  #writeFailures = 0;

  /** @param options the store, cache, hub settings, log and jitter */
  constructor(options: SetsOptions) {
    this.#options = options;
  }

  /** The hash a poll says this node has: the served set's ("" for none). */
  get have(): string {
    return this.served?.hash ?? "";
  }

  /** The hash of the set received but not served (pending, else refused), or "". */
  get seen(): string {
    return this.#pending?.set.hash ?? this.#refused ?? "";
  }

  /** A set waits to be applied. */
  get pending(): boolean {
    return this.#pending !== undefined;
  }

  /** Milliseconds until the pending set's next try (0 when due, or with none). */
  dueIn(now = Date.now()): number {
    return Math.max(0, (this.#pending?.retryAt ?? now) - now);
  }

  /**
   * The hub says `hash` is its live set (a `current` answer).
   *
   * @returns true when this node knows that set: it serves it (a pending or refused set is then
   *   dropped: the hub went back) or has seen it
   */
  current(hash: string): boolean {
    if (hash !== "" && hash === this.served?.hash) {
      this.#settle(hash);
      return true;
    }
    return hash !== "" && hash === this.seen;
  }

  /**
   * A set received from the hub, checked against its hash: the served one (the cache is rewritten
   * if it was refused), one already seen (a repeat, nothing done), or a new one to apply.
   *
   * @param origin names the hub and its generation in log lines
   * @throws {CacheWriteError} when the set went live but the cache could not be made to hold it
   */
  async take(received: Base, hubGeneration: number, origin: string): Promise<Taken> {
    const { store, cache, cacheDir, log } = this.#options;
    const live = store.current;
    if (received.hash === live.hash) {
      this.served = received;
      this.#settle(received.hash);
      if (cache.refused) {
        await cache.write(received.files, received.hash);
        log(`portcullis: cache ${cacheDir} rewritten with the hub's set ${short(received.hash)}`);
      }
      return { outcome: "unchanged", generation: live };
    }
    if (received.hash === this.seen) {
      return { outcome: "unchanged", generation: live, repeat: true };
    }
    return await this.#apply(received, hubGeneration, origin);
  }

  /**
   * Tries the pending set again, from memory.
   *
   * @returns what the try did, or undefined with no set pending
   * @throws {CacheWriteError} when the set went live but the cache could not be made to hold it
   */
  async retry(origin: (hubGeneration: number) => string): Promise<OfferOutcome | undefined> {
    const pending = this.#pending;
    if (!pending) return undefined;
    return await this.#apply(pending.set, pending.hubGeneration, origin(pending.hubGeneration));
  }

  /** Stages a set, offers it, and makes it the cache's once live; a failed stage defers it. */
  async #apply(received: Base, hubGeneration: number, origin: string): Promise<OfferOutcome> {
    const { store, cacheDir, log } = this.#options;
    const { files, hash } = received;
    let staged: StagedGeneration;
    try {
      staged = await stageGeneration(cacheDir, files, hash);
    } catch (error) {
      if (!(error instanceof CacheWriteError)) throw error;
      return await this.#defer(received, hubGeneration, error);
    }
    const offered = await store.offer({
      dir: staged.folder,
      texts: runtimeTextsOf(files),
      source: "hub",
      hash,
    });
    const outcome = reportOutcome(offered, store, origin, log);
    if (outcome.outcome !== "loaded") {
      await discardStaged(staged);
      if (outcome.outcome === "rejected") [this.#pending, this.#refused] = [undefined, hash];
      return outcome;
    }
    const waited = this.#pending;
    if (waited) {
      log(
        `portcullis: cache ${cacheDir} is writable again: set ${short(hash)} applied after ` +
          `${waited.attempts} failed ${waited.attempts === 1 ? "try" : "tries"}`,
      );
    }
    [this.served, this.#pending, this.#refused] = [received, undefined, undefined];
    await this.#options.cache.commit(staged, hash);
    return outcome;
  }

  /** A set could not be staged: it waits, and is tried again after a backoff. */
  async #defer(received: Base, hubGeneration: number, error: CacheWriteError): Promise<Taken> {
    const { store, hub, log, random, cacheDir } = this.#options;
    await cleanStaging(cacheDir);
    const now = Date.now();
    const before = this.#pending;
    const attempts = (before?.attempts ?? 0) + 1;
    this.#writeFailures++;
    this.#pending = {
      set: received,
      hubGeneration,
      since: before?.since ?? now,
      attempts,
      error: { at: now, message: error.message, fault: error.fault },
      retryAt: now + backoffDelay(hub, attempts, random),
    };
    const live = store.current;
    if (before?.set.hash !== received.hash) {
      log(
        `portcullis: ${error.message}; set ${short(received.hash)} from hub ${hub.url} ` +
          `(hub generation ${hubGeneration}) waits; generation ${live.number} ` +
          `(${short(live.hash)}) stays live; retrying`,
      );
    }
    return { outcome: "pending", generation: live };
  }

  /** The hub's live set is `hash`, which this node serves: a set still waiting is dropped. */
  #settle(hash: string): void {
    const pending = this.#pending;
    if (pending) {
      this.#options.log(
        `portcullis: the hub's live set is ${short(hash)} again, which this edge serves; ` +
          `pending set ${short(pending.set.hash)} dropped`,
      );
    }
    [this.#pending, this.#refused] = [undefined, undefined];
  }

  /** The pending set and the failure count, for the follower's `status()`. */
  status(): Record<string, unknown> {
    const pending = this.#pending;
    const iso = (ms: number) => new Date(ms).toISOString();
    return {
      seen_hash: this.seen === "" ? null : this.seen,
      pending: pending
        ? {
          hash: pending.set.hash,
          hub_generation: pending.hubGeneration,
          since: iso(pending.since),
          retries: pending.attempts - 1,
          retry_at: iso(pending.retryAt),
          last_error: { ...pending.error, at: iso(pending.error.at) },
        }
        : null,
      cache_write_failures: this.#writeFailures,
    };
  }
}

/** The pending set as `status()` shows it (and a mirror receives it from the owner, as JSON). */
interface PendingView {
  readonly hash: string;
  readonly since: string;
  readonly retries: number;
  readonly last_error: { readonly fault: CacheFault };
}

/**
 * The `/metrics` facts of a follower's `status()`.
 *
 * @param status the follower's status, or none (an edge that does not follow a hub)
 * @returns the facts, or undefined without a status
 */
export function pendingFactsOf(
  status: Record<string, unknown> | null | undefined,
): PendingFacts | undefined {
  if (!status) return undefined;
  const pending = status.pending as PendingView | null | undefined;
  return {
    hash: pending?.hash,
    fault: pending?.last_error.fault,
    retries: pending?.retries ?? 0,
    since: pending ? Date.parse(pending.since) : undefined,
    failures: Number(status.cache_write_failures ?? 0),
  };
}
