/**
 * Remote mode: an edge follows its hub's config stream. It asks with the hash of the last set it
 * received; the hub answers with a snapshot, a delta against that set, or `current` after a hold.
 * A received set is rebuilt, checked against the hash the hub sent, written to a fresh cache folder
 * and offered to the store; only a set the store accepts becomes the cache's live generation. On
 * any failure the live generation stays and the edge asks again after a backoff that doubles from
 * `backoff_initial_ms` up to `backoff_max_ms` (30 s by default), with jitter.
 *
 * The cache is verified before its hash is sent (see `cache.ts`): at start, and before every
 * attempt after a failure, since the cache may have changed while the hub was away. A refused cache
 * is logged once with what differed, shown in `status().cache`, and the edge asks with no hash, so
 * the hub answers with a full snapshot rather than a delta against a set the disk no longer holds.
 * A snapshot equal to the live set then rewrites the cache (a new folder, then the pointer).
 *
 * The wire side of a poll — asking, reading the answer, rebuilding and checking the set — is in
 * `hub_answer.ts`, and the cache checks and writes with what they found in `hub_cache.ts`; this
 * module holds the follower's loop, its connection state, and what it does with each answer.
 *
 * @module
 */
import { stageCache } from "./cache.ts";
import { runtimeTextsOf } from "../config/file_set.ts";
import type { ConfigStore, OfferOutcome } from "./generations.ts";
import type { HubClientConfig } from "../config/load.ts";
import {
  type Answer,
  askHub,
  type Base,
  describeHubFailure,
  hubHttpClient,
  HubRefusal,
  receiveSet,
} from "./hub_answer.ts";
import type { CertificateRenewal } from "./enrol.ts";
import { FollowedCache } from "./hub_cache.ts";
import { reportOutcome } from "./runtime_watch.ts";
import { backoffDelay, sleep } from "./backoff.ts";

/** A running follower. */
export interface HubFollower {
  /** Asks the hub now (without a hold) and applies the answer; rejects when the hub is away. */
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
 * One edge following its hub. Its fields are the connection's state (shown by `status()`); its
 * steps, top to bottom: verify the cache, then poll (held, or at once for a waiting caller), apply
 * the answer, and after a failure back off and verify the cache again.
 */
class Follower implements HubFollower {
  readonly #store: ConfigStore;
  readonly #options: FollowOptions;
  readonly #random: () => number;
  /** The received set the next poll is keyed by; none asks for a snapshot. */
  #base: Base | undefined;
  #stopped = false;
  #failures = 0;
  #connected = false;
  #lastError: { at: string; message: string } | undefined;
  #lastContact: string | undefined;
  #hubNote: Record<string, unknown> | undefined;
  #hubGeneration: number | undefined;
  #retryAt: number | undefined;
  #client: Deno.HttpClient | undefined;
  /** Aborts the poll in flight, or the backoff sleep after it. */
  #current: AbortController | undefined;
  /** The poll in flight is a held one. */
  #holding = false;
  #urgent: Urgent[] = [];
  readonly #cache: FollowedCache;
  #revoked: { at: string; reason: string } | undefined;
  #onRevoked: ((reason: string) => void) | undefined;

  /**
   * @param store the edge's generations
   * @param options the hub, node id, cache folder, log and jitter source
   */
  constructor(store: ConfigStore, options: FollowOptions) {
    this.#store = store;
    this.#options = options;
    this.#random = options.random ?? Math.random;
    this.#cache = new FollowedCache(options.cacheDir, options.log);
  }

