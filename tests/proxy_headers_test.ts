/**
 * Proxy dataplane, header hygiene end to end: what the upstream receives (through a real SOCKS5
 * fixture) and what the client gets back.
 *
 * @module
 */
import assert from "node:assert/strict";
import { exchange, json, renderRequest } from "./fixtures/http_client.ts";
import { type Echo, SHOP, single, values, withProxyEdge } from "./fixtures/proxy_edge.ts";
import { withLegacyHeaders } from "./fixtures/named_headers.ts";

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

Deno.test("proxy upstream headers: Host is the backend authority, query kept, hop-by-hop removed", async () => {
  await withProxyEdge({}, async (p) => {
    const response = await p.send({
      method: "POST",
      path: "/api/echo?q=1&b=two%20words",
      headers: [
        ["Connection", "close, X-Secret-Hop, Content-Length"],
        ["Keep-Alive", "timeout=5"],
        ["Proxy-Connection", "keep-alive"],
        ["TE", "trailers"],
        ["Trailer", "X-Checksum"],
        ["Proxy-Authorization", "Basic c2VjcmV0"],
        ["X-Secret-Hop", "must-not-pass"],
        ["X-Keep", "kept"],
      ],
      body: "hello",
    });
    assert.equal(response.status, 200);
    const echo = json<Echo>(response);
    assert.equal(echo.url, "/echo?q=1&b=two%20words");
    assert.equal(single(echo.headers, "host"), `127.0.0.1:${p.upstream.port}`);
    for (const name of ["keep-alive", "proxy-connection", "te", "trailer", "proxy-authorization"]) {
      assert.deepEqual(values(echo.headers, name), [], `${name} reached the upstream`);
    }
    assert.deepEqual(values(echo.headers, "x-secret-hop"), [], "a Connection-listed header passed");
    assert.ok(!values(echo.headers, "connection").join().toLowerCase().includes("x-secret-hop"));
    assert.equal(single(echo.headers, "x-keep"), "kept");
    // Content-Length named in Connection still frames the body.
    assert.equal(single(echo.headers, "content-length"), "5");
    assert.equal(echo.body, "hello");
  });
});

Deno.test("proxy upstream headers: client X-Portcullis-* in any spelling replaced by the gateway's", async () => {
  await withProxyEdge({ edit: withLegacyHeaders }, async (p) => {
    const response = await p.send({
      path: "/api/echo",
      headers: [
        ["X-Portcullis-Tenant", "evil"],
        ["x-portcullis-route", "evil"],
        ["X_Portcullis_Request_Id", "evil"],
        ["X-PORTCULLIS-ADMIN", "evil"],
        ["X-Portcullis_Role", "evil"],
        ["X-Request-Id", "client-req-1"],
      ],
    });
    assert.equal(response.status, 200);
    const echo = json<Echo>(response);
    const identity = [];
    for (let i = 0; i < echo.headers.length; i += 2) {
      const name = echo.headers[i].toLowerCase().replaceAll("_", "-");
      if (name.startsWith("x-portcullis-")) identity.push([echo.headers[i], echo.headers[i + 1]]);
    }
    assert.deepEqual(identity, [
      ["X-Portcullis-Tenant", SHOP],
      ["X-Portcullis-Route", "api"],
      ["X-Portcullis-Request-Id", "client-req-1"],
    ]);
    assert.ok(!echo.headers.includes("evil"), "a spoofed identity value reached the upstream");
  });
});

