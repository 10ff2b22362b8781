/**
 * The blocklist policy: named rules on the path and on one header, compiled once at load; the
 * first rule that matches decides the action. It runs after the rate limit (a client flooding
 * matching paths spends its budget first) and before the WAF (a known probe is refused without
 * decoding it). A client that matches `block_after` times within the window goes on the TTL list
 * too, so its next request is refused by one map lookup whatever it asks for. Matches are counted
 * by the TTL list's client key (`client_key.ts`), the one the block is written under: the
 * addresses of one /64 count together, as they are then blocked together.
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
import { MatchCounter, type TtlBlocklist } from "./ttl_block.ts";

/** One blocklist rule. */
export interface BlockRule {
  readonly name: string;
  readonly path?: RegExp;
  readonly header?: { readonly name: string; readonly pattern: RegExp };
  readonly action: BlockAction;
}

/** The blocklist policy: its rules, its match counts, and the TTL list it escalates into. */
export class BlocklistCheck implements PolicyCheck {
  readonly phase = "blocklist";
  readonly mode: PolicyMode;
  readonly rules: readonly BlockRule[];
  /** Matches within the window after which the client goes on the TTL list (0: never). */
  readonly blockAfter: number;
  readonly matches: MatchCounter;
  readonly #ttl: TtlBlocklist | undefined;

  /**
   * @param policy the resolved `blocklist` section
   * @param ttl the TTL block policy's list, when that policy is on or in dry run
   */
  constructor(policy: ActivePolicy<"blocklist">, ttl: TtlBlocklist | undefined) {
    this.mode = policy.mode;
    this.rules = policy.rules.map((rule) => ({
      name: rule.name,
      path: rule.path ? new RegExp(rule.path) : undefined,
      header: rule.header && {
        name: rule.header.name.toLowerCase(),
        pattern: new RegExp(rule.header.pattern),
      },
      action: rule.action,
    }));
    this.blockAfter = policy.block_after;
    this.matches = new MatchCounter({ windowMs: policy.window_ms, maxEntries: 100_000 });
    this.#ttl = ttl;
  }

  /** Refuses a request the first matching rule names; when on, counts it towards `block_after`. */
  check(request: PolicyRequest): Refusal | undefined {
    const rule = firstMatch(this.rules, request);
    if (!rule) return undefined;
    const ttl = this.#ttl;
    if (this.blockAfter > 0 && ttl && this.mode === "on") {
      const client = ttl.keys.of(request.client());
      if (this.matches.count(client, request.now) >= this.blockAfter) {
        ttl.block(client, request.now);
      }
    }
    const reply = blockReply(rule.action, request.context.requestId);
    return { reply, reason: `rule ${rule.name}` };
  }
}

/** The first rule whose path and header patterns (those it has) both match. */
function firstMatch(rules: readonly BlockRule[], request: PolicyRequest): BlockRule | undefined {
  const context = request.context;
  for (const rule of rules) {
    if (rule.path && !rule.path.test(context.head.path)) continue;
    if (rule.header) {
      const value = request.header(rule.header.name);
      if (value === undefined || !rule.header.pattern.test(value)) continue;
    }
    return rule;
  }
  return undefined;
}