  /** Starts the poll loop (it runs until {@link stop}) and the renewal checks. */
  start(): void {
    this.#run();
    this.#options.renewal?.start(() => {
      this.#client?.close();
      this.#client = undefined;
    });
  }

  whenRevoked(callback: (reason: string) => void): void {
    this.#onRevoked = callback;
    if (this.#revoked) callback(this.#revoked.reason);
  }

  /** Asks now: cuts a held poll or a backoff short, and waits for the answer the loop gets. */
  pollNow(): Promise<OfferOutcome> {
    if (this.#stopped) return Promise.reject(new Error("The edge stopped following the hub"));
    return new Promise<OfferOutcome>((resolve, reject) => {
      this.#urgent.push({ resolve, reject });
      if (this.#holding || this.#retryAt !== undefined) this.#current?.abort();
    });
  }

  /** The connection's state, for `/v1/config`. */
  status(): Record<string, unknown> {
    const { hub } = this.#options;
    return {
      url: hub.url,
      auth: hub.tls ? "mutual TLS" : "token",
      connected: this.#connected,
      last_contact: this.#lastContact ?? null,
      last_error: this.#lastError ?? null,
      failures: this.#failures,
      revoked: this.#revoked ?? null,
      renewal: this.#options.renewal?.status() ?? null,
      retry_at: this.#retryAt === undefined ? null : new Date(this.#retryAt).toISOString(),
      received_hash: this.#base?.hash ?? null,
      cache: this.#cache.status(),
      hub_generation: this.#hubGeneration ?? null,
      hub: this.#hubNote ?? null,
    };
  }

  /** Stops following: the loop ends after the poll or sleep it is in is aborted. */
  stop(): void {
    this.#stopped = true;
    this.#options.renewal?.stop();
    this.#current?.abort();
  }

  /** The loop: polls until stopped, then closes the HTTP client and fails any waiting caller. */
  async #run(): Promise<void> {
    this.#base = await this.#cache.check(this.#store.current.hash, true);
    while (!this.#stopped) {
      // The cache may have changed while the hub was away: check it before its hash is sent.
      if (this.#failures > 0 && this.#base) {
        this.#base = await this.#cache.check(this.#store.current.hash, false, this.#base);
      }
      if (this.#stopped) break;
      await this.#pollOnce();
    }
    this.#client?.close();
    this.#settleUrgent(new Error("The edge stopped following the hub"));
  }

  /**
   * One poll: held unless a caller waits, whose answer is applied; after a failure, a backoff. A
   * held poll cut short for a waiting caller is no failure: the loop asks again at once.
   */
  async #pollOnce(): Promise<void> {
    const current = this.#current = new AbortController();
    const wait = this.#urgent.length === 0;
    this.#holding = wait;
    try {
      const answer = await this.#request(wait, current.signal);
      this.#holding = false;
      this.#noteContact();
      const outcome = await this.#apply(answer);
      if (!wait) this.#settleUrgent(outcome);
    } catch (error) {
      this.#holding = false;
      if (this.#stopped) return;
      if (error instanceof HubRefusal && error.code === "node_revoked") {
        return this.#revoke(error.message);
      }
      if (current.signal.aborted && this.#urgent.length > 0 && wait) return;
      await this.#backOff(error, current.signal);
    }
  }

  /** The hub says this node is revoked: stop asking, and tell whoever stops the edge. */
  #revoke(message: string): void {
    this.#revoked = { at: new Date().toISOString(), reason: message };
    this.#connected = false;
    this.#options.log(
      `portcullis: hub ${this.#options.hub.url}: this node is revoked (${message})`,
    );
    this.stop();
    this.#onRevoked?.(message);
  }

  /** The hub answered: logs a reconnection, clears the failure count and the retry time. */
  #noteContact(): void {
    const { hub, log } = this.#options;
    if (!this.#connected) log(`portcullis: hub ${hub.url} connected`);
    this.#connected = true;
    this.#failures = 0;
    this.#retryAt = undefined;
    this.#lastContact = new Date().toISOString();
  }

  /**
   * After a failed poll: logs it (once an outage), fails waiting callers, drops the HTTP client, and
   * sleeps the backoff — cut short by `pollNow()` or `stop()` through `signal`.
   */
  async #backOff(error: unknown, signal: AbortSignal): Promise<void> {
    const { hub, log } = this.#options;
    const message = describeHubFailure(error);
    if (this.#connected || this.#failures === 0) {
      log(`portcullis: hub ${hub.url}: ${message}; retrying`);
    }
    this.#connected = false;
    this.#lastError = { at: new Date().toISOString(), message };
    this.#failures++;
    this.#client?.close();
    this.#client = undefined;
    this.#settleUrgent(new Error(`The hub could not be reached: ${message}`));
    const delay = backoffDelay(hub, this.#failures, this.#random);
    this.#retryAt = Date.now() + delay;
    await sleep(delay, signal);
  }

  /** Asks the hub for the set after the base (held unless `wait` is false), within the poll timeout. */
  #request(wait: boolean, signal: AbortSignal): Promise<Answer> {
    const { hub, nodeId } = this.#options;
    const have = this.#base?.hash ?? "";
    return askHub({ hub, nodeId, have, wait, client: () => this.#httpClient(), signal });
  }

  /** The mutual-TLS client, made from the credential files on first use after each failure. */
  async #httpClient(): Promise<Deno.HttpClient | undefined> {
    const { tls } = this.#options.hub;
    if (tls && !this.#client) this.#client = await hubHttpClient(tls);
    return this.#client;
  }

  /**
   * Applies an answer: `current` for the base changes nothing; otherwise the received set becomes
   * the base, and is offered to the store unless it is the live set already.
   */
  async #apply(answer: Answer): Promise<OfferOutcome> {
    this.#hubNote = answer.hub;
    this.#hubGeneration = answer.generation;
    if (answer.type === "current" && answer.hash === this.#base?.hash) {
      return { outcome: "unchanged", generation: this.#store.current };
    }
    const received = await this.#receive(answer);
    if (received.hash !== this.#store.current.hash) return await this.#offer(received, answer);
    if (this.#cache.refused) {
      const { cacheDir, log } = this.#options;
      await this.#cache.write(received.files, received.hash);
      log(
        `portcullis: cache ${cacheDir} rewritten with the hub's set ${received.hash.slice(0, 12)}`,
      );
    }
    return { outcome: "unchanged", generation: this.#store.current };
  }

  /**
   * Rebuilds the set an answer describes and checks it against the hash the hub sent; it becomes
   * the base. On failure there is no base: the next poll asks for a snapshot.
   */
  async #receive(answer: Answer): Promise<Base> {
    try {
      this.#base = await receiveSet(answer, this.#base);
    } catch (error) {
      this.#base = undefined;
      throw error;
    }
    return this.#base;
  }

  /** Offers a received set from a staged cache folder, which becomes the cache only if loaded. */
  async #offer(received: Base, answer: Answer): Promise<OfferOutcome> {
    const { hub, cacheDir, log } = this.#options;
    const { files, hash } = received;
    const folder = await stageCache(cacheDir, files);
    const outcome = reportOutcome(
      await this.#store.offer({ dir: folder, texts: runtimeTextsOf(files), source: "hub", hash }),
      this.#store,
      `hub ${hub.url} (hub generation ${answer.generation})`,
      log,
    );
    if (outcome.outcome === "loaded") await this.#cache.write(files, hash, folder);
    else await Deno.remove(folder, { recursive: true }).catch(() => {});
    return outcome;
  }

  /** Answers every waiting `pollNow()` caller with an outcome or an error. */
  #settleUrgent(result: OfferOutcome | Error): void {
    const waiting = this.#urgent;
    this.#urgent = [];
    for (const w of waiting) result instanceof Error ? w.reject(result) : w.resolve(result);
  }
}
