/**
 * One isolate's connection to one fleet store (a Redis-protocol server: Redis or Valkey), through
 * `ioredis` (chosen by measurement, docs/decisions.md §20). The link is built to fail fast, never
 * to queue: no offline queue and no retry of a command, so a request never waits on a store that
 * is down — the caller decides on its own table at once — and a command that is late past the
 * policy's `timeout_ms` is given up (its answer, if it comes, is ignored). The client reconnects
 * by itself (every 20–200 ms); each change between up and down is logged once.
 *
 * `ioredis` is loaded only when a store is configured: its `debug` dependency reads `DEBUG`, which
 * `flags` then hides with `--ignore-env=DEBUG` (no environment access is granted).
 *
 * @module
 */
import type { Redis } from "ioredis";
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

type GcraClient = Redis & {
  portcullisGcra(key: string, intervalUs: number, toleranceUs: number): Promise<GcraReply>;
};

/** Options every connection of a link is made with. */
function clientOptions(url: URL) {
  return {
    host: url.hostname.replace(/^\[|\]$/g, ""),
    port: Number(url.port),
    db: url.pathname.length > 1 ? Number(url.pathname.slice(1)) : 0,
    lazyConnect: true,
    enableOfflineQueue: false,
    maxRetriesPerRequest: 0,
    retryStrategy: (attempt: number) => Math.min(attempt * 20, 200),
    connectTimeout: 2000,
  };
}

/** One fleet store as one isolate reaches it. */
export class RedisLink {
  readonly url: string;
  readonly #count: StoreCount;
  readonly #log: (line: string) => void;
  #client?: GcraClient;
  #subscriber?: Redis;
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
    const { Redis: Client } = await import("ioredis");
    if (this.#closed) return;
    const client = new Client(clientOptions(new URL(this.url))) as GcraClient;
    client.defineCommand("portcullisGcra", { numberOfKeys: 1, lua: GCRA_SCRIPT });
    this.#watch(client, "");
    this.#client = client;
    client.connect().catch(() => {}); // "error" and "close" report it; the client retries
  }

  /** Follows `client`'s state: up on ready, down on close, each change logged once. */
  #watch(client: Redis, what: string): void {
    client.on("error", () => {}); // a refused connection: "close" follows, and a retry
    client.on("ready", () => {
      if (what === "") this.#set(1);
    });
    client.on("close", () => {
      if (what === "") this.#set(0);
    });
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
    this.#count.roundTrips++;
    return within(client.portcullisGcra(key, intervalUs, toleranceUs), timeoutMs);
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
    const pipeline = client.multi().set(key, "1", "PX", ttlMs).publish(channel, message);
    await within(pipeline.exec(), timeoutMs);
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
      const [next, keys] = await within(
        client.scan(cursor, "MATCH", pattern, "COUNT", 500),
        timeoutMs,
      );
      cursor = next;
      if (keys.length === 0) continue;
      this.#count.roundTrips++;
      const pipeline = client.pipeline();
      for (const key of keys) pipeline.pttl(key);
      const ttls = (await within(pipeline.exec(), timeoutMs)) ?? [];
      for (let i = 0; i < keys.length; i++) {
        const [error, ttl] = ttls[i] ?? [null, -1];
        if (!error && typeof ttl === "number" && ttl > 0) yield [keys[i], ttl];
      }
    } while (cursor !== "0");
  }

  /**
   * Listens on `channel` over a second connection (a subscribed connection can do nothing else),
   * calling `onReady` whenever it is (re)subscribed — after a gap, to catch up — and `onMessage`
   * for each message.
   */
  async subscribe(
    channel: string,
    handlers: { onMessage: (message: string) => void; onReady: () => void },
  ): Promise<void> {
    const { Redis: Client } = await import("ioredis");
    if (this.#closed) return;
    const options = { ...clientOptions(new URL(this.url)), enableOfflineQueue: true };
    const subscriber = new Client({ ...options, autoResubscribe: false });
    this.#subscriber = subscriber;
    subscriber.on("error", () => {});
    subscriber.on("message", (_channel: string, message: string) => handlers.onMessage(message));
    subscriber.on("ready", () => {
      subscriber.subscribe(channel).then(() => handlers.onReady(), () => {});
    });
    subscriber.connect().catch(() => {});
  }

  /** The client when ready, else throws at once (the caller falls back). */
  #ready(): GcraClient {
    const client = this.#client;
    if (!client || client.status !== "ready") throw new Error(`Store ${this.url} is not ready`);
    return client;
  }

  /** Closes both connections; nothing is logged after. */
  close(): void {
    this.#closed = true;
    this.#client?.disconnect();
    this.#subscriber?.disconnect();
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
