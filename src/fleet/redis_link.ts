/**
 * One isolate's connection to one fleet store (a Redis-protocol server: Redis or Valkey), through
 * `@redis/client` 5 — chosen by measurement (docs/decisions.md §17): with 64 callers it made about
 * three times the script calls a second of `ioredis` (91k against 32k), it needs nothing but the
 * net grant (ioredis's `debug` dependency reads the environment), and it installs two packages.
 *
 * The link fails fast and never queues: no offline queue, so a request never waits on a store that
 * is down — the caller decides on its own table at once — and a command later than the policy's
 * `timeout_ms` is given up here (the client has no timeout for a server that stopped answering;
 * its answer, if it comes, is ignored). The client reconnects by itself every 20–200 ms. Up means
 * ready and answering in time (store_liveness.ts): a store that hangs on an open connection is
 * down after a few late answers and up again on the first answer in time; each change is logged
 * once, with its reason. The GCRA script is called by its SHA-1 and sent whole only when the store
 * answers `NOSCRIPT` (after a restart, say).
 *
 * @module
 */
import { createHash } from "node:crypto";
import { GCRA_SCRIPT } from "./gcra_script.ts";
import type { StoreCount } from "./store_counters.ts";
import { PROBE_DOWN_MS, StoreLiveness } from "./store_liveness.ts";

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

/** What a link needs besides its URL and counters. */
export interface LinkOptions {
  /** Where changes between up and down are logged. */
  readonly log: (line: string) => void;
  /** The deadline of a ping (ms): the longest `timeout_ms` a policy gives this store. */
  readonly pingDeadline: () => number;
}

/** One fleet store as one isolate reaches it. */
export class RedisLink {
  readonly url: string;
  readonly #count: StoreCount;
  readonly #options: LinkOptions;
  readonly #liveness: StoreLiveness;
  #client?: Client;
  #subscriber?: Client;
  #timer?: number;
  #closed = false;

  /**
   * @param url `redis://host:port[/db]`
   * @param count this isolate's counters of the store (`up` is kept here)
   * @param options the log and the ping deadline
   */
  constructor(url: string, count: StoreCount, options: LinkOptions) {
    this.url = url;
    this.#count = count;
    this.#options = options;
    this.#liveness = new StoreLiveness({
      ping: () => this.#ping(),
      changed: (up, reason) => this.#changed(up, reason),
      clock: () => performance.now(),
    });
  }

  /** True while the connection is ready and the store answers in time. */
  get up(): boolean {
    return this.#liveness.up;
  }

  /** Connects (in the background: a store that is down at boot is retried, never waited on). */
  async open(): Promise<void> {
    const client = await connectClient(this.url);
    if (this.#closed) return;
    // A lost or refused connection; the client retries by itself.
    client.on("error", () => this.#liveness.lost());
    client.on("ready", () => this.#liveness.ready());
    this.#client = client;
    const timer = setInterval(() => this.#liveness.tick(), PROBE_DOWN_MS) as unknown as number;
    Deno.unrefTimer(timer);
    this.#timer = timer;
    client.connect().catch(() => {});
  }

  #changed(up: boolean, reason: string): void {
    if (this.#closed) return;
    this.#count.up = up ? 1 : 0;
    this.#options.log(
      up
        ? `portcullis: fleet store ${this.url} is up (${reason}): policies decide on it again`
        : `portcullis: warning: fleet store ${this.url} is down (${reason}): policies decide on ` +
          "this edge's own tables until it answers in time again",
    );
  }

  /** One PING within the ping deadline; settles when the store answered it, however late. */
  #ping(): Promise<unknown> {
    const client = this.#client;
    if (!client?.isReady) return Promise.resolve();
    const answer = client.ping();
    this.#timed(answer, this.#options.pingDeadline()).catch(() => {});
    return answer;
  }

  /** `promise` within `timeoutMs`, telling the liveness whether it was answered in time. */
  #timed<T>(promise: Promise<T>, timeoutMs: number): Promise<T> {
    return within(promise, timeoutMs).then((value) => {
      this.#liveness.answered();
      return value;
    }, (error) => {
      if (error instanceof StoreTimeout) this.#liveness.late(timeoutMs);
      throw error;
    });
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
    const client = this.#ready(true);
    const options = { keys: [key], arguments: [String(intervalUs), String(toleranceUs)] };
    this.#count.roundTrips++;
    const reply = client.evalSha(GCRA_SHA, options).catch((error: Error) => {
      if (!String(error?.message).startsWith("NOSCRIPT")) throw error;
      this.#count.roundTrips++;
      return client.eval(GCRA_SCRIPT, options);
    });
    return this.#timed(reply as Promise<GcraReply>, timeoutMs);
  }

  /** Sets `key` for `ttlMs` and publishes `message` on `channel`, in one round trip. */
  async block(
    key: string,
    ttlMs: number,
    channel: string,
    message: string,
    timeoutMs: number,
  ): Promise<void> {
    const client = this.#ready(true);
    this.#count.roundTrips++;
    const exec = client.multi().set(key, "1", { PX: ttlMs }).publish(channel, message).exec();
    await this.#timed(exec, timeoutMs);
  }

  /**
   * Every key matching `pattern` with its time to live (ms), a page at a time: for an edge to
   * learn the blocks made while it was away.
   */
  async *scan(pattern: string, timeoutMs: number): AsyncGenerator<[string, number]> {
    const client = this.#ready(false);
    let cursor = "0";
    do {
      this.#count.roundTrips++;
      const page = await this.#timed(
        client.scan(cursor, { MATCH: pattern, COUNT: 500 }),
        timeoutMs,
      );
      cursor = String(page.cursor);
      if (page.keys.length === 0) continue;
      this.#count.roundTrips++;
      const batch = client.multi();
      for (const key of page.keys) batch.pTTL(key);
      const ttls = await this.#timed(batch.execAsPipeline(), timeoutMs);
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

  /**
   * The client when ready — and, with `answering`, when the store answers in time — else throws at
   * once (the caller falls back). A catch-up scan asks only for a ready connection: it runs when
   * the subscription is back, which may be before the first ping was answered.
   */
  #ready(answering: boolean): Client {
    const client = this.#client;
    if (!client?.isReady || (answering && !this.up)) {
      throw new Error(`Store ${this.url} is not ready`);
    }
    return client;
  }

  /** Closes both connections; nothing is logged after. */
  close(): void {
    this.#closed = true;
    clearInterval(this.#timer);
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
