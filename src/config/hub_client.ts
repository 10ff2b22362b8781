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
import { type FileSet, hashFileSet, isSafeRelativePath, runtimeTextsOf } from "./file_set.ts";
import type { ConfigStore, OfferOutcome } from "./generations.ts";
import type { HubClientConfig } from "./load.ts";
import { readNamedFile } from "./rooted_read.ts";
import { reportOutcome } from "./runtime_watch.ts";

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
  const { hub, log, cacheDir } = options;
  const random = options.random ?? Math.random;
  let base: Base | undefined;
  let stopped = false;
  let failures = 0;
  let connected = false;
  let lastError: { at: string; message: string } | undefined;
  let lastContact: string | undefined;
  let hubNote: Record<string, unknown> | undefined;
  let hubGeneration: number | undefined;
  let retryAt: number | undefined;
  let client: Deno.HttpClient | undefined;
  let current: AbortController | undefined;
  let holding = false;
  let urgent: { resolve: (o: OfferOutcome) => void; reject: (e: Error) => void }[] = [];
  let cacheNote: CacheNote | undefined;
  let lastRefused: { at: string; reason: string } | undefined;

  /**
   * Verifies the cache before its hash is sent. At start the cached set is the base when it is
   * the live one; later (after a failure) `held` stays the base when the cache still holds the
   * live set. A refusal is logged and leaves no base: the next poll asks for a snapshot.
   */
  async function checkCache(start: boolean, held?: Base): Promise<Base | undefined> {
    const live = store.current.hash;
    const check = await verifyCache(cacheDir, start ? undefined : live)
      .catch((error): CacheCheck => ({
        state: "refused",
        reason: `unchecked (${describe(error)})`,
      }));
    const at = new Date().toISOString();
    if (check.state === "refused") {
      lastRefused = { at, reason: check.reason };
      cacheNote = { state: "refused", ...lastRefused };
      log(`portcullis: cache ${cacheDir} refused: ${check.reason}; asking the hub for a snapshot`);
      return undefined;
    }
    cacheNote = check.state === "none"
      ? { state: "none", at }
      : { state: "verified", at, hash: check.hash };
    if (!start) return held;
    return check.state === "verified" && check.hash === live && live !== ""
      ? { hash: check.hash, files: check.files }
      : undefined;
  }

  /** Writes a set to a new cache folder and points the cache at it. */
  async function writeCache(files: FileSet, hash: string, folder?: string): Promise<void> {
    await commitCache(cacheDir, folder ?? await stageCache(cacheDir, files), hash);
    cacheNote = { state: "written", at: new Date().toISOString(), hash };
  }

  async function request(wait: boolean, signal: AbortSignal): Promise<Answer> {
    const url = new URL("/v1/config/stream", hub.url);
    url.searchParams.set("node_id", options.nodeId);
    url.searchParams.set("have", base?.hash ?? "");
    if (!wait) url.searchParams.set("wait", "0");
    const headers: Record<string, string> = { accept: "application/json" };
    if (hub.tokenFile) {
      const token = await readNamedFile(hub.tokenFile, "hub.token_file", SECRET);
      headers.authorization = `Bearer ${token.trim()}`;
    }
    if (hub.tls && !client) {
      client = Deno.createHttpClient({
        caCerts: [await readNamedFile(hub.tls.caFile, "hub.tls.ca_file", PEM)],
        cert: await readNamedFile(hub.tls.certFile, "hub.tls.cert_file", PEM),
        key: await readNamedFile(hub.tls.keyFile, "hub.tls.key_file", { ...PEM, ...SECRET }),
      });
    }
    const response = await fetch(url, {
      headers,
      client,
      signal: AbortSignal.any([signal, AbortSignal.timeout(hub.pollTimeoutMs)]),
    });
    const text = await response.text();
    if (response.status !== 200) {
      let detail = text.slice(0, 200);
      try {
        const error = JSON.parse(text).error;
        detail = `${error.code}: ${error.message}`;
      } catch { /* not an envelope */ }
      throw new Error(`the hub answered ${response.status} (${detail})`);
    }
    return JSON.parse(text) as Answer;
  }

  async function apply(answer: Answer): Promise<OfferOutcome> {
    hubNote = answer.hub;
    hubGeneration = answer.generation;
    if (answer.type === "current" && answer.hash === base?.hash) {
      return { outcome: "unchanged", generation: store.current };
    }
    let files: FileSet;
    try {
      files = rebuild(answer, base);
    } catch (error) {
      base = undefined;
      throw error;
    }
    const hash = await hashFileSet(files);
    if (hash !== answer.hash) {
      base = undefined;
      throw new Error(
        `the received set hashes to ${hash.slice(0, 12)}, not ${answer.hash.slice(0, 12)}`,
      );
    }
    base = { hash, files };
    if (hash === store.current.hash) {
      if (cacheNote?.state === "refused") {
        await writeCache(files, hash);
        log(`portcullis: cache ${cacheDir} rewritten with the hub's set ${hash.slice(0, 12)}`);
      }
      return { outcome: "unchanged", generation: store.current };
    }
    const folder = await stageCache(cacheDir, files);
    const outcome = reportOutcome(
      await store.offer({ dir: folder, texts: runtimeTextsOf(files), source: "hub", hash }),
      store,
      `hub ${hub.url} (hub generation ${answer.generation})`,
      log,
    );
    if (outcome.outcome === "loaded") await writeCache(files, hash, folder);
    else await Deno.remove(folder, { recursive: true }).catch(() => {});
    return outcome;
  }

  function settleUrgent(result: OfferOutcome | Error): void {
    const waiting = urgent;
    urgent = [];
    for (const w of waiting) result instanceof Error ? w.reject(result) : w.resolve(result);
  }

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

  (async () => {
    base = await checkCache(true);
    while (!stopped) {
      // The cache may have changed while the hub was away: check it before its hash is sent.
      if (failures > 0 && base) base = await checkCache(false, base);
      if (stopped) break;
      current = new AbortController();
      const wait = urgent.length === 0;
      holding = wait;
      try {
        const answer = await request(wait, current.signal);
        holding = false;
        if (!connected) log(`portcullis: hub ${hub.url} connected`);
        connected = true;
        failures = 0;
        retryAt = undefined;
        lastContact = new Date().toISOString();
        const outcome = await apply(answer);
        if (!wait) settleUrgent(outcome);
      } catch (error) {
        holding = false;
        if (stopped) break;
        if (current.signal.aborted && urgent.length > 0 && wait) continue;
        const message = describe(error);
        if (connected || failures === 0) log(`portcullis: hub ${hub.url}: ${message}; retrying`);
        connected = false;
        lastError = { at: new Date().toISOString(), message };
        failures++;
        client?.close();
        client = undefined;
        settleUrgent(new Error(`The hub could not be reached: ${message}`));
        const cap = Math.min(
          hub.backoffMaxMs,
          hub.backoffInitialMs * 2 ** Math.min(failures - 1, 30),
        );
        const delay = Math.round(cap / 2 + random() * cap / 2);
        retryAt = Date.now() + delay;
        await sleep(delay, current.signal);
      }
    }
    client?.close();
    settleUrgent(new Error("The edge stopped following the hub"));
  })();

  return {
    pollNow() {
      if (stopped) return Promise.reject(new Error("The edge stopped following the hub"));
      return new Promise<OfferOutcome>((resolve, reject) => {
        urgent.push({ resolve, reject });
        if (holding || retryAt !== undefined) current?.abort();
      });
    },
    status() {
      return {
        url: hub.url,
        auth: hub.tls ? "mutual TLS" : "token",
        connected,
        last_contact: lastContact ?? null,
        last_error: lastError ?? null,
        failures,
        retry_at: retryAt === undefined ? null : new Date(retryAt).toISOString(),
        received_hash: base?.hash ?? null,
        cache: cacheNote ? { ...cacheNote, last_refused: lastRefused ?? null } : null,
        hub_generation: hubGeneration ?? null,
        hub: hubNote ?? null,
      };
    },
    stop() {
      stopped = true;
      current?.abort();
    },
  };
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

function describe(error: unknown): string {
  if (error instanceof DOMException && error.name === "TimeoutError") return "no answer in time";
  const inner = error instanceof Error && error.cause instanceof Error ? error.cause : error;
  const message = (inner instanceof Error ? inner.message : String(inner))
    .replace(/^error sending request for url \([^)]*\): /, "");
  // rustls reports a refused client certificate as the hub hanging up mid-handshake.
  return /close_notify|handshake/i.test(message)
    ? `the hub ended the TLS handshake (is cert_file signed by the hub's client CA?): ${message}`
    : message;
}
