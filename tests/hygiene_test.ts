/**
 * Unit tests for header hygiene: `upstreamHeaders`, `downstreamHeaders`, `effectiveClient` and
 * `isIdentityHeader`, fed spoofed raw header lists from trusted and untrusted peers.
 *
 * @module
 */
import assert from "node:assert/strict";
import { AddressSet } from "../src/request/cidr.ts";
import { effectiveClient } from "../src/request/client_ip_headers.ts";
import {
  downstreamHeaders,
  type ForwardContext,
  isIdentityHeader,
  upstreamHeaders,
} from "../src/proxy/hygiene.ts";

const TRUSTED = AddressSet.of(["10.0.0.0/8", "2001:db8::/32"]);

/**
 * The backend headers under their pre-issue-34 names: the operator's explicit choice these tests
 * opt in to, so the identity rules keep their coverage (the default, none, is tested apart).
 */
const LEGACY_NAMED = {
  backendHeaders: {
    tenant: "X-Portcullis-Tenant",
    route: "X-Portcullis-Route",
    requestId: "X-Portcullis-Request-Id",
  },
  owned: new Set(["x-portcullis-tenant", "x-portcullis-route", "x-portcullis-request-id"]),
};

/** An untrusted IPv4 peer on the public lane unless told, with the legacy backend headers. */
function context(overrides: Partial<ForwardContext> = {}): ForwardContext {
  return {
    peer: "203.0.113.7",
    trusted: TRUSTED,
    proto: "https",
    host: "demo.example",
    requestId: "req-1",
    tenant: "demo.example",
    route: "api",
    authority: "10.0.0.5:8080",
    upgrade: false,
    ...LEGACY_NAMED,
    ...overrides,
  };
}

/** The identity headers the gateway appends for the default context. */
const IDENTITY = [
  "X-Portcullis-Tenant",
  "demo.example",
  "X-Portcullis-Route",
  "api",
  "X-Portcullis-Request-Id",
  "req-1",
];

/** The forwarding headers the gateway appends, for the default host and request id. */
function forwarded(forwardedFor: string, realIp: string, proto = "https"): string[] {
  return [
    "X-Forwarded-For",
    forwardedFor,
    "X-Real-IP",
    realIp,
    "X-Forwarded-Proto",
    proto,
    "X-Forwarded-Host",
    "demo.example",
    "X-Request-Id",
    "req-1",
  ];
}

/** Every spoofing and hop-by-hop field a hostile client might send, around two honest ones. */
const SPOOFED = Object.freeze([
  "Host",
  "demo.example",
  "User-Agent",
  "curl/8.9",
  "X-Portcullis-Tenant",
  "evil",
  "x_portcullis_route",
  "evil",
  "X-PORTCULLIS-REQUEST-ID",
  "x",
  "X_Portcullis-Anything",
  "y",
  "X-Forwarded-For",
  "6.6.6.6",
  "X-Real-IP",
  "6.6.6.6",
  "X-Forwarded-Host",
  "evil",
  "X-Forwarded-Proto",
  "http",
  "X-Forwarded-Port",
  "1",
  "X-Forwarded-Prefix",
  "/evil",
  "X-Forwarded-Server",
  "evil",
  "X-Forwarded-Ssl",
  "on",
  "Forwarded",
  "for=6.6.6.6;proto=http",
  "X-Original-URL",
  "/admin",
  "X-Rewrite-URL",
  "/admin",
  "X-Request-Id",
  "client-chosen",
  "Connection",
  "keep-alive, X-Secret",
  "X-Secret",
  "s",
  "TE",
  "trailers",
  "Proxy-Authorization",
  "Basic Zm9vOmJhcg==",
  "Keep-Alive",
  "timeout=5",
  "Proxy-Connection",
  "keep-alive",
  "Trailer",
  "Expires",
  "Transfer-Encoding",
  "chunked",
  "Upgrade",
  "websocket",
  "Proxy-Authenticate",
  "Basic",
  "Accept",
  "*/*",
]);

