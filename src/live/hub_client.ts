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
 * @module
 */
import { Buffer } from "node:buffer";
import { type CacheCheck, commitCache, stageCache, verifyCache } from "./cache.ts";
import {
  type FileSet,
  hashFileSet,
  isSafeRelativePath,
  runtimeTextsOf,
} from "../config/file_set.ts";
import type { ConfigStore, OfferOutcome } from "./generations.ts";
import type { HubClientConfig } from "../config/load.ts";
import { readNamedFile } from "../config/rooted_read.ts";
import { reportOutcome } from "./runtime_watch.ts";
import { describeError } from "../request/errors.ts";

/** The hub credentials are secrets; PEM files are small. */
const SECRET = { secret: true } as const;
const PEM = { maxBytes: 1 << 20 } as const;

/** What the edge last found in, or wrote to, its cache. */
interface CacheNote {
  readonly state: "none" | "verified" | "written" | "refused";
  readonly at: string;
  readonly hash?: string;
  readonly reason?: string;
}

/** The received set the next poll is keyed by. */
interface Base {
  readonly hash: string;
  readonly files: FileSet;
}

/** A hub answer, as far as the edge reads it. */
interface Answer {
  readonly type: "snapshot" | "delta" | "current";
  readonly generation: number;
  readonly hash: string;
  readonly from?: string;
  readonly files?: Record<string, string>;
  readonly changed?: Record<string, string>;
  readonly removed?: string[];
  readonly hub?: Record<string, unknown>;
}

/** A running follower. */
export interface HubFollower {
  /** Asks the hub now (without a hold) and applies the answer; rejects when the hub is away. */
  pollNow(): Promise<OfferOutcome>;
  /** The connection's state, for `/v1/config`. */
  status(): Record<string, unknown>;
  /** Stops following (idempotent). */
  stop(): void;
}

/** What following needs besides the store. */
export interface FollowOptions {
  readonly nodeId: string;
  readonly hub: HubClientConfig;
  readonly cacheDir: string;
  readonly log: (line: string) => void;
  /** Jitter source (tests inject one). */
  readonly random?: () => number;
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
  #cacheNote: CacheNote | undefined;
  #lastRefused: { at: string; reason: string } | undefined;

  /**
   * @param store the edge's generations
   * @param options the hub, node id, cache folder, log and jitter source
   */
  constructor(store: ConfigStore, options: FollowOptions) {
    this.#store = store;
    this.#options = options;
    this.#random = options.random ?? Math.random;
  }

  /** Starts the poll loop (it runs until {@link stop}). */
  start(): void {
    this.#run();
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
      retry_at: this.#retryAt === undefined ? null : new Date(this.#retryAt).toISOString(),
      received_hash: this.#base?.hash ?? null,
      cache: this.#cacheNote
        ? { ...this.#cacheNote, last_refused: this.#lastRefused ?? null }
        : null,
      hub_generation: this.#hubGeneration ?? null,
      hub: this.#hubNote ?? null,
    };
  }

  /** Stops following: the loop ends after the poll or sleep it is in is aborted. */
  stop(): void {
    this.#stopped = true;
    this.#current?.abort();
  }

  /** The loop: polls until stopped, then closes the HTTP client and fails any waiting caller. */
  async #run(): Promise<void> {
    this.#base = await this.#checkCache(true);
    while (!this.#stopped) {
      // The cache may have changed while the hub was away: check it before its hash is sent.
      if (this.#failures > 0 && this.#base) this.#base = await this.#checkCache(false, this.#base);
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
      if (current.signal.aborted && this.#urgent.length > 0 && wait) return;
      await this.#backOff(error, current.signal);
    }
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

  /**
   * Verifies the cache before its hash is sent. At start the cached set is the base when it is
   * the live one; later (after a failure) `held` stays the base when the cache still holds the
   * live set. A refusal is logged and leaves no base: the next poll asks for a snapshot.
   */
  async #checkCache(start: boolean, held?: Base): Promise<Base | undefined> {
    const { cacheDir, log } = this.#options;
    const live = this.#store.current.hash;
    const check = await verifyCache(cacheDir, start ? undefined : live)
      .catch((error): CacheCheck => ({
        state: "refused",
        reason: `unchecked (${describeHubFailure(error)})`,
      }));
    const at = new Date().toISOString();
    if (check.state === "refused") {
      this.#lastRefused = { at, reason: check.reason };
      this.#cacheNote = { state: "refused", ...this.#lastRefused };
      log(`portcullis: cache ${cacheDir} refused: ${check.reason}; asking the hub for a snapshot`);
      return undefined;
    }
    this.#cacheNote = check.state === "none"
      ? { state: "none", at }
      : { state: "verified", at, hash: check.hash };
    if (!start) return held;
    return check.state === "verified" && check.hash === live && live !== ""
      ? { hash: check.hash, files: check.files }
      : undefined;
  }

  /** Writes a set to a new cache folder (or commits one staged) and points the cache at it. */
  async #writeCache(files: FileSet, hash: string, folder?: string): Promise<void> {
    const { cacheDir } = this.#options;
    await commitCache(cacheDir, folder ?? await stageCache(cacheDir, files), hash);
    this.#cacheNote = { state: "written", at: new Date().toISOString(), hash };
  }

