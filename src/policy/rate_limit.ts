/**
 * The per-client rate limit: a token bucket per (tenant, client key) — the effective client
 * address's network (`client_key.ts`: IPv6 /64, IPv4 /32 by default), so a client rotating
 * through the addresses of its /64 spends from one bucket. Each bucket is kept as one number —
 * the theoretical arrival time of its next conforming request (GCRA) — in the tenant's shared
 * {@link ClientTable} (`max_clients` entries, least recently seen evicted first and counted), so
 * every request worker of the edge spends from one bucket. With a fleet store (`store.redis`) the
 * decision is the store's, made atomically on the server for every edge at once
 * (`fleet_store.ts`), and the table is the fallback while the store is slow or down; an optional
 * pre-check refuses a flooding client locally before it costs a round trip.
 *
 * A denial carries `Retry-After` (RFC 9110 §10.2.3). With `headers: true` every reply — denied or
 * not — also carries the limit's state in the IETF `RateLimit-*` fields
 * (draft-ietf-httpapi-ratelimit-headers) and the older `X-RateLimit-*` spelling, whose reset is an
 * epoch second, less any the security headers remove. They are off by default: the pair, with its
 * epoch reset, marks the software, and with a fleet store `remaining` is an oracle that links the
 * edges sharing it (spend at one address, read at another). In dry run no header changes.
 *
 * @module
 */
import { failureReply } from "../request/errors.ts";
import { ClientKeys } from "./client_key.ts";
import type { ClientTable, GcraRate } from "./client_table.ts";
import type {
  ActivePolicy,
  PolicyCheck,
  PolicyMode,
  PolicyRequest,
  PolicyTrail,
  Refusal,
} from "./policy_check.ts";
import type { PolicyContext, RemoteAnswer, RemoteRate } from "./policy_context.ts";
import type { TtlBlocklist } from "./ttl_block.ts";

/** What the limit decided, and the numbers the rate headers carry. */
export interface RateDecision {
  allowed: boolean;
  /** The bucket size (RateLimit-Limit). */
  limit: number;
  /** Requests left right now (RateLimit-Remaining). */
  remaining: number;
  /** Seconds until the bucket is full again (RateLimit-Reset). */
  resetS: number;
  /** Whole seconds, at least 1, until a denied client may retry (Retry-After). */
  retryAfterS: number;
  /** Denials in a row for this client (for the TTL blocklist). */
  denialsInARow: number;
}

/** A rate as GCRA runs it: `burst` requests back to back, then one every `1000 / perSecond` ms. */
export function gcraRate(perSecond: number, burst: number): GcraRate {
  const intervalMs = 1000 / perSecond;
  return { intervalMs, toleranceMs: intervalMs * burst };
}

/**
 * The headers' numbers from a GCRA outcome.
 *
 * @param allowed whether the request conformed
 * @param aheadMs how far the arrival time is ahead of now: after the admission when allowed, as it
 *   stands when denied
 * @param rate the bucket's rate
 * @param denials denials in a row for this client
 */
export function rateDecision(
  allowed: boolean,
  aheadMs: number,
  rate: GcraRate,
  denials: number,
): RateDecision {
  const limit = Math.round(rate.toleranceMs / rate.intervalMs);
  const ahead = Math.max(0, aheadMs);
  if (!allowed) {
    return {
      allowed,
      limit,
      remaining: 0,
      retryAfterS: Math.max(1, Math.ceil((ahead + rate.intervalMs - rate.toleranceMs) / 1000)),
      resetS: Math.max(1, Math.ceil(ahead / 1000)),
      denialsInARow: denials,
    };
  }
  return {
    allowed,
    limit,
    // The epsilon absorbs the table's whole-microsecond interval (1000 / 3 ms is 333.333 ms there).
    remaining: Math.max(0, Math.floor((rate.toleranceMs - ahead) / rate.intervalMs + 1e-6)),
    retryAfterS: 0,
    resetS: Math.ceil(ahead / 1000),
    denialsInARow: 0,
  };
}

/** One tenant's buckets in a shared table (the rate limit without a fleet store), by client key. */
export class ClientRateLimiter {
  readonly rate: GcraRate;
  /** The shared table the buckets are in. */
  readonly table: ClientTable;
  readonly #key: (client: string) => bigint;

  /**
   * @param options tokens per second, bucket size, the table and how a client key becomes its
   *   table key
   */
  constructor(options: {
    perSecond: number;
    burst: number;
    table: ClientTable;
    key: (client: string) => bigint;
  }) {
    this.rate = gcraRate(options.perSecond, options.burst);
    this.table = options.table;
    this.#key = options.key;
  }

  /** Clients forgotten to stay within the table, by every worker. */
  get evictions(): number {
    return this.table.stats().evictions;
  }