Deno.test("upstreamHeaders() strips every spoofed field from an untrusted peer", () => {
  assert.deepEqual(upstreamHeaders(SPOOFED, context()), [
    "Host",
    "10.0.0.5:8080",
    "User-Agent",
    "curl/8.9",
    "Accept",
    "*/*",
    ...IDENTITY,
    ...forwarded("203.0.113.7", "203.0.113.7"),
  ]);
});

Deno.test("upstreamHeaders() keeps a trusted peer's X-Forwarded-For chain and proto, nothing else", () => {
  // A trusted proxy in front (say, a TLS-terminating load balancer) says which scheme its client
  // used; SPOOFED carries `X-Forwarded-Proto: http`.
  assert.deepEqual(upstreamHeaders(SPOOFED, context({ peer: "10.0.0.1" })), [
    "Host",
    "10.0.0.5:8080",
    "User-Agent",
    "curl/8.9",
    "Accept",
    "*/*",
    ...IDENTITY,
    ...forwarded("6.6.6.6, 10.0.0.1", "6.6.6.6", "http"),
  ]);
});

Deno.test("upstreamHeaders() takes X-Forwarded-Proto from the listener unless a trusted proxy says", () => {
  const proto = (raw: string[], overrides: Partial<ForwardContext>) => {
    const out = upstreamHeaders(raw, context(overrides));
    return out[out.indexOf("X-Forwarded-Proto") + 1];
  };
  const claim = ["X-Forwarded-Proto", "https"];
  assert.equal(proto([], { proto: "http" }), "http");
  assert.equal(proto([], { proto: "https" }), "https");
  assert.equal(proto(claim, { proto: "http" }), "http", "an untrusted client's claim is ignored");
  assert.equal(proto(claim, { proto: "http", peer: "10.0.0.1" }), "https");
  assert.equal(
    proto(["X-Forwarded-Proto", "gopher"], { proto: "http", peer: "10.0.0.1" }),
    "http",
    "a claim that is not http or https is ignored",
  );
});

Deno.test("upstreamHeaders() drops client-address claims unless the peer is a trusted proxy", () => {
  const raw = [
    "True-Client-IP",
    "6.6.6.6",
    "x-client-ip",
    "6.6.6.6",
    "CF-Connecting-IP",
    "6.6.6.6",
    "X-Cluster-Client-IP",
    "6.6.6.6",
    "Client-IP",
    "6.6.6.6",
    "Fastly-Client-IP",
    "6.6.6.6",
    "X-Originating-IP",
    "6.6.6.6",
    "X-Remote-IP",
    "6.6.6.6",
    "X_Remote_Addr",
    "6.6.6.6",
    "X-Original-Forwarded-For",
    "6.6.6.6",
    "Accept",
    "*/*",
  ];
  const kept = (overrides: Partial<ForwardContext>) =>
    upstreamHeaders(raw, context(overrides)).filter((_, i, all) =>
      i % 2 === 0 && all[i + 1] === "6.6.6.6"
    );
  assert.deepEqual(kept({}), [], "an untrusted peer's claims all go");
  assert.equal(kept({ peer: "10.0.0.1" }).length, 10, "a trusted proxy's claims pass");
  assert.deepEqual(
    kept({ clientIpHeaders: new Set(["true-client-ip"]) }),
    ["x-client-ip", "CF-Connecting-IP", "X-Cluster-Client-IP", "Client-IP"].concat(
      "Fastly-Client-IP",
      "X-Originating-IP",
      "X-Remote-IP",
      "X_Remote_Addr",
      "X-Original-Forwarded-For",
    ),
    "the list is the operator's",
  );
});

