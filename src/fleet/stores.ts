/**
 * An edge's fleet stores as its policies use them ({@link FleetPolicies}): the per-client rate
 * limit decided on the store for every edge at once, and TTL blocks published to every edge.
 *
 * - **Keys** are salted hashes: `HMAC-SHA256(observe.salt_file, tenant ␊ client key)`, 16 bytes
 *   in base64url, under the policy's `key_prefix` — `r:` buckets, `b:` blocks, both after a tag of
 *   the tenant (the salted hash of its host), so no host or address is ever written to the store.
 *   The client key is the policies' (`client_key.ts`): the address's network in canonical text
 *   (`2001:db8:1:2::/64`; an IPv4 address by default bare, as before prefixes), so every edge
 *   with the same salt and the same `policies.client_key` names a client's network alike, and
 *   one /64 is one bucket and one block fleet-wide. The edge's own table key of a client is the
 *   hash's first 8 bytes: a block received by hash lands on the entry this edge's requests look
 *   up.
 * - **Decisions** are one script call each (`gcra_script.ts`). While the store is down — or when
 *   it is late past `timeout_ms`, or fails — the decision is made on the edge's own shared table
 *   instead, and counted as a fallback (`/v1/health`, `/metrics`). Every answer moves that table's
 *   entry to the fleet's arrival time, so a fallback goes on from the fleet's state: slowing or
 *   killing the store does not hand a client that spent its budget a fresh bucket on every edge.
 * - **The pre-check** (`precheck_share`) is a local bucket of that share of the rate and burst: a
 *   client it refuses costs no round trip, so a flood stays local.
 * - **Blocks** are set in the store with their TTL and published on `<key_prefix>blocks`; worker 0
 *   of every edge listens and writes each into the tenant's table, and when its subscription is
 *   (re)established it reads every block still in the store, so an edge that was away catches up.
 *
 * @module
 */
import { createHmac } from "node:crypto";
import type { ClientTable } from "../policy/client_table.ts";
import type { ActivePolicy } from "../policy/policy_check.ts";
import type {
  FleetPolicies,
  PolicyContext,
  RemoteAnswer,
  RemoteBlocks,
  RemoteRate,
} from "../policy/policy_context.ts";
import { ClientRateLimiter, type RateDecision } from "../policy/rate_limit.ts";
import type { GcraRate } from "../policy/client_table.ts";
import { RedisLink, StoreTimeout } from "./redis_link.ts";
import { type StoreCount, StoreCounters } from "./store_counters.ts";

/** What a started fleet needs from the edge. */
export interface FleetStart {
  readonly log: (line: string) => void;
  readonly clock: () => number;
  /** Listen for blocks (worker 0 only: the tables are shared by every worker). */
  readonly listen: boolean;
}

/** A tenant's block table, found by the store, prefix and tenant tag a block message names. */
interface BlockTarget {
  readonly table: ClientTable;
  readonly count: StoreCount;
}

/**
 * The fleet stores of one isolate of an edge.
 *
 * @internal
 */
export class FleetStores implements FleetPolicies {
  readonly counters: StoreCounters = new StoreCounters();
  readonly #urls: readonly string[];
  readonly #links = new Map<string, RedisLink>();
  /** `url prefix tag` → the table blocks for that tenant go to. */
  readonly #targets = new Map<string, BlockTarget>();
  /** `url prefix` pairs listened to (or to listen to once started). */
  readonly #channels = new Set<string>();
  readonly #tags = new Map<string, string>();
  /** Per store, the longest `timeout_ms` a policy gives it: a ping's deadline. */
  readonly #deadlines = new Map<string, number>();
  /** `scope ␊ client key` → its salted hash (an HMAC is ~15 µs here; a lookup, well under one). */
  readonly #digests = new Map<string, Buffer>();
  readonly #salt: Uint8Array;
  #start?: FleetStart;

  /**
   * @param urls the stores the edge config lists (`policy_stores`)
   * @param salt the tenant salt (`observe.salt_file`), the same on every edge of the fleet
   */
  constructor(urls: readonly string[], salt: Uint8Array) {
    this.#urls = urls;
    this.#salt = salt;
  }

  /** The stores this edge may use. */
  get urls(): readonly string[] {
    return this.#urls;
  }

