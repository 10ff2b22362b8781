/**
 * The client-address claims a gateway must not pass on from just anyone. Frameworks and CDNs read
 * these as "the client's address" (Akamai's True-Client-IP, Cloudflare's CF-Connecting-IP,
 * Fastly's Fastly-Client-IP, Rails' and Express's X-Client-IP and Client-IP, …), so a client that
 * writes one can pose as any address to an upstream that believes it. They pass only from a
 * trusted proxy; the configurable list (`forwarding.client_ip_headers`) defaults to this one.
 *
 * @module
 */
import { type AddressSet, canonicalAddress } from "./cidr.ts";

/** Lower-case names of the client-address headers dropped unless the peer is a trusted proxy. */
export const DEFAULT_CLIENT_IP_HEADERS: readonly string[] = Object.freeze([
  "true-client-ip",
  "x-client-ip",
  "cf-connecting-ip",
  "x-cluster-client-ip",
  "client-ip",
  "fastly-client-ip",
  "x-originating-ip",
  "x-remote-ip",
  "x-remote-addr",
  "x-original-forwarded-for",
]);

/**
 * The effective client address: the peer unless it is a trusted proxy; then the X-Forwarded-For
 * chain (every such header, comma lists, in order) read right to left, skipping trusted addresses,
 * gives the first untrusted one, or the leftmost when all are trusted. A malformed entry ("unknown",
 * "1.2.3.4:80") ends the walk at the last good address. Empty list elements are skipped (RFC 9110
 * §5.6.1). Addresses come back canonical ("::ffff:1.2.3.4" as "1.2.3.4"); "" for a Unix peer.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { AddressSet } from "./cidr.ts";
 * import { effectiveClient } from "./client_ip_headers.ts";
 * const trusted = AddressSet.of(["10.0.0.0/8"]);
 * const raw = ["X-Forwarded-For", "6.6.6.6, 203.0.113.7", "X-Forwarded-For", "10.0.0.2"];
 * assert.equal(effectiveClient(raw, "::ffff:10.0.0.1", trusted), "203.0.113.7");
 * assert.equal(effectiveClient(raw, "198.51.100.1", trusted), "198.51.100.1");
 * ```
 */
export function effectiveClient(raw: readonly string[], peer: string, trusted: AddressSet): string {
  const client = canonicalAddress(peer) ?? "";
  if (client === "" || !trusted.has(client)) return client;
  const values: string[] = [];
  for (let index = 0; index < raw.length; index += 2) {
    const name = raw[index];
    if (name.length === 15 && name.toLowerCase() === "x-forwarded-for") values.push(raw[index + 1]);
  }
  return walkChain(values, client, trusted);
}

/** Walks X-Forwarded-For right to left from a trusted peer; see {@link effectiveClient}. */
export function walkChain(values: readonly string[], peer: string, trusted: AddressSet): string {
  let last = peer;
  for (let value = values.length - 1; value >= 0; value--) {
    const entries = values[value].split(",");
    for (let entry = entries.length - 1; entry >= 0; entry--) {
      const text = entries[entry].trim();
      if (text === "") continue;
      const address = canonicalAddress(text);
      if (address === undefined) return last;
      if (!trusted.has(address)) return address;
      last = address;
    }
  }
  return last;
}
