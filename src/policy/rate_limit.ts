/**
 * The per-client rate limit: a token bucket per (tenant, effective client address), kept as one
 * number per client — the theoretical arrival time of its next conforming request (GCRA) — in a
 * map bounded by `max_clients`, least recently seen evicted first (and counted). Each tenant (and
 * the globals, for unknown hosts) has its own limiter, keyed by client; it runs right after the
 * caps, so a flood from one client is refused before the blocklist and the WAF spend anything on
 * it.
 *
 * While on, every reply carries the limit's state — denied or not — in the IETF `RateLimit-*`
 * fields (draft-ietf-httpapi-ratelimit-headers) and the older `X-RateLimit-*` spelling, whose
 * reset is an epoch second; a denial adds `Retry-After` (RFC 9110 §10.2.3). In dry run no header
 * changes.
 *
 * @module
 */
import { failureReply } from "../request/errors.ts";
import type {
  ActivePolicy,
  PolicyCheck,
  PolicyMode,
  PolicyRequest,
  PolicyTrail,
  Refusal,
} from "./policy_check.ts";
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

interface ClientState {
  arrival: number;
  denials: number;
}

/** The rate limit of one tenant (or of unknown hosts). */
export class ClientRateLimiter {
  readonly #intervalMs: number;
  readonly #toleranceMs: number;
  readonly #burst: number;
  readonly #maxClients: number;
  readonly #clients = new Map<string, ClientState>();
  readonly #decision: RateDecision = {
    allowed: true,
    limit: 0,
    remaining: 0,
    resetS: 0,
    retryAfterS: 0,
    denialsInARow: 0,
  };
  /** Clients forgotten to stay within `max_clients`. */
  evictions = 0;

  /**
   * @param options tokens per second, bucket size, clients remembered at most
   */
  constructor(options: { perSecond: number; burst: number; maxClients: number }) {
    this.#intervalMs = 1000 / options.perSecond;
    this.#burst = options.burst;
    this.#toleranceMs = this.#intervalMs * options.burst;
    this.#maxClients = options.maxClients;
  }

  /** Clients remembered now. */
  get size(): number {
    return this.#clients.size;
  }

  /**
   * Spends one token for `client` at `nowMs`.
   *
   * @returns the decision (a reused object: read it before the next call)
   * @example
   * ```ts
   * import { ClientRateLimiter } from "./rate_limit.ts";
   * const limiter = new ClientRateLimiter({ perSecond: 1, burst: 2, maxClients: 10 });
   * limiter.take("a", 0).allowed; // true
   * limiter.take("a", 0).allowed; // true
   * limiter.take("a", 0).retryAfterS; // 1
   * ```
   */
  take(client: string, nowMs: number): RateDecision {
    let state = this.#clients.get(client);
    if (state) {
      this.#clients.delete(client); // re-insert: the map's order is least recently seen first
    } else {
      state = { arrival: nowMs, denials: 0 };
      if (this.#clients.size >= this.#maxClients) {
        this.#clients.delete(this.#clients.keys().next().value!);
        this.evictions++;
      }
    }
    this.#clients.set(client, state);
    const base = state.arrival > nowMs ? state.arrival : nowMs;
    const next = base + this.#intervalMs;
    const decision = this.#decision;
    decision.limit = this.#burst;
    if (next - nowMs > this.#toleranceMs + 1e-9) {
      state.denials++;
      decision.allowed = false;
      decision.remaining = 0;
      decision.retryAfterS = Math.max(1, Math.ceil((next - this.#toleranceMs - nowMs) / 1000));
      decision.resetS = Math.max(1, Math.ceil((base - nowMs) / 1000));
    } else {
      state.arrival = next;
      state.denials = 0;
      decision.allowed = true;
      decision.remaining = Math.max(
        0,
        Math.floor((this.#toleranceMs - (next - nowMs)) / this.#intervalMs),
      );
      decision.retryAfterS = 0;
      decision.resetS = Math.max(0, Math.ceil((next - nowMs) / 1000));
    }
    decision.denialsInARow = state.denials;
    return decision;
  }
}

/** The rate-limit policy: its limiter, and the TTL list a client goes on after `block_after`. */
export class RateLimitCheck implements PolicyCheck {
  readonly phase = "rate_limit";
  readonly mode: PolicyMode;
  readonly limiter: ClientRateLimiter;
  /** Denials in a row after which the client goes on the TTL list (0: never). */
  readonly blockAfter: number;
  readonly #ttl: TtlBlocklist | undefined;

  /**
   * @param policy the resolved `rate_limit` section
   * @param ttl the TTL block policy's list, when that policy is on or in dry run
   */
  constructor(policy: ActivePolicy<"rate_limit">, ttl: TtlBlocklist | undefined) {
    this.mode = policy.mode;
    this.limiter = new ClientRateLimiter({
      perSecond: policy.per_second,
      burst: policy.burst,
      maxClients: policy.max_clients,
    });
    this.blockAfter = policy.block_after;
    this.#ttl = ttl;
  }

  /** Spends the client's token; when on, sets the rate headers and escalates a long denial run. */
  check(request: PolicyRequest, trail: PolicyTrail): Refusal | undefined {
    const decision = this.limiter.take(request.client(), request.now);
    if (this.mode === "on") pushRateHeaders(trail.headers, decision);
    if (decision.allowed) return undefined;
    if (
      this.blockAfter > 0 && this.#ttl && this.mode === "on" &&
      decision.denialsInARow >= this.blockAfter
    ) {
      this.#ttl.block(request.client(), request.now);
    }
    const headers = { "retry-after": String(decision.retryAfterS) };
    return {
      reply: failureReply("rate_limited", request.context.requestId, { headers }),
      reason: `${decision.denialsInARow} denied in a row`,
    };
  }
}

/** Adds both spellings of the rate headers; the `X-` reset is an epoch second (wall clock). */
function pushRateHeaders(headers: string[], decision: RateDecision): void {
  const resetS = decision.resetS;
  headers.push(
    "ratelimit-limit",
    String(decision.limit),
    "ratelimit-remaining",
    String(decision.remaining),
    "ratelimit-reset",
    String(resetS),
    "x-ratelimit-limit",
    String(decision.limit),
    "x-ratelimit-remaining",
    String(decision.remaining),
    "x-ratelimit-reset",
    String(Math.ceil(Date.now() / 1000) + resetS),
  );
}