  /** Connects every store (in the background) and, on worker 0, listens for blocks. */
  async start(start: FleetStart): Promise<void> {
    this.#start = start;
    for (const url of this.#urls) {
      const link = new RedisLink(url, this.counters.of(url), {
        log: start.log,
        pingDeadline: () => this.#deadlines.get(url) ?? PING_DEADLINE_MS,
      });
      this.#links.set(url, link);
      await link.open();
    }
    for (const channel of this.#channels) await this.#listen(channel);
  }

  /** Closes every connection. */
  close(): void {
    for (const link of this.#links.values()) link.close();
  }

  rate(policy: ActivePolicy<"rate_limit">, context: PolicyContext): RemoteRate | undefined {
    const store = policy.store?.redis;
    if (!store || !this.#urls.includes(store.url)) return undefined;
    this.#expect(store.url, store.timeout_ms);
    const share = store.precheck_share;
    const preTable = share === undefined
      ? undefined
      : context.tables.table("pre", context.scope, policy.max_clients);
    const pre = preTable && new ClientRateLimiter({
      perSecond: policy.per_second * share!,
      burst: Math.max(1, Math.round(policy.burst * share!)),
      table: preTable.table,
      key: (client) => this.localKey(context.scope, client),
    });
    return new StoreRate({
      fleet: this,
      scope: context.scope,
      url: store.url,
      prefix: `${store.key_prefix}r:${this.tag(context.scope)}:`,
      timeoutMs: store.timeout_ms,
      pre,
      tables: preTable ? [preTable.name] : [],
    });
  }

  blocks(
    policy: ActivePolicy<"ttl_block">,
    context: PolicyContext,
    table: ClientTable,
  ): RemoteBlocks | undefined {
    const store = policy.store?.redis;
    if (!store || !this.#urls.includes(store.url)) return undefined;
    this.#expect(store.url, store.timeout_ms);
    const tag = this.tag(context.scope);
    const count = this.counters.of(store.url);
    this.#targets.set(`${store.url} ${store.key_prefix} ${tag}`, { table, count });
    const channel = `${store.url} ${store.key_prefix}`;
    if (!this.#channels.has(channel)) {
      this.#channels.add(channel);
      if (this.#start) void this.#listen(channel);
    }
    return {
      key: (client) => this.localKey(context.scope, client),
      publish: (client, ttlMs) => {
        const digest = this.digest(context.scope, client);
        const link = this.#links.get(store.url);
        const message = `${tag}:${digest} ${ttlMs}`;
        const key = `${store.key_prefix}b:${tag}:${digest}`;
        try {
          link!.block(key, ttlMs, `${store.key_prefix}blocks`, message, store.timeout_ms).then(
            () => count.blocksPublished++,
            () => count.fallbacks++,
          );
        } catch {
          count.fallbacks++;
          count.down++;
        }
      },
    };
  }

  /** Remembers that a policy waits `timeoutMs` for `url`: pings wait as long as the longest. */
  #expect(url: string, timeoutMs: number): void {
    this.#deadlines.set(url, Math.max(this.#deadlines.get(url) ?? 0, timeoutMs));
  }

  /** The link to `url` (after {@link start}). */
  link(url: string): RedisLink | undefined {
    return this.#links.get(url);
  }

  /** The salted hash naming client key `client` of `scope` in the store (16 bytes, base64url). */
  digest(scope: string, client: string): string {
    return this.#clientHash(scope, client).subarray(0, 16).toString("base64url");
  }

  /**
   * The HMAC of `scope ␊ client`, remembered: up to {@link DIGEST_CACHE} of them, all forgotten at
   * once when full (a flood of fresh addresses pays the HMAC, as it would without the cache).
   */
  #clientHash(scope: string, client: string): Buffer {
    const text = `${scope}\n${client}`;
    let hash = this.#digests.get(text);
    if (!hash) {
      if (this.#digests.size >= DIGEST_CACHE) this.#digests.clear();
      this.#digests.set(text, hash = this.#hmac(text));
    }
    return hash;
  }

  /** The salted tag of a tenant in store keys and block messages (8 bytes, base64url). */
  tag(scope: string): string {
    let tag = this.#tags.get(scope);
    if (tag === undefined) {
      tag = this.#hmac(`tenant\n${scope}`).subarray(0, 8).toString("base64url");
      this.#tags.set(scope, tag);
    }
    return tag;
  }

  /** This edge's table key of client key `client` of `scope`: its store hash's first 8 bytes. */
  localKey(scope: string, client: string): bigint {
    return keyOfDigest(this.#clientHash(scope, client));
  }

  #hmac(text: string) {
    return createHmac("sha256", this.#salt).update(text).digest();
  }

  /** Subscribes to a store's block channel; each (re)subscription catches up from the store. */
  async #listen(channel: string): Promise<void> {
    const start = this.#start!;
    if (!start.listen) return;
    const [url, prefix] = channel.split(" ");
    const link = this.#links.get(url);
    if (!link) return;
    await link.subscribe(`${prefix}blocks`, {
      onMessage: (message) => {
        const [name, ttl] = message.split(" ");
        this.#received(url, prefix, name, Number(ttl));
      },
      onReady: () => void this.#catchUp(link, prefix),
    });
  }

  /** Reads every block still in the store under `prefix` (after a gap in the subscription). */
  async #catchUp(link: RedisLink, prefix: string): Promise<void> {
    try {
      for await (const [key, ttl] of link.scan(`${prefix}b:*`, 2000)) {
        this.#received(link.url, prefix, key.slice(prefix.length + 2), ttl);
      }
    } catch (error) {
      this.#start?.log(
        `portcullis: warning: fleet store ${link.url}: cannot read its blocks (${
          (error as Error).message
        }); blocks published from now on still arrive`,
      );
    }
  }

  /** Writes a block named `tag:digest` for `ttlMs` into its tenant's table, if this edge has it. */
  #received(url: string, prefix: string, name: string, ttlMs: number): void {
    const cut = name.indexOf(":");
    const target = this.#targets.get(`${url} ${prefix} ${name.slice(0, cut)}`);
    const digest = Buffer.from(name.slice(cut + 1), "base64url");
    if (!target || digest.length !== 16 || !(ttlMs > 0)) return;
    const now = this.#start!.clock();
    target.table.block(keyOfDigest(digest), now + ttlMs, now);
    target.count.blocksReceived++;
  }
}

/** A ping's deadline for a store no policy names yet (ms). */
const PING_DEADLINE_MS = 1000;

/** Client hashes remembered per isolate (48 bytes of text and hash each, about 6 MB when full). */
const DIGEST_CACHE = 65_536;

/** A table key from a store hash: its first 8 bytes. */
function keyOfDigest(digest: Uint8Array): bigint {
  return new DataView(digest.buffer, digest.byteOffset, 8).getBigUint64(0);
}

/** One tenant's rate limit on one store. */
class StoreRate implements RemoteRate {
  readonly key: (client: string) => bigint;
  readonly tables: readonly string[];
  readonly #fleet: FleetStores;
  readonly #scope: string;
  readonly #url: string;
  readonly #prefix: string;
  readonly #timeoutMs: number;
  readonly #pre: ClientRateLimiter | undefined;