Deno.test("proxy upstream headers: untrusted peer's forwarding claims discarded and rebuilt", async () => {
  await withProxyEdge({}, async (p) => {
    const response = await p.send({
      path: "/api/echo",
      headers: [
        ["X-Forwarded-For", "6.6.6.6"],
        ["X-Real-IP", "6.6.6.6"],
        ["X-Forwarded-Proto", "https"],
        ["X-Forwarded-Host", "evil.test"],
        ["X_Forwarded_For", "6.6.6.7"],
        ["Forwarded", "for=6.6.6.6"],
      ],
    });
    assert.equal(response.status, 200);
    const echo = json<Echo>(response);
    assert.equal(single(echo.headers, "x-forwarded-for"), "127.0.0.1");
    assert.deepEqual(values(echo.headers, "x_forwarded_for"), []);
    assert.equal(single(echo.headers, "x-real-ip"), "127.0.0.1");
    assert.equal(single(echo.headers, "x-forwarded-proto"), "http");
    assert.equal(single(echo.headers, "x-forwarded-host"), SHOP);
    assert.deepEqual(values(echo.headers, "forwarded"), []);
  });
});

Deno.test("proxy upstream headers: trusted peer's X-Forwarded-For chain extended, X-Real-IP walked", async () => {
  const setup = {
    edit: (config: Record<string, unknown>) => config.trusted_proxies = ["127.0.0.0/8"],
  };
  await withProxyEdge(setup, async (p) => {
    const response = await p.send({
      path: "/api/echo",
      headers: [
        ["X-Forwarded-For", "198.51.100.1, 203.0.113.7"],
        ["X-Forwarded-For", "127.0.0.2"],
        ["X-Real-IP", "6.6.6.6"],
      ],
    });
    assert.equal(response.status, 200);
    const echo = json<Echo>(response);
    assert.equal(
      single(echo.headers, "x-forwarded-for"),
      "198.51.100.1, 203.0.113.7, 127.0.0.2, 127.0.0.1",
    );
    assert.equal(single(echo.headers, "x-real-ip"), "203.0.113.7");
  });
});

Deno.test("proxy request id: a valid inbound X-Request-Id is forwarded and echoed", async () => {
  await withProxyEdge({ edit: withLegacyHeaders }, async (p) => {
    const response = await p.send({ path: "/api/echo", headers: [["X-Request-Id", "abc-123"]] });
    assert.equal(response.status, 200);
    const echo = json<Echo>(response);
    assert.equal(single(echo.headers, "x-request-id"), "abc-123");
    assert.equal(single(echo.headers, "x-portcullis-request-id"), "abc-123");
    // The upstream answered X-Request-Id: upstream-id; the client sees its own id, once.
    assert.equal(response.headers["x-request-id"], "abc-123");
  });
});

Deno.test("proxy request id: an invalid inbound X-Request-Id is replaced by a minted one", async () => {
  await withProxyEdge({ edit: withLegacyHeaders }, async (p) => {
    for (const bad of ["x".repeat(200), "has\ttab inside\t"]) {
      const response = await p.send({ path: "/api/echo", headers: [["X-Request-Id", bad]] });
      assert.equal(response.status, 200);
      const echo = json<Echo>(response);
      const minted = single(echo.headers, "x-request-id");
      assert.match(minted, UUID);
      assert.equal(single(echo.headers, "x-portcullis-request-id"), minted);
      assert.equal(response.headers["x-request-id"], minted);
    }
  });
});

Deno.test("proxy response headers: upstream identity dropped, request id replaced, Set-Cookie kept apart", async () => {
  await withProxyEdge({}, async (p) => {
    const raw = await exchange(
      p.t.ports.public,
      renderRequest({ path: "/api/echo", headers: [["Host", SHOP], ["X-Request-Id", "r-77"]] }),
    );
    const head = raw.slice(0, raw.indexOf("\r\n\r\n")).split("\r\n");
    assert.match(head[0], /^HTTP\/1\.1 200 /);
    const lines = (name: string) =>
      head.slice(1).filter((line) => line.toLowerCase().startsWith(`${name}:`))
        .map((line) => line.slice(name.length + 1).trim());
    assert.deepEqual(lines("set-cookie"), ["a=1", "b=2"]);
    assert.deepEqual(lines("x-request-id"), ["r-77"]);
    assert.deepEqual(lines("x-portcullis-tenant"), []);
    assert.deepEqual(lines("content-type"), ["application/json"]);
  });
});