Deno.test("upstreamHeaders() writes the body's framing itself, right after Host", () => {
  const raw = [
    "Content-Length",
    "0005",
    "Transfer-Encoding",
    "chunked",
    "content_length",
    "9",
    "Accept",
    "*/*",
  ];
  const head = (body: ForwardContext["body"]) =>
    upstreamHeaders(raw, context({ body })).slice(0, 6);
  assert.deepEqual(head(5), ["Host", "10.0.0.5:8080", "Content-Length", "5", "Accept", "*/*"]);
  assert.deepEqual(head(0), ["Host", "10.0.0.5:8080", "Content-Length", "0", "Accept", "*/*"]);
  assert.deepEqual(head("chunked"), [
    "Host",
    "10.0.0.5:8080",
    "Transfer-Encoding",
    "chunked",
    "Accept",
    "*/*",
  ]);
  assert.deepEqual(head("none").slice(0, 4), ["Host", "10.0.0.5:8080", "Accept", "*/*"]);
});

Deno.test("upstreamHeaders() and downstreamHeaders() append the Via pseudonym to the list", () => {
  const via = (out: string[]) => out.filter((_, i) => i > 0 && out[i - 1] === "Via");
  const raw = ["Via", "1.0 fred", "Accept", "*/*", "via", " 1.1 p.example "];
  assert.deepEqual(via(upstreamHeaders(raw, context({ via: "edge" }))), [
    "1.0 fred, 1.1 p.example, 1.1 edge",
  ]);
  assert.deepEqual(via(upstreamHeaders([], context({ via: "edge" }))), ["1.1 edge"]);
  assert.deepEqual(via(upstreamHeaders(raw, context())), ["1.0 fred, 1.1 p.example"]);
  assert.deepEqual(via(downstreamHeaders(raw, "r", { via: "edge" })), [
    "1.0 fred, 1.1 p.example, 1.1 edge",
  ]);
  assert.deepEqual(via(downstreamHeaders([], "r", { via: "edge" })), ["1.1 edge"]);
});

Deno.test("upstreamHeaders() trusts nobody when trusted_proxies is empty", () => {
  const raw = ["X-Forwarded-For", "6.6.6.6"];
  assert.deepEqual(
    upstreamHeaders(raw, context({ peer: "10.0.0.1", trusted: AddressSet.of([]) })),
    [
      "Host",
      "10.0.0.5:8080",
      ...IDENTITY,
      ...forwarded("10.0.0.1", "10.0.0.1"),
    ],
  );
});

Deno.test("upstreamHeaders() joins several X-Forwarded-For headers from a trusted peer", () => {
  const raw = [
    "X-Forwarded-For",
    "1.1.1.1, 2.2.2.2",
    "x-forwarded-for",
    "  3.3.3.3 ",
    "X-FORWARDED-FOR",
    "",
    "X-Forwarded-For",
    "10.0.0.9",
  ];
  assert.deepEqual(upstreamHeaders(raw, context({ peer: "10.0.0.1" })), [
    "Host",
    "10.0.0.5:8080",
    ...IDENTITY,
    ...forwarded("1.1.1.1, 2.2.2.2, 3.3.3.3, 10.0.0.9, 10.0.0.1", "3.3.3.3"),
  ]);
});

Deno.test("upstreamHeaders() writes a trusted peer alone when no chain came in", () => {
  assert.deepEqual(upstreamHeaders(["Accept", "*/*"], context({ peer: "10.0.0.1" })), [
    "Host",
    "10.0.0.5:8080",
    "Accept",
    "*/*",
    ...IDENTITY,
    ...forwarded("10.0.0.1", "10.0.0.1"),
  ]);
});

Deno.test("upstreamHeaders() writes IPv4-mapped peers as plain IPv4", () => {
  const raw = ["X-Forwarded-For", "198.51.100.4"];
  assert.deepEqual(upstreamHeaders(raw, context({ peer: "::ffff:10.0.0.1" })), [
    "Host",
    "10.0.0.5:8080",
    ...IDENTITY,
    ...forwarded("198.51.100.4, 10.0.0.1", "198.51.100.4"),
  ]);
  assert.deepEqual(upstreamHeaders(raw, context({ peer: "::ffff:203.0.113.7" })), [
    "Host",
    "10.0.0.5:8080",
    ...IDENTITY,
    ...forwarded("203.0.113.7", "203.0.113.7"),
  ]);
});

