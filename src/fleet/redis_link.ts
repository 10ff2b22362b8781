/**
 * One isolate's connection to one fleet store (a Redis-protocol server: Redis or Valkey), through
 * `@redis/client` 5 — chosen by measurement (docs/decisions.md §17): with 64 callers it made about
 * three times the script calls a second of `ioredis` (91k against 32k), it needs nothing but the
 * net grant (ioredis's `debug` dependency reads the environment), and it installs two packages.
 *
 * The link fails fast and never queues: no offline queue, so a request never waits on a store that
 * is down — the caller decides on its own table at once — and a command later than the policy's
 * `timeout_ms` is given up here (the client has no timeout for a server that stopped answering;
 * its answer, if it comes, is ignored). The client reconnects by itself every 20–200 ms; each
 * change between up and down is logged once. The GCRA script is called by its SHA-1 and sent
 * whole only when the store answers `NOSCRIPT` (after a restart, say).
 *
 * @module
 */
import { createHash } from "node:crypto";
import { GCRA_SCRIPT } from "./gcra_script.ts";
import type { StoreCount } from "./store_counters.ts";

/** The store's GCRA answer: allowed (1 or 0), arrival time ahead of now (µs), denials in a row. */
export type GcraReply = [allowed: number, aheadUs: number, denials: number];

/** Thrown when the store did not answer within the caller's timeout. */
export class StoreTimeout extends Error {
  /** The timeout that passed (ms). */
  readonly timeoutMs: number;

  /** @param timeoutMs the timeout that passed */
  constructor(timeoutMs: number) {
    super(`The store did not answer within ${timeoutMs} ms`);
    this.name = "StoreTimeout";
    this.timeoutMs = timeoutMs;
  }
}

const GCRA_SHA = createHash("sha1").update(GCRA_SCRIPT).digest("hex");

type Client = ReturnType<typeof import("@redis/client").createClient>;

/** A client of `url` that fails fast and reconnects by itself. */
async function connectClient(url: string): Promise<Client> {
  const { createClient } = await import("@redis/client");
  const parsed = new URL(url);
  return createClient({
    socket: {
      host: parsed.hostname.replace(/^\[|\]$/g, ""),
      port: Number(parsed.port),
      connectTimeout: 2000,
      reconnectStrategy: (retries: number) => Math.min(retries * 20, 200),
    },
    database: parsed.pathname.length > 1 ? Number(parsed.pathname.slice(1)) : 0,
    disableOfflineQueue: true,
  });
}

/** One fleet store as one isolate reaches it. */
export class RedisLink {
  readonly url: string;
  readonly #count: StoreCount;
  readonly #log: (line: string) => void;
  #client?: Client;
  #subscriber?: Client;
  #closed = false;

  /**
   * @param url `redis://host:port[/db]`
   * @param count this isolate's counters of the store
   * @param log where transitions are logged
   */
  constructor(url: string, count: StoreCount, log: (line: string) => void) {
    this.url = url;
    this.#count = count;
    this.#log = log;
  }

  /** True while the connection is ready. */
  get up(): boolean {
    return this.#count.up === 1;
  }

  /** Connects (in the background: a store that is down at boot is retried, never waited on). */
  async open(): Promise<void> {
    const client = await connectClient(this.url);
    if (this.#closed) return;
    client.on("error", () => this.#set(0)); // a lost or refused connection; it retries
    client.on("ready", () => this.#set(1));
    this.#client = client;
    client.connect().catch(() => {});
  }

  #set(up: number): void {
    if (this.#count.up === up || this.#closed) return;
    this.#count.up = up;
    this.#log(
      up
        ? `portcullis: fleet store ${this.url} is up: policies decide on it again`
        : `portcullis: warning: fleet store ${this.url} is down: policies decide on this edge's ` +
          "own tables until it returns",
    );
  }

  /**
   * One GCRA decision on the store.
   *
   * @throws {StoreTimeout} when the store did not answer within `timeoutMs`
   * @throws {Error} when the store is down or failed the command
   */
  gcra(
    key: string,
    intervalUs: number,
    toleranceUs: number,
    timeoutMs: number,
  ): Promise<GcraReply> {
    const client = this.#ready();
    const options = { keys: [key], arguments: [String(intervalUs), String(toleranceUs)] };
    this.#count.roundTrips++;
    const reply = client.evalSha(GCRA_SHA, options).catch((error: Error) => {
      if (!String(error?.message).startsWith("NOSCRIPT")) throw error;
      this.#count.roundTrips++;
      return client.eval(GCRA_SCRIPT, options);
    });
    return within(reply as Promise<GcraReply>, timeoutMs);
  }

  /** Sets `key` for `ttlMs` and publishes `message` on `channel`, in one round trip. */
  async block(
    key: string,
    ttlMs: number,
    channel: string,
    message: string,
    timeoutMs: number,
  ): Promise<void> {
    const client = this.#ready();
    this.#count.roundTrips++;
    const exec = client.multi().set(key, "1", { PX: ttlMs }).publish(channel, message).exec();
    await within(exec, timeoutMs);
  }

  /**
   * Every key matching `pattern` with its time to live (ms), a page at a time: for an edge to
   * learn the blocks made while it was away.
   */
  async *scan(pattern: string, timeoutMs: number): AsyncGenerator<[string, number]> {
    const client = this.#ready();
    let cursor = "0";
    do {
      this.#count.roundTrips++;
      const page = await within(client.scan(cursor, { MATCH: pattern, COUNT: 500 }), timeoutMs);
      cursor = String(page.cursor);
      if (page.keys.length === 0) continue;
      this.#count.roundTrips++;
      const batch = client.multi();
      for (const key of page.keys) batch.pTTL(key);
      const ttls = await within(batch.execAsPipeline(), timeoutMs);
      for (let i = 0; i < page.keys.length; i++) {
        const ttl = Number(ttls[i]);
        if (ttl > 0) yield [String(page.keys[i]), ttl];
      }
    } while (cursor !== "0");
  }

  /**
   * Listens on `channel` over a second connection (a subscribed connection can do nothing else),
   * calling `onReady` whenever it is (re)established — after a gap, to catch up — and `onMessage`
   * for each message. The client subscribes again by itself after a reconnect.
   */
  async subscribe(
    channel: string,
    handlers: { onMessage: (message: string) => void; onReady: () => void },
  ): Promise<void> {
    const subscriber = await connectClient(this.url);
    if (this.#closed) return;
    this.#subscriber = subscriber;
    subscriber.on("error", () => {});
    let subscribed = false;
    subscriber.on("ready", () => {
      if (subscribed) handlers.onReady();
    });
    subscriber.connect().then(
      () => subscriber.subscribe(channel, (message: string) => handlers.onMessage(message)),
    ).then(() => {
      subscribed = true;
      handlers.onReady();
    }).catch(() => {});
  }

  /** The client when ready, else throws at once (the caller falls back). */
  #ready(): Client {
    const client = this.#client;
    if (!client?.isReady) throw new Error(`Store ${this.url} is not ready`);
    return client;
  }

  /** Closes both connections; nothing is logged after. */
  close(): void {
    this.#closed = true;
    for (const client of [this.#client, this.#subscriber]) {
      if (client?.isOpen) client.destroy();
    }
  }
}

/** `promise`, or a {@link StoreTimeout} after `timeoutMs`. */
function within<T>(promise: Promise<T>, timeoutMs: number): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new StoreTimeout(timeoutMs)), timeoutMs);
  });
  return Promise.race([promise, late]).finally(() => clearTimeout(timer));
}