  constructor(options: {
    fleet: FleetStores;
    scope: string;
    url: string;
    prefix: string;
    timeoutMs: number;
    pre: ClientRateLimiter | undefined;
    tables: readonly string[];
  }) {
    this.tables = options.tables;
    this.#fleet = options.fleet;
    this.#scope = options.scope;
    this.#url = options.url;
    this.#prefix = options.prefix;
    this.#timeoutMs = options.timeoutMs;
    this.#pre = options.pre;
    this.key = (client) => this.#fleet.localKey(this.#scope, client);
  }

  precheck(client: string, nowMs: number): RateDecision | undefined {
    const decision = this.#pre?.take(client, nowMs);
    if (!decision || decision.allowed) return undefined;
    this.#fleet.counters.of(this.#url).prechecked++;
    return decision;
  }

  take(
    client: string,
    rate: GcraRate,
    local: { table: ClientTable; nowMs: number },
  ): Promise<RemoteAnswer | undefined> | undefined {
    const count = this.#fleet.counters.of(this.#url);
    const link = this.#fleet.link(this.#url);
    let reply;
    try {
      if (!link?.up) throw new Error("down");
      reply = link.gcra(
        this.#prefix + this.#digest(client),
        Math.max(1, Math.round(rate.intervalMs * 1000)),
        Math.round(rate.toleranceMs * 1000),
        this.#timeoutMs,
      );
    } catch {
      count.fallbacks++;
      count.down++;
      return undefined;
    }
    return reply.then(
      ([allowed, aheadUs, denials]) => {
        count.decisions++;
        // The fleet's arrival time, kept: a fallback goes on from here, not from a fresh bucket.
        local.table.advance(this.key(client), local.nowMs + aheadUs / 1000, local.nowMs);
        return { allowed: allowed === 1, aheadMs: aheadUs / 1000, denials };
      },
      (error) => {
        count.fallbacks++;
        if (error instanceof StoreTimeout) count.timeouts++;
        return undefined;
      },
    );
  }

  /** The store hash of `client`. */
  #digest(client: string): string {
    return this.#fleet.digest(this.#scope, client);
  }
}