Deno.test("upstreamHeaders() handles IPv6 peers, trusted and not", () => {
  const raw = ["X-Forwarded-For", "198.51.100.4"];
  assert.deepEqual(upstreamHeaders(raw, context({ peer: "2001:db8::10" })), [
    "Host",
    "10.0.0.5:8080",
    ...IDENTITY,
    ...forwarded("198.51.100.4, 2001:db8::10", "198.51.100.4"),
  ]);
  assert.deepEqual(upstreamHeaders(raw, context({ peer: "2A00:1450:0:0::1" })), [
    "Host",
    "10.0.0.5:8080",
    ...IDENTITY,
    ...forwarded("2a00:1450::1", "2a00:1450::1"),
  ]);
});

Deno.test("upstreamHeaders() writes no peer entry for a Unix-socket peer", () => {
  const everyone = AddressSet.of(["0.0.0.0/0", "::/0"]);
  const raw = ["X-Forwarded-For", "6.6.6.6", "X-Real-IP", "6.6.6.6"];
  assert.deepEqual(upstreamHeaders(raw, context({ peer: "", trusted: everyone })), [
    "Host",
    "10.0.0.5:8080",
    ...IDENTITY,
    "X-Forwarded-Proto",
    "https",
    "X-Forwarded-Host",
    "demo.example",
    "X-Request-Id",
    "req-1",
  ]);
});

Deno.test("upstreamHeaders() writes no X-Forwarded-Host without an inbound Host", () => {
  assert.deepEqual(upstreamHeaders([], context({ host: "", proto: "http" })), [
    "Host",
    "10.0.0.5:8080",
    ...IDENTITY,
    "X-Forwarded-For",
    "203.0.113.7",
    "X-Real-IP",
    "203.0.113.7",
    "X-Forwarded-Proto",
    "http",
    "X-Request-Id",
    "req-1",
  ]);
});

Deno.test("upstreamHeaders() drops every field any Connection header names", () => {
  const raw = [
    "X-Secret",
    "s1",
    "X_Debug",
    "on",
    "Connection",
    " Close , x-SECRET,,",
    "Accept",
    "*/*",
    "connection",
    "X-Debug",
    "x-secret",
    "s2",
    "Authorization",
    "Bearer t",
  ];
  assert.deepEqual(upstreamHeaders(raw, context()), [
    "Host",
    "10.0.0.5:8080",
    "Accept",
    "*/*",
    "Authorization",
    "Bearer t",
    ...IDENTITY,
    ...forwarded("203.0.113.7", "203.0.113.7"),
  ]);
});

Deno.test("upstreamHeaders() never lets a Connection token remove Content-Length or Host", () => {
  const raw = ["Host", "demo.example", "Connection", "Content-Length, Host", "Content-Length", "5"];
  assert.deepEqual(upstreamHeaders(raw, context({ body: 5 })), [
    "Host",
    "10.0.0.5:8080",
    "Content-Length",
    "5",
    ...IDENTITY,
    ...forwarded("203.0.113.7", "203.0.113.7"),
  ]);
});

Deno.test("upstreamHeaders() drops hop-by-hop fields in any case", () => {
  const raw = [
    "CONNECTION",
    "close",
    "keep-alive",
    "5",
    "PROXY-connection",
    "close",
    "te",
    "trailers",
    "TRAILER",
    "X",
    "transfer-ENCODING",
    "chunked",
    "upgrade",
    "h2c",
    "proxy-authenticate",
    "Basic",
    "PROXY-AUTHORIZATION",
    "Basic eA==",
    "Cookie",
    "a=1",
  ];
  assert.deepEqual(upstreamHeaders(raw, context()), [
    "Host",
    "10.0.0.5:8080",
    "Cookie",
    "a=1",
    ...IDENTITY,
    ...forwarded("203.0.113.7", "203.0.113.7"),
  ]);
});

