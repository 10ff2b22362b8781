/**
 * The client-address claims a gateway must not pass on from just anyone. Frameworks and CDNs read
 * these as "the client's address" (Akamai's True-Client-IP, Cloudflare's CF-Connecting-IP,
 * Fastly's Fastly-Client-IP, Rails' and Express's X-Client-IP and Client-IP, …), so a client that
 * writes one can pose as any address to an upstream that believes it. They pass only from a
 * trusted proxy; the configurable list (`forwarding.client_ip_headers`) defaults to this one.
 *
 * @module
 */

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
