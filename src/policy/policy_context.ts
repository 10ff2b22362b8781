/**
 * What compiling a tenant's policies needs beyond its config: which tenant it is (the scope of its
 * tables and store keys), the edge's shared tables, how a client address becomes its client key,
 * and — on an edge with fleet stores — the link to them. Kept apart from the checks so a policy
 * module names the contract, not the store.
 *
 * Every `client` below is a client key (`client_key.ts`: the address's network, e.g.
 * `2001:db8:1:2::/64`), never a raw address: the edge's tables and the store count the same thing.
 *
 * @module
 */
import type { ClientKeys } from "./client_key.ts";
import type { ClientTable, GcraRate } from "./client_table.ts";
import type { ActivePolicy } from "./policy_check.ts";
import type { PolicyTables } from "./policy_tables.ts";
import type { RateDecision } from "./rate_limit.ts";

/** The scope of the globals' policies (requests for unknown hosts). */
export const GLOBAL_SCOPE = "*";

/** Where a tenant's policies are compiled. */
export interface PolicyContext {
  /** The tenant's host, or {@link GLOBAL_SCOPE}. */
  readonly scope: string;
  readonly tables: PolicyTables;
  /**
   * How the tenant's client addresses become client keys (`policies.client_key`); the default
   * rule (IPv4 /32, IPv6 /64) when absent. `compilePolicies` sets it for every check of a tenant.
   */
  readonly clientKeys?: ClientKeys;
  /** The edge's fleet stores; absent where none is configured (and on the hub). */
  readonly fleet?: FleetPolicies;
}

/** An edge's fleet stores, as policies use them. */
export interface FleetPolicies {
  /** The rate limit of the context's tenant on the store its policy names. */
  rate(policy: ActivePolicy<"rate_limit">, context: PolicyContext): RemoteRate | undefined;
  /**
   * The TTL blocklist of the context's tenant on the store its policy names; blocks other edges
   * publish are written into `table`.
   */
  blocks(
    policy: ActivePolicy<"ttl_block">,
    context: PolicyContext,
    table: ClientTable,
  ): RemoteBlocks | undefined;
}

/** The store's GCRA outcome. */
export interface RemoteAnswer {
  readonly allowed: boolean;
  /** How far the arrival time is ahead of the store's now (ms): after an admission, or as it is. */
  readonly aheadMs: number;
  /** Denials in a row, fleet-wide. */
  readonly denials: number;
}

/** One tenant's rate limit on a fleet store. */
export interface RemoteRate {
  /** The names of the shared tables it uses besides the limiter's own (the pre-check's). */
  readonly tables: readonly string[];
  /** The table key of a client key: derived from its store key, so blocks can be shared by key. */
  readonly key: (client: string) => bigint;
  /** The local pre-check's refusal, when it has one (no store round trip then). */
  precheck(client: string, nowMs: number): RateDecision | undefined;
  /**
   * The store's decision; undefined at once while the store is known to be down, and a promise of
   * undefined when it fails or is late: either way the caller decides on its own table (which each
   * answer moved forward to the fleet's arrival time, so it goes on from there).
   */
  take(
    client: string,
    rate: GcraRate,
    local: { table: ClientTable; nowMs: number },
  ): Promise<RemoteAnswer | undefined> | undefined;
}

/** One tenant's TTL blocklist on a fleet store. */
export interface RemoteBlocks {
  /** The table key of a client key, as every edge derives it. */
  readonly key: (client: string) => bigint;
  /** Tells the store, and through it every edge, that `client` is blocked for `ttlMs`. */
  publish(client: string, ttlMs: number): void;
}