Deno.test("upstreamHeaders() drops underscore twins of framing and forwarding fields", () => {
  const raw = [
    "X_Forwarded_For",
    "6.6.6.6",
    "x_real_ip",
    "6.6.6.6",
    "X_Request_Id",
    "spoof",
    "Content_Length",
    "0",
    "Transfer_Encoding",
    "chunked",
    "Keep_Alive",
    "1",
    "X_Custom",
    "kept",
  ];
  assert.deepEqual(upstreamHeaders(raw, context({ peer: "10.0.0.1" })), [
    "Host",
    "10.0.0.5:8080",
    "X_Custom",
    "kept",
    ...IDENTITY,
    ...forwarded("10.0.0.1", "10.0.0.1"),
  ]);
});

Deno.test("upstreamHeaders() passes the rest through in order, case and duplicates intact", () => {
  const raw = Object.freeze([
    "accept",
    "text/html",
    "Cookie",
    "a=1",
    "Content-Length",
    "5",
    "ACCEPT",
    "application/json",
    "Cookie",
    "b=2",
    "Host",
    "demo.example",
    "Authorization",
    "Bearer t",
  ]);
  assert.deepEqual(upstreamHeaders(raw, context({ body: 5 })), [
    "Host",
    "10.0.0.5:8080",
    "Content-Length",
    "5",
    "accept",
    "text/html",
    "Cookie",
    "a=1",
    "ACCEPT",
    "application/json",
    "Cookie",
    "b=2",
    "Authorization",
    "Bearer t",
    ...IDENTITY,
    ...forwarded("203.0.113.7", "203.0.113.7"),
  ]);
});

Deno.test("upstreamHeaders() keeps Upgrade and sends one Connection: upgrade for a tunnel", () => {
  const raw = [
    "Host",
    "demo.example",
    "Connection",
    "keep-alive, Upgrade, X-Secret",
    "Upgrade",
    "websocket",
    "X-Secret",
    "s",
    "Sec-WebSocket-Key",
    "dGhlIHNhbXBsZSBub25jZQ==",
    "connection",
    "Upgrade",
    "UPGRADE",
    "foo/2",
    "Sec-WebSocket-Version",
    "13",
  ];
  assert.deepEqual(upstreamHeaders(raw, context({ upgrade: true })), [
    "Host",
    "10.0.0.5:8080",
    "Upgrade",
    "websocket",
    "Sec-WebSocket-Key",
    "dGhlIHNhbXBsZSBub25jZQ==",
    "UPGRADE",
    "foo/2",
    "Sec-WebSocket-Version",
    "13",
    "Connection",
    "upgrade",
    ...IDENTITY,
    ...forwarded("203.0.113.7", "203.0.113.7"),
  ]);
});

Deno.test("upstreamHeaders() drops Upgrade when no tunnel was decided", () => {
  const raw = ["Connection", "Upgrade", "Upgrade", "websocket", "Sec-WebSocket-Version", "13"];
  assert.deepEqual(upstreamHeaders(raw, context()), [
    "Host",
    "10.0.0.5:8080",
    "Sec-WebSocket-Version",
    "13",
    ...IDENTITY,
    ...forwarded("203.0.113.7", "203.0.113.7"),
  ]);
});

Deno.test("upstreamHeaders() writes no Connection: upgrade when no Upgrade field survives", () => {
  assert.deepEqual(upstreamHeaders(["Connection", "upgrade"], context({ upgrade: true })), [
    "Host",
    "10.0.0.5:8080",
    ...IDENTITY,
    ...forwarded("203.0.113.7", "203.0.113.7"),
  ]);
});

Deno.test("effectiveClient() is the peer when the peer is not trusted", () => {
  const raw = ["X-Forwarded-For", "6.6.6.6"];
  assert.equal(effectiveClient(raw, "203.0.113.7", TRUSTED), "203.0.113.7");
  assert.equal(effectiveClient(raw, "::ffff:203.0.113.7", TRUSTED), "203.0.113.7");
  assert.equal(effectiveClient(raw, "10.0.0.1", AddressSet.of([])), "10.0.0.1");
  assert.equal(effectiveClient(raw, "", TRUSTED), "");
  assert.equal(effectiveClient(raw, "not-an-address", TRUSTED), "");
});