  /**
   * Spends one token for `client` at `nowMs`.
   *
   * @example
   * ```ts
   * import { ClientTable, keyOf } from "./client_table.ts";
   * import { ClientRateLimiter } from "./rate_limit.ts";
   * const table = new ClientTable(ClientTable.allocate(16));
   * const limiter = new ClientRateLimiter({ perSecond: 1, burst: 2, table, key: keyOf });
   * limiter.take("a", 0).allowed; // true
   * limiter.take("a", 0).allowed; // true
   * limiter.take("a", 0).retryAfterS; // 1
   * ```
   */
  take(client: string, nowMs: number): RateDecision {
    const taken = this.table.take(this.#key(client), nowMs, this.rate);
    return rateDecision(taken.allowed, taken.aheadMs, this.rate, taken.denialsInARow);
  }
}

/** The rate-limit policy: its limiter, and the TTL list a client goes on after `block_after`. */
export class RateLimitCheck implements PolicyCheck {
  readonly phase = "rate_limit";
  readonly mode: PolicyMode;
  /** The edge's own buckets: the limit without a store, the fallback with one. */
  readonly limiter: ClientRateLimiter;
  /** The names of its tables in the edge's {@link PolicyContext.tables}. */
  readonly tableNames: readonly string[];
  /** Denials in a row after which the client goes on the TTL list (0: never). */
  readonly blockAfter: number;
  /** How a client address becomes the key its bucket (and any block it earns) is kept under. */
  readonly keys: ClientKeys;
  readonly #ttl: TtlBlocklist | undefined;
  readonly #remote: RemoteRate | undefined;
  /** The rate header names replies carry (empty: none). */
  readonly #headers: ReadonlySet<string>;

  /**
   * @param policy the resolved `rate_limit` section
   * @param context the tenant, the edge's tables and its fleet stores
   * @param links the TTL block policy's list, when that policy is on or in dry run, and the rate
   *   header names replies carry
   */
  constructor(
    policy: ActivePolicy<"rate_limit">,
    context: PolicyContext,
    links: { readonly ttl?: TtlBlocklist; readonly rateHeaders: ReadonlySet<string> },
  ) {
    this.#headers = links.rateHeaders;
    this.mode = policy.mode;
    const { name, table } = context.tables.table("rate", context.scope, policy.max_clients);
    this.#remote = policy.store && context.fleet?.rate(policy, context);
    this.tableNames = [name, ...this.#remote?.tables ?? []];
    this.limiter = new ClientRateLimiter({
      perSecond: policy.per_second,
      burst: policy.burst,
      table,
      key: this.#remote?.key ?? ((client) => context.tables.key(client)),
    });
    this.blockAfter = policy.block_after;
    this.keys = context.clientKeys ?? new ClientKeys();
    this.#ttl = links.ttl;
  }

  /**
   * Spends the client's token — on the fleet store when there is one and it answers within its
   * timeout, else in the edge's table; when on, sets the rate headers and escalates a long denial
   * run.
   */
  check(
    request: PolicyRequest,
    trail: PolicyTrail,
  ): Refusal | undefined | Promise<Refusal | undefined> {
    const remote = this.#remote;
    const client = this.keys.of(request.client());
    if (!remote) return this.#conclude(request, trail, this.#local(client, request));
    const refused = remote.precheck(client, request.now);
    if (refused) return this.#conclude(request, trail, refused);
    const local = { table: this.limiter.table, nowMs: request.now };
    const pending = remote.take(client, this.limiter.rate, local);
    if (!pending) return this.#conclude(request, trail, this.#local(client, request));
    return pending.then((answer) =>
      this.#conclude(
        request,
        trail,
        answer ? this.#fromStore(answer) : this.#local(client, request),
      )
    );
  }

  /** The decision of the edge's own table for the client key `client`. */
  #local(client: string, request: PolicyRequest): RateDecision {
    return this.limiter.take(client, request.now);
  }

  #fromStore(answer: RemoteAnswer): RateDecision {
    return rateDecision(answer.allowed, answer.aheadMs, this.limiter.rate, answer.denials);
  }

  #conclude(
    request: PolicyRequest,
    trail: PolicyTrail,
    decision: RateDecision,
  ): Refusal | undefined {
    if (this.mode === "on" && this.#headers.size > 0) {
      pushRateHeaders(trail.headers, decision, this.#headers);
    }
    if (decision.allowed) return undefined;
    if (
      this.blockAfter > 0 && this.#ttl && this.mode === "on" &&
      decision.denialsInARow >= this.blockAfter
    ) {
      this.#ttl.block(this.#ttl.keys.of(request.client()), request.now);
    }
    const headers = { "retry-after": String(decision.retryAfterS) };
    return {
      reply: failureReply("rate_limited", request.context.requestId, { headers }),
      reason: `${decision.denialsInARow} denied in a row`,
    };
  }
}

/**
 * Adds the rate headers `names` holds, in both spellings; the `X-` reset is an epoch second (wall
 * clock).
 */
function pushRateHeaders(
  headers: string[],
  decision: RateDecision,
  names: ReadonlySet<string>,
): void {
  const resetS = decision.resetS;
  const fields: [string, string][] = [
    ["ratelimit-limit", String(decision.limit)],
    ["ratelimit-remaining", String(decision.remaining)],
    ["ratelimit-reset", String(resetS)],
    ["x-ratelimit-limit", String(decision.limit)],
    ["x-ratelimit-remaining", String(decision.remaining)],
    ["x-ratelimit-reset", String(Math.ceil(Date.now() / 1000) + resetS)],
  ];
  for (const [name, value] of fields) if (names.has(name)) headers.push(name, value);
}