  /** Asks the hub for the set after the base (held unless `wait` is false), within the poll timeout. */
  async #request(wait: boolean, signal: AbortSignal): Promise<Answer> {
    const { hub, nodeId } = this.#options;
    const url = new URL("/v1/config/stream", hub.url);
    url.searchParams.set("node_id", nodeId);
    url.searchParams.set("have", this.#base?.hash ?? "");
    if (!wait) url.searchParams.set("wait", "0");
    const headers: Record<string, string> = { accept: "application/json" };
    if (hub.tokenFile) {
      const token = await readNamedFile(hub.tokenFile, "hub.token_file", SECRET);
      headers.authorization = `Bearer ${token.trim()}`;
    }
    const response = await fetch(url, {
      headers,
      client: await this.#httpClient(),
      signal: AbortSignal.any([signal, AbortSignal.timeout(hub.pollTimeoutMs)]),
    });
    return readAnswer(response.status, await response.text());
  }

  /** The mutual-TLS client, made from the credential files on first use after each failure. */
  async #httpClient(): Promise<Deno.HttpClient | undefined> {
    const { tls } = this.#options.hub;
    if (tls && !this.#client) {
      this.#client = Deno.createHttpClient({
        caCerts: [await readNamedFile(tls.caFile, "hub.tls.ca_file", PEM)],
        cert: await readNamedFile(tls.certFile, "hub.tls.cert_file", PEM),
        key: await readNamedFile(tls.keyFile, "hub.tls.key_file", { ...PEM, ...SECRET }),
      });
    }
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
    if (this.#cacheNote?.state === "refused") {
      const { cacheDir, log } = this.#options;
      await this.#writeCache(received.files, received.hash);
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
    let files: FileSet;
    try {
      files = rebuild(answer, this.#base);
    } catch (error) {
      this.#base = undefined;
      throw error;
    }
    const hash = await hashFileSet(files);
    if (hash !== answer.hash) {
      this.#base = undefined;
      throw new Error(
        `the received set hashes to ${hash.slice(0, 12)}, not ${answer.hash.slice(0, 12)}`,
      );
    }
    this.#base = { hash, files };
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
    if (outcome.outcome === "loaded") await this.#writeCache(files, hash, folder);
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

/**
 * The hub's answer to a poll, or an error naming the status and, from an error envelope, its code
 * and message (else the body's first 200 characters).
 */
function readAnswer(status: number, text: string): Answer {
  if (status !== 200) {
    let detail = text.slice(0, 200);
    try {
      const error = JSON.parse(text).error;
      detail = `${error.code}: ${error.message}`;
    } catch { /* not an envelope */ }
    throw new Error(`the hub answered ${status} (${detail})`);
  }
  return JSON.parse(text) as Answer;
}

/**
 * The wait before the next poll after `failures` in a row: a cap that doubles from
 * `backoff_initial_ms` up to `backoff_max_ms`, jittered over the cap's upper half.
 */
function backoffDelay(hub: HubClientConfig, failures: number, random: () => number): number {
  const cap = Math.min(hub.backoffMaxMs, hub.backoffInitialMs * 2 ** Math.min(failures - 1, 30));
  return Math.round(cap / 2 + random() * cap / 2);
}

/** Waits `ms`, or less when `signal` aborts. */
async function sleep(ms: number, signal: AbortSignal): Promise<void> {
  await new Promise<void>((resolve) => {
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal.removeEventListener("abort", done);
      resolve();
    }
    signal.addEventListener("abort", done);
  });
}

/** The file set an answer describes, from the answer and the set it is a delta against. */
function rebuild(answer: Answer, base: Base | undefined): FileSet {
  if (answer.type === "current") throw new Error("the hub's current set is not the one held");
  if (answer.type === "delta" && answer.from !== base?.hash) {
    throw new Error("the hub sent a delta against a set this edge does not hold");
  }
  const files = new Map(answer.type === "delta" ? base!.files : []);
  for (const name of answer.removed ?? []) files.delete(name);
  for (const [name, data] of Object.entries(answer.files ?? answer.changed ?? {})) {
    if (!isSafeRelativePath(name)) {
      throw new Error(`the hub sent an unsafe path ${JSON.stringify(name)}`);
    }
    files.set(name, new Uint8Array(Buffer.from(data, "base64")));
  }
  return files;
}

/**
 * What the edge says about a failed poll, in its log and in `status().hub.last_error`. Not plain
 * {@link describeError}: an operator needs "no answer in time" rather than `TimeoutError: Signal
 * timed out.`, the cause rather than fetch's wrapper and its URL, and a hint where rustls reports a
 * refused client certificate as the hub hanging up mid-handshake (proof 11 reads these lines).
 */
function describeHubFailure(error: unknown): string {
  if (error instanceof DOMException && error.name === "TimeoutError") return "no answer in time";
  const inner = error instanceof Error && error.cause instanceof Error ? error.cause : error;
  const message = (inner instanceof Error ? inner.message : describeError(inner))
    .replace(/^error sending request for url \([^)]*\): /, "");
  return /close_notify|handshake/i.test(message)
    ? `the hub ended the TLS handshake (is cert_file signed by the hub's client CA?): ${message}`
    : message;
}