Deno.test("effectiveClient() walks X-Forwarded-For right to left past trusted hops", () => {
  const raw = ["X-Forwarded-For", "6.6.6.6, 203.0.113.9, 10.0.0.3"];
  assert.equal(effectiveClient(raw, "10.0.0.1", TRUSTED), "203.0.113.9");
  assert.equal(effectiveClient(raw, "::ffff:10.0.0.1", TRUSTED), "203.0.113.9");
  assert.equal(effectiveClient([], "10.0.0.1", TRUSTED), "10.0.0.1");
});

Deno.test("effectiveClient() reads several headers as one list, last header nearest", () => {
  const raw = [
    "X-Forwarded-For",
    "6.6.6.6",
    "Accept",
    "*/*",
    "x-FORWARDED-for",
    "198.51.100.2, 10.0.0.8",
    "X-Forwarded-For",
    "10.0.0.9",
  ];
  assert.equal(effectiveClient(raw, "10.0.0.1", TRUSTED), "198.51.100.2");
});

Deno.test("effectiveClient() answers the leftmost address when every hop is trusted", () => {
  const raw = ["X-Forwarded-For", "10.0.0.9, [2001:db8::5], ::ffff:10.0.0.4"];
  assert.equal(effectiveClient(raw, "10.0.0.1", TRUSTED), "10.0.0.9");
});

Deno.test("effectiveClient() stops at a malformed entry and uses the last good address", () => {
  const stop = (chain: string) => effectiveClient(["X-Forwarded-For", chain], "10.0.0.1", TRUSTED);
  assert.equal(stop("6.6.6.6, unknown, 10.0.0.3"), "10.0.0.3");
  assert.equal(stop("6.6.6.6, 198.51.100.1:4711"), "10.0.0.1");
  assert.equal(stop("6.6.6.6, _hidden"), "10.0.0.1");
  assert.equal(stop("6.6.6.6, 010.0.0.3"), "10.0.0.1");
});

Deno.test("effectiveClient() skips empty list elements and canonicalises addresses", () => {
  const chain = (value: string) => effectiveClient(["X-Forwarded-For", value], "10.0.0.1", TRUSTED);
  assert.equal(chain("6.6.6.6,, 10.0.0.3,"), "6.6.6.6");
  assert.equal(chain("[2A00:1450:0::1], 10.0.0.3"), "2a00:1450::1");
  assert.equal(chain("::ffff:198.51.100.2"), "198.51.100.2");
});

Deno.test("effectiveClient() ignores underscore twins of X-Forwarded-For", () => {
  const raw = ["X-Forwarded-For", "198.51.100.2", "X_Forwarded_For", "6.6.6.6"];
  assert.equal(effectiveClient(raw, "10.0.0.1", TRUSTED), "198.51.100.2");
});

Deno.test("isIdentityHeader() covers x-portcullis- in any case and with underscores", () => {
  const identity = [
    "X-Portcullis-Tenant",
    "x_portcullis_route",
    "X-PORTCULLIS-REQUEST-ID",
    "X_Portcullis-Mixed",
    "x-portcullis_mixed",
    "x-portcullis-",
  ];
  for (const name of identity) assert.equal(isIdentityHeader(name), true, name);
  const others = [
    "X-Portcullis",
    "X-Portcullisx-Tenant",
    "Portcullis-Tenant",
    "X--Portcullis-Tenant",
    "XX-Portcullis-Tenant",
    "X-Forwarded-For",
    "",
  ];
  for (const name of others) assert.equal(isIdentityHeader(name), false, name);
});

