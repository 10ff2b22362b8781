/**
 * The client key: what every per-client policy counts, limits and blocks — the rate limit's
 * bucket, the TTL block, the blocklist's `block_after` count, on the edge's shared tables and on
 * a fleet store alike. It is the network the client address lies in, not the address: IPv6 to a
 * prefix (default /64), IPv4 to a prefix (default /32), an IPv4-mapped IPv6 address as its IPv4
 * address, in one canonical text whatever the spelling (compressed or not, any case, a zone id,
 * brackets, a dotted IPv4 tail).
 *
 * Why: an IPv6 subscriber is routed a /64 at least (RFC 6177, RIPE-690: usually a /56 or /48),
 * and picks any of its 2^64 addresses per request; keyed by address, rotating through them got 40
 * of 40 requests past a burst of 3 (issue 31). Keyed by /64, the rotation buys nothing inside one
 * /64. The cost: everyone behind one /64 (or one IPv4 /24 where an operator asks for it) — an
 * office, a carrier-grade NAT, a shared host — shares one budget and one block.
 *
 * A full-length prefix keys by the bare canonical address (`203.0.113.7`, not `203.0.113.7/32`):
 * exactly what the policies keyed by before prefixes, so an IPv4 client keeps its fleet-store
 * bucket across an upgrade and edges of mixed versions agree on it.
 *
 * @module
 */
import { networkOf } from "../request/cidr.ts";

/** How client addresses become client keys: the prefix length kept of each family. */
export interface ClientKeyRule {
  /** Bits of an IPv4 address kept (8–32). */
  readonly ipv4Prefix: number;
  /** Bits of an IPv6 address kept (32–128). */
  readonly ipv6Prefix: number;
}

/** The rule when none is configured: IPv4 by address, IPv6 by /64. */
export const DEFAULT_CLIENT_KEY: ClientKeyRule = Object.freeze({ ipv4Prefix: 32, ipv6Prefix: 64 });

/**
 * The client key of `address` under `rule`. Something that is not an address (the empty text the
 * trusted-proxy rule gives a Unix-socket peer) is its own key, as before prefixes.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { clientKeyOf, DEFAULT_CLIENT_KEY } from "./client_key.ts";
 * assert.equal(clientKeyOf("2001:db8:1:2:aaaa::1", DEFAULT_CLIENT_KEY), "2001:db8:1:2::/64");
 * assert.equal(clientKeyOf("2001:DB8:1:2:0:0:0:FFFF", DEFAULT_CLIENT_KEY), "2001:db8:1:2::/64");
 * assert.equal(clientKeyOf("::ffff:203.0.113.7", DEFAULT_CLIENT_KEY), "203.0.113.7");
 * ```
 */
export function clientKeyOf(address: string, rule: ClientKeyRule): string {
  return networkOf(address, rule.ipv4Prefix, rule.ipv6Prefix) ?? address;
}

/**
 * One tenant's client keys: its rule, and the last key made (the TTL block, the rate limit and
 * the blocklist of one request ask for the same client's key in turn; it is made once).
 */
export class ClientKeys {
  readonly rule: ClientKeyRule;
  #address: string | undefined;
  #key = "";

  /** @param rule the prefixes (the default: IPv4 /32, IPv6 /64) */
  constructor(rule: ClientKeyRule = DEFAULT_CLIENT_KEY) {
    this.rule = rule;
  }

  /** The client key of `address` (see {@link clientKeyOf}). */
  of(address: string): string {
    if (address !== this.#address) {
      this.#key = clientKeyOf(address, this.rule);
      this.#address = address;
    }
    return this.#key;
  }
}

/** The rule from a `policies.client_key` section as validated (absent: the default). */
export function clientKeyRule(
  section: { readonly ipv4_prefix: number; readonly ipv6_prefix: number } | undefined,
): ClientKeyRule {
  if (!section) return DEFAULT_CLIENT_KEY;
  return { ipv4Prefix: section.ipv4_prefix, ipv6Prefix: section.ipv6_prefix };
}
