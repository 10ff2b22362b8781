/**
 * Addresses blocked for a while: written by rate-limit exhaustion or repeated blocklist matches,
 * forgotten after their TTL; bounded, least recently blocked evicted first. The TTL block check
 * runs first of all: one map lookup refuses a client already judged, before anything else is spent
 * on it.
 *
 * @module
 */
import {
  type ActivePolicy,
  type BlockAction,
  blockReply,
  type PolicyCheck,
  type PolicyMode,
  type PolicyRequest,
  type Refusal,
} from "./policy_check.ts";

/** A bounded map of addresses to the time their block ends. */
export class TtlBlocklist {
  readonly #until = new Map<string, number>();
  readonly #ttlMs: number;
  readonly #max: number;
  /** Addresses forgotten to stay within the bound. */
  evictions = 0;

  /** @param options block time and the most addresses kept */
  constructor(options: { ttlMs: number; maxEntries: number }) {
    this.#ttlMs = options.ttlMs;
    this.#max = options.maxEntries;
  }

  /** Addresses blocked now or recently. */
  get size(): number {
    return this.#until.size;
  }

  /** True while `address` is blocked at `nowMs`. */
  blocked(address: string, nowMs: number): boolean {
    const until = this.#until.get(address);
    if (until === undefined) return false;
    if (nowMs < until) return true;
    this.#until.delete(address);
    return false;
  }

  /** Blocks `address` from `nowMs` for the TTL. */
  block(address: string, nowMs: number): void {
    this.#until.delete(address);
    if (this.#until.size >= this.#max) {
      this.#until.delete(this.#until.keys().next().value!);
      this.evictions++;
    }
    this.#until.set(address, nowMs + this.#ttlMs);
  }
}

/** Counts matches per address within a window; bounded like the blocklist. */
export class MatchCounter {
  readonly #counts = new Map<string, { count: number; since: number }>();
  readonly #windowMs: number;
  readonly #max: number;

  /** @param options the window and the most addresses kept */
  constructor(options: { windowMs: number; maxEntries: number }) {
    this.#windowMs = options.windowMs;
    this.#max = options.maxEntries;
  }

  /** Counts one match; returns the matches of `address` within the window, this one included. */
  count(address: string, nowMs: number): number {
    let entry = this.#counts.get(address);
    if (entry) this.#counts.delete(address);
    if (!entry || nowMs - entry.since >= this.#windowMs) entry = { count: 0, since: nowMs };
    entry.count++;
    if (this.#counts.size >= this.#max) this.#counts.delete(this.#counts.keys().next().value!);
    this.#counts.set(address, entry);
    return entry.count;
  }
}

/** The TTL block policy: refuses a client while it is on the list, with the policy's action. */
export class TtlBlockCheck implements PolicyCheck {
  readonly phase = "ttl_block";
  readonly mode: PolicyMode;
  /** Also written by the rate limit and the blocklist (their `block_after`). */
  readonly list: TtlBlocklist;
  readonly action: BlockAction;

  /** @param policy the resolved `ttl_block` section */
  constructor(policy: ActivePolicy<"ttl_block">) {
    this.mode = policy.mode;
    this.list = new TtlBlocklist({ ttlMs: policy.ttl_ms, maxEntries: policy.max_entries });
    this.action = policy.action;
  }

  /** Refuses a blocked client. */
  check(request: PolicyRequest): Refusal | undefined {
    if (!this.list.blocked(request.client(), request.now)) return undefined;
    const reply = blockReply(this.action, request.context.requestId);
    return { reply, reason: "address blocked" };
  }
}
