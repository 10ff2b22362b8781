/**
 * Clients blocked for a while: written by rate-limit exhaustion or repeated blocklist matches,
 * forgotten after their TTL. A client is its client key (`client_key.ts`): blocking one address
 * of a /64 blocks the whole /64 under the default rule, on this edge and through the store. The
 * block lives in the tenant's shared {@link ClientTable} (`max_entries` entries, least recently
 * seen evicted first), so every request worker refuses it; with a fleet store (`store.redis`) it
 * is also published, and every edge of the fleet writes it into its own table as the store
 * relays it. The TTL block check runs first of all: one table lookup refuses a client already
 * judged, before anything else is spent on it.
 *
 * @module
 */
import { ClientKeys } from "./client_key.ts";
import type { ClientTable } from "./client_table.ts";
import {
  type ActivePolicy,
  type BlockAction,
  blockReply,
  type PolicyCheck,
  type PolicyMode,
  type PolicyRequest,
  type Refusal,
} from "./policy_check.ts";
import type { PolicyContext, RemoteBlocks } from "./policy_context.ts";

/** A tenant's blocked clients, by client key, in its shared table. */
export class TtlBlocklist {
  /**
   * The rule its keys follow: whoever writes a block (the rate limit, the blocklist) or counts
   * towards one keys the client by it, so a count and its block cover the same network.
   */
  readonly keys: ClientKeys;
  readonly #table: ClientTable;
  readonly #ttlMs: number;
  readonly #key: (client: string) => bigint;
  readonly #remote: RemoteBlocks | undefined;

  /**
   * @param options the table, block time, how a client key becomes its table key, the fleet
   *   store, and the client-key rule (default: IPv4 /32, IPv6 /64)
   * @example
   * ```ts
   * import { ClientTable, keyOf } from "./client_table.ts";
   * import { TtlBlocklist } from "./ttl_block.ts";
   * const table = new ClientTable(ClientTable.allocate(16));
   * const list = new TtlBlocklist({ table, ttlMs: 1000, key: keyOf });
   * list.block(list.keys.of("2001:db8::7"), 0);
   * list.blocked(list.keys.of("2001:db8::abcd"), 999); // true: the same /64
   * list.blocked(list.keys.of("2001:db8::7"), 1000); // false
   * ```
   */
  constructor(options: {
    table: ClientTable;
    ttlMs: number;
    key: (client: string) => bigint;
    remote?: RemoteBlocks;
    keys?: ClientKeys;
  }) {
    this.keys = options.keys ?? new ClientKeys();
    this.#table = options.table;
    this.#ttlMs = options.ttlMs;
    this.#key = options.key;
    this.#remote = options.remote;
  }

  /** Clients forgotten to stay within the table, by every worker. */
  get evictions(): number {
    return this.#table.stats().evictions;
  }

  /** True while the client key `client` (from {@link keys}) is blocked at `nowMs`. */
  blocked(client: string, nowMs: number): boolean {
    return this.#table.blockedUntil(this.#key(client), nowMs) !== undefined;
  }

  /**
   * Blocks the client key `client` (from {@link keys}) from `nowMs` for the TTL, on every edge
   * when there is a fleet store.
   */
  block(client: string, nowMs: number): void {
    this.#table.block(this.#key(client), nowMs + this.#ttlMs, nowMs);
    this.#remote?.publish(client, this.#ttlMs);
  }
}

/** Counts matches per client key within a window; bounded, least recently counted evicted first. */
export class MatchCounter {
  readonly #counts = new Map<string, { count: number; since: number }>();
  readonly #windowMs: number;
  readonly #max: number;

  /** @param options the window and the most addresses kept */
  constructor(options: { windowMs: number; maxEntries: number }) {
    this.#windowMs = options.windowMs;
    this.#max = options.maxEntries;
  }

  /** Counts one match; returns the matches of `client` within the window, this one included. */
  count(client: string, nowMs: number): number {
    let entry = this.#counts.get(client);
    if (entry) this.#counts.delete(client);
    if (!entry || nowMs - entry.since >= this.#windowMs) entry = { count: 0, since: nowMs };
    entry.count++;
    if (this.#counts.size >= this.#max) this.#counts.delete(this.#counts.keys().next().value!);
    this.#counts.set(client, entry);
    return entry.count;
  }
}

/** The TTL block policy: refuses a client while it is on the list, with the policy's action. */
export class TtlBlockCheck implements PolicyCheck {
  readonly phase = "ttl_block";
  readonly mode: PolicyMode;
  /** Also written by the rate limit and the blocklist (their `block_after`). */
  readonly list: TtlBlocklist;
  /** The table's name in the edge's {@link PolicyContext.tables}. */
  readonly tableName: string;
  readonly action: BlockAction;

  /**
   * @param policy the resolved `ttl_block` section
   * @param context the tenant, the edge's tables and its fleet stores
   */
  constructor(policy: ActivePolicy<"ttl_block">, context: PolicyContext) {
    this.mode = policy.mode;
    const { name, table } = context.tables.table("ttl", context.scope, policy.max_entries);
    const remote = policy.store ? context.fleet?.blocks(policy, context, table) : undefined;
    this.tableName = name;
    this.list = new TtlBlocklist({
      table,
      ttlMs: policy.ttl_ms,
      key: remote?.key ?? ((client) => context.tables.key(client)),
      remote,
      keys: context.clientKeys,
    });
    this.action = policy.action;
  }

  /** Refuses a blocked client (any address of its client key's network). */
  check(request: PolicyRequest): Refusal | undefined {
    const list = this.list;
    if (!list.blocked(list.keys.of(request.client()), request.now)) return undefined;
    const reply = blockReply(this.action, request.context.requestId);
    return { reply, reason: "address blocked" };
  }
}
