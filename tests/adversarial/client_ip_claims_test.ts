/**
 * Adversarial: every client-address header an upstream might believe, in every spelling a client
 * can give it, against the recording upstream behind the real gateway (issue 31, finding 10:
 * X-ProxyUser-Ip and X-Envoy-External-Address reached backends verbatim; an attack on that change:
 * HTTP_CLIENT_IP, HTTP_X_FORWARDED_FOR, X-ARR-ClientIP, Ali-CDN-Real-IP, Cdn-Src-Ip,
 * X-Real-Client-IP and X-Original-Client-IP still did).
 *
 * - From a client that is not a trusted proxy, none arrives: not the names of
 *   `DEFAULT_CLIENT_IP_HEADERS` (src/request/client_ip_headers.ts says where each comes from), not
 *   the X-Forwarded-*, X-Real-IP and Forwarded the gateway rebuilds — lower case, upper case, title
 *   case, alternating case, `_` for `-`.
 * - From a trusted proxy, each name of the list arrives with its value (the list narrows nothing
 *   the operator's proxies send).
 *
 * @module
 */
import assert from "node:assert/strict";
import { DEFAULT_CLIENT_IP_HEADERS } from "../../src/request/client_ip_headers.ts";
import { json, type RawResponse } from "../fixtures/http_client.ts";
import { type Arena, arenaTest, headerValues } from "./arena.ts";

/**
 * The canonical client-address headers (Envoy, nginx, HAProxy, Traefik, Caddy, Cloudflare, Akamai,
 * Fastly, CloudFront, Azure Front Door, Google, Fly.io, DigitalOcean, Netlify, Vercel, Imperva,
 * Sucuri, WebLogic, and the frameworks' client-IP walks), written out here so the test does not
 * take the gateway's word for the list.
 */
const CLAIMED = [
  "True-Client-IP",
  "X-Client-IP",
  "CF-Connecting-IP",
  "CF-Connecting-IPv6",
  "CF-Pseudo-IPv4",
  "X-Cluster-Client-IP",
  "Client-IP",
  "Fastly-Client-IP",
  "X-Originating-IP",
  "X-Remote-IP",
  "X-Remote-Addr",
  "X-Original-Forwarded-For",
  "X-ProxyUser-Ip",
  "X-Envoy-External-Address",
  "X-Envoy-Internal",
  "CloudFront-Viewer-Address",
  "X-Azure-ClientIP",
  "X-Azure-SocketIP",
  "Fly-Client-IP",
  "DO-Connecting-IP",
  "X-AppEngine-User-IP",
  "X-AppEngine-Remote-Addr",
  "X-NF-Client-Connection-IP",
  "X-Vercel-Forwarded-For",
  "Incap-Client-IP",
  "X-Sucuri-ClientIP",
  "WL-Proxy-Client-IP",
  "Proxy-Client-IP",
  "X-Forwarded",
  "Forwarded-For",
  // CGI variable names as header names (the Java getIpAddr snippet, Hutool), sent here with "-";
  // the underscore spellings below send them as HTTP_CLIENT_IP, as the snippet reads them.
  "Http-Client-Ip",
  "Http-X-Forwarded-For",
  "Http-X-Forwarded",
  "Http-X-Cluster-Client-Ip",
  "Http-Forwarded-For",
  "Http-Forwarded",
  "Http-Via",
  "Remote-Addr",
  "Remote-Address",
  "X-ARR-ClientIP",
  "X-MS-Forwarded-Client-IP",
  "Ali-CDN-Real-IP",
  "Cdn-Src-Ip",
  "Cdn-Real-Ip",
  "EO-Connecting-IP",
  "EO-Client-IP",
  "X-Real-Client-IP",
  "X-Original-Client-IP",
] as const;

/** Rebuilt by the gateway for everyone: dropped from every client, trusted or not. */
const REBUILT = [
  "X-Forwarded-For",
  "X-Forwarded-Host",
  "X-Forwarded-Proto",
  "X-Forwarded-Port",
  "X-Forwarded-Server",
  "X-Real-IP",
  "Forwarded",
] as const;

/** The spellings a client may give a name. */
const SPELLINGS: Record<string, (name: string) => string> = {
  "lower case": (name) => name.toLowerCase(),
  "upper case": (name) => name.toUpperCase(),
  "title case": (name) =>
    name.toLowerCase().split("-").map((w) => w.charAt(0).toUpperCase() + w.slice(1)).join("-"),
  "alternating case": (name) =>
    [...name].map((c, i) => i % 2 === 0 ? c.toUpperCase() : c.toLowerCase()).join(""),
  "underscores": (name) => name.replaceAll("-", "_"),
  "upper case underscores": (name) => name.toUpperCase().replaceAll("-", "_"),
};

/** A value no header the gateway writes itself could carry: `198.51.100.<n>`. */
function marker(index: number): string {
  return `198.51.100.${index + 1}`;
}

/** The header list the upstream received, from its `/echo` body. */
function upstreamSaw(response: RawResponse): string[] {
  assert.equal(response.status, 200, response.body);
  return json<{ headers: string[] }>(response).headers;
}

/** Sends every name of `names` in `spelling`, each with its own marker value. */
async function sendClaims(arena: Arena, names: readonly string[], spell: (n: string) => string) {
  const headers = names.map((name, i): [string, string] => [spell(name), marker(i)]);
  return upstreamSaw(await arena.send({ path: "/api/echo", headers }));
}

Deno.test("DEFAULT_CLIENT_IP_HEADERS holds every canonical client-address header", () => {
  const list = new Set(DEFAULT_CLIENT_IP_HEADERS);
  const missing = CLAIMED.filter((name) => !list.has(name.toLowerCase().replaceAll("_", "-")));
  assert.deepEqual(missing, []);
});

arenaTest(
  "adversarial: no client-address claim of an untrusted client reaches the upstream, in any spelling",
  {},
  Object.fromEntries(
    Object.entries(SPELLINGS).map(([spelling, spell]) => [
      spelling,
      async (arena: Arena) => {
        const names = [...CLAIMED, ...REBUILT];
        const seen = await sendClaims(arena, names, spell);
        const leaked = names.filter((_, i) => seen.includes(marker(i)));
        assert.deepEqual(leaked, [], `reached the upstream: ${leaked.join(", ")}`);
        // The gateway's own forwarding headers are there, naming the real peer.
        assert.deepEqual(headerValues(seen, "x-real-ip"), ["127.0.0.1"]);
      },
    ]),
  ),
);

arenaTest(
  "adversarial: a trusted proxy's client-address claims reach the upstream, in any spelling",
  {
    edit(config) {
      config.trusted_proxies = ["127.0.0.0/8"];
    },
  },
  Object.fromEntries(
    Object.entries(SPELLINGS).map(([spelling, spell]) => [
      spelling,
      async (arena: Arena) => {
        const seen = await sendClaims(arena, CLAIMED, spell);
        const lost = CLAIMED.filter((name, i) => headerValues(seen, name).join() !== marker(i));
        assert.deepEqual(lost, [], `did not arrive as sent: ${lost.join(", ")}`);
      },
    ]),
  ),
);