Deno.test("downstreamHeaders() strips hop-by-hop and identity fields, replaces X-Request-Id", () => {
  const raw = Object.freeze([
    "Content-Type",
    "text/html",
    "Set-Cookie",
    "a=1; Path=/",
    "Connection",
    "keep-alive, X-Backend-Node",
    "X-Backend-Node",
    "web-3",
    "Keep-Alive",
    "timeout=5",
    "Transfer-Encoding",
    "chunked",
    "X-Portcullis-Tenant",
    "leak",
    "x_portcullis_debug",
    "leak",
    "X-Request-Id",
    "upstream-id",
    "X_Request_Id",
    "upstream-id",
    "set-cookie",
    "b=2; Path=/",
    "Proxy-Authenticate",
    "Basic",
    "Upgrade",
    "h2c",
    "Set-Cookie",
    "a=3; Path=/",
    "Content-Length",
    "12",
  ]);
  assert.deepEqual(downstreamHeaders(raw, "req-1"), [
    "Content-Type",
    "text/html",
    "Set-Cookie",
    "a=1; Path=/",
    "set-cookie",
    "b=2; Path=/",
    "Set-Cookie",
    "a=3; Path=/",
    "X-Request-Id",
    "req-1",
  ]);
});

Deno.test("downstreamHeaders() drops Content-Length from a response that was chunked", () => {
  assert.deepEqual(
    downstreamHeaders(["Content-Length", "3", "Transfer-Encoding", "chunked", "A", "b"], "r"),
    ["A", "b", "X-Request-Id", "r"],
  );
  assert.deepEqual(downstreamHeaders(["Content-Length", "3", "A", "b"], "r"), [
    "Content-Length",
    "3",
    "A",
    "b",
    "X-Request-Id",
    "r",
  ]);
});

Deno.test("downstreamHeaders() keeps Content-Length whatever Connection names", () => {
  const raw = ["Connection", "content-length", "Content-Length", "12"];
  assert.deepEqual(downstreamHeaders(raw, "req-1"), [
    "Content-Length",
    "12",
    "X-Request-Id",
    "req-1",
  ]);
});

Deno.test("downstreamHeaders() relays a 101's Upgrade with one Connection: upgrade", () => {
  const raw = [
    "Upgrade",
    "websocket",
    "Connection",
    "Upgrade",
    "Sec-WebSocket-Accept",
    "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=",
  ];
  assert.deepEqual(downstreamHeaders(raw, "req-1", { upgrade: true }), [
    "Upgrade",
    "websocket",
    "Sec-WebSocket-Accept",
    "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=",
    "Connection",
    "upgrade",
    "X-Request-Id",
    "req-1",
  ]);
  assert.deepEqual(downstreamHeaders(raw, "req-1"), [
    "Sec-WebSocket-Accept",
    "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=",
    "X-Request-Id",
    "req-1",
  ]);
});

Deno.test("downstreamHeaders() forwards one Content-Length field with one decimal value", () => {
  const lengths = (raw: string[]) => {
    const out = downstreamHeaders(raw, "r");
    return out.flatMap((v, i) =>
      i % 2 === 0 && v.toLowerCase() === "content-length" ? [out[i + 1]] : []
    );
  };
  assert.deepEqual(lengths(["Content-Length", "1, 1"]), ["1"]);
  assert.deepEqual(lengths(["content-length", "7", "X-A", "b", "Content-Length", "7"]), ["7"]);
  assert.deepEqual(lengths(["Content-Length", "007"]), ["7"]);
  assert.deepEqual(lengths(["Content-Length", "00, 00"]), ["0"]);
  // In the first field's place and spelling.
  assert.deepEqual(downstreamHeaders(["X-A", "b", "content-LENGTH", "2,2", "X-C", "d"], "r"), [
    "X-A",
    "b",
    "content-LENGTH",
    "2",
    "X-C",
    "d",
    "X-Request-Id",
    "r",
  ]);
  // Values that disagree (both upstream parsers refuse them first) write no length at all.
  assert.deepEqual(lengths(["Content-Length", "1, 2"]), []);
  assert.deepEqual(lengths(["Content-Length", "01", "Content-Length", "1"]), []);
  assert.deepEqual(lengths(["Content-Length", "1", "Transfer-Encoding", "chunked"]), []);
});
