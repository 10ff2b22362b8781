/**
 * The client-address claims a gateway must not pass on from just anyone. Frameworks, CDNs and
 * proxies read these as "the client's address", so a client that writes one can pose as any
 * address — or as an internal caller — to an upstream that believes it. They pass only from a
 * trusted proxy; the configurable list (`forwarding.client_ip_headers`) defaults to this one.
 * X-Forwarded-* (every name with that prefix), X-Real-IP and Forwarded (RFC 7239) are not in it:
 * the gateway drops those from everyone and writes its own (proxy/hygiene.ts).
 *
 * Where each name comes from (the proxies and CDNs that set it, the frameworks that trust it):
 *
 * - `true-client-ip`: Akamai, and Cloudflare Enterprise's "True-Client-IP Header" setting;
 *   CloudFront's documented function example adds it.
 * - `cf-connecting-ip`, `cf-connecting-ipv6`, `cf-pseudo-ipv4`: Cloudflare ("Cloudflare HTTP
 *   headers", developers.cloudflare.com/fundamentals/reference/http-headers).
 * - `fastly-client-ip`: Fastly (its HTTP header reference: "not protected from modification at the
 *   edge… if a client sets this header themselves, we will use it").
 * - `x-envoy-external-address`, `x-envoy-internal`: Envoy, which sets both from the trusted client
 *   address and sanitizes them on external requests ("HTTP header sanitizing"); an Envoy behind the
 *   gateway that reads them would take a client's word for its address, or for being internal.
 * - `x-proxyuser-ip`: Google's front-end proxies; Yii 2's guide ("Trusted proxies and headers")
 *   names it as a proxy's client-address header.
 * - `cloudfront-viewer-address`: Amazon CloudFront (`ip:port` of the viewer).
 * - `x-azure-clientip`, `x-azure-socketip`: Azure Front Door ("Protocol support for HTTP headers").
 * - `fly-client-ip`: Fly.io ("Request headers"); `do-connecting-ip`: DigitalOcean App Platform;
 *   `x-appengine-user-ip`, `x-appengine-remote-addr`: Google App Engine (its Go SDK reads both);
 *   `x-nf-client-connection-ip`: Netlify; `x-vercel-forwarded-for`: Vercel.
 * - `incap-client-ip`: Imperva (Incapsula); `x-sucuri-clientip`: Sucuri.
 * - `wl-proxy-client-ip`, `proxy-client-ip`: the WebLogic proxy plug-in (WebLogic's
 *   `weblogic-plugin-enabled` makes `getRemoteAddr` return WL-Proxy-Client-IP) and Apache/Tomcat
 *   setups that copy it.
 * - `x-client-ip`, `client-ip`, `x-cluster-client-ip`, `x-forwarded`, `forwarded-for`: the
 *   headers the request-ip package (Node), tomasen/realip (Go) and Rails' `remote_ip` walk, beside
 *   X-Forwarded-For (`x-forwarded` and `forwarded-for` are not caught by the X-Forwarded- prefix).
 * - `x-original-forwarded-for`: ingress-nginx, which keeps the inbound X-Forwarded-For there.
 * - `x-originating-ip`, `x-remote-ip`, `x-remote-addr`: Microsoft mail front ends and the
 *   IP-spoofing lists of access-control bypass scanners (which also carry X-ProxyUser-Ip).
 * - CGI variable names used as header names: the Java `getIpAddr` snippet copied into countless
 *   servlet code bases reads `request.getHeader("HTTP_CLIENT_IP")` and `"HTTP_X_FORWARDED_FOR"`
 *   beside Proxy-Client-IP and WL-Proxy-Client-IP, and its longer form `"HTTP_X_FORWARDED"`,
 *   `"HTTP_X_CLUSTER_CLIENT_IP"`, `"HTTP_FORWARDED_FOR"`, `"HTTP_FORWARDED"`, `"HTTP_VIA"` and
 *   `"REMOTE_ADDR"` (Hutool's `ServletUtil.getClientIP` reads the first two): a servlet container
 *   matches those names literally, so a client that sends `HTTP_CLIENT_IP: …` sets them. Hence
 *   `http-client-ip`, `http-x-forwarded-for`, `http-x-forwarded`, `http-x-cluster-client-ip`,
 *   `http-forwarded-for`, `http-forwarded`, `http-via` and `remote-addr` (none is caught by the
 *   X-Forwarded- prefix; `_` and `-` are read alike, so each name covers both spellings).
 * - `remote-address`: Akka HTTP's `extractClientIP` reads it beside X-Forwarded-For and X-Real-IP
 *   (the server adds it only when `remote-address-header` is on).
 * - `x-arr-clientip`: Azure App Service's front ends (Application Request Routing), `ip:port`.
 * - `x-ms-forwarded-client-ip`: Microsoft's Web Application Proxy toward AD FS ([MS-ADFSPIP]
 *   §2.2.1.2: "the IP address of the client sending the request").
 * - `ali-cdn-real-ip`: Alibaba Cloud CDN and DCDN (default origin headers, "Ali-Cdn-Real-Ip: the
 *   real IP of the client connecting to the POP").
 * - `cdn-src-ip`: CDNetworks / Wangsu ("Forward Client IP": the default header carrying the
 *   client's address); `cdn-real-ip`: the header other Chinese CDNs document for the same.
 * - `eo-connecting-ip`, `eo-client-ip`: Tencent EdgeOne (a default origin header, and the name
 *   its documentation gives the optional client-IP header).
 * - `x-real-client-ip`, `x-original-client-ip`: set by front ends of one's own (a Varnish setup
 *   copying X-Forwarded-For into X-Original-Client-IP, gateways that write X-Real-Client-IP) and
 *   read by application middleware as the client's address.
 *
 * nginx (`real_ip_header`, default X-Real-IP), HAProxy (`option forwardfor`: X-Forwarded-For, and
 * `option originalto`: X-Original-To, the destination, not the client), Traefik (`forwardedHeaders`:
 * X-Forwarded-* and X-Real-Ip) and Caddy (`trusted_proxies`, `client_ip_headers`: X-Forwarded-For
 * by default) trust only the headers the gateway already rebuilds.
 *
 * @module
 */
