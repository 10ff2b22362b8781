/**
 * Client-address anonymisation for every log site: the one helper that turns a peer or forwarded
 * address into the form the gateway may write down. IPv4 keeps its /24 network (last octet zeroed);
 * IPv6 keeps its /64 network (the interface identifier, RFC 4291 §2.5.1, zeroed) in RFC 5952 text;
 * an IPv4-mapped IPv6 address (RFC 4291 §2.5.5.2) is the IPv4 address it carries. Anything that is
 * not an address becomes "-", so a malformed or hostile value is never echoed into a log.
 *
 * It is the only place that may write a client address down: the far end of a connection the
 * process accepted (edge lanes, door, hub listeners — a node connecting to the hub included) and
 * every address a client claims (X-Forwarded-For and the other client-address headers, the
 * effective client). Addresses the config names and the process dials (hub, SOCKS pool, backends)
 * are not client addresses. tests/anon_addresses_test.ts scans every module's syntax tree for a
 * client address that reaches a log line, a diagnostic, a span, a metric or an error another way.
 *
 * Parsing reuses the trusted-proxy parser in `src/request/cidr.ts` rather than `node:net`'s `isIP`
 * plus a second hand-written IPv6 expander: the log then agrees exactly with the forwarded headers
 * on what an address is (brackets, zone ids, mapped forms, no octal quads).
 *
 * @module
 */
import { canonicalAddress, parseCidr } from "../request/cidr.ts";

/** What an address that cannot be parsed is logged as. */
export const NO_ADDRESS = "-";

/**
 * Anonymises a client address for logging: IPv4 → /24, IPv6 → /64, mapped IPv6 → IPv4 /24, zone
 * ids and brackets dropped, anything else (an absent address too: a socket already closed has none)
 * → "-".
 *
 * @param address a peer or forwarded address, as received
 * @returns the network part in canonical text, without a prefix length, or "-"
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { anonymizeIp } from "./anonymize.ts";
 * assert.equal(anonymizeIp("203.0.113.77"), "203.0.113.0");
 * assert.equal(anonymizeIp("2001:db8:1:2:3:4:5:6"), "2001:db8:1:2::");
 * assert.equal(anonymizeIp("::ffff:203.0.113.77"), "203.0.113.0");
 * assert.equal(anonymizeIp("fe80::1%eth0"), "fe80::");
 * assert.equal(anonymizeIp("not an address"), "-");
 * ```
 */
export function anonymizeIp(address: string | undefined): string {
  if (address === undefined) return NO_ADDRESS;
  const canonical = canonicalAddress(address);
  if (canonical === undefined) return NO_ADDRESS;
  const prefix = canonical.includes(":") ? 64 : 24;
  const network = parseCidr(`${canonical}/${prefix}`);
  if (typeof network === "string") return NO_ADDRESS;
  return network.text.slice(0, network.text.lastIndexOf("/"));
}