import { type AddressSet, canonicalAddress } from "./cidr.ts";

/** Lower-case names of the client-address headers dropped unless the peer is a trusted proxy. */
export const DEFAULT_CLIENT_IP_HEADERS: readonly string[] = Object.freeze([
  "true-client-ip",
  "x-client-ip",
  "cf-connecting-ip",
  "cf-connecting-ipv6",
  "cf-pseudo-ipv4",
  "x-cluster-client-ip",
  "client-ip",
  "fastly-client-ip",
  "x-originating-ip",
  "x-remote-ip",
  "x-remote-addr",
  "x-original-forwarded-for",
  "x-proxyuser-ip",
  "x-envoy-external-address",
  "x-envoy-internal",
  "cloudfront-viewer-address",
  "x-azure-clientip",
  "x-azure-socketip",
  "fly-client-ip",
  "do-connecting-ip",
  "x-appengine-user-ip",
  "x-appengine-remote-addr",
  "x-nf-client-connection-ip",
  "x-vercel-forwarded-for",
  "incap-client-ip",
  "x-sucuri-clientip",
  "wl-proxy-client-ip",
  "proxy-client-ip",
  "x-forwarded",
  "forwarded-for",
  "http-client-ip",
  "http-x-forwarded-for",
  "http-x-forwarded",
  "http-x-cluster-client-ip",
  "http-forwarded-for",
  "http-forwarded",
  "http-via",
  "remote-addr",
  "remote-address",
  "x-arr-clientip",
  "x-ms-forwarded-client-ip",
  "ali-cdn-real-ip",
  "cdn-src-ip",
  "cdn-real-ip",
  "eo-connecting-ip",
  "eo-client-ip",
  "x-real-client-ip",
  "x-original-client-ip",
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
