/**
 * Adversarial heads: Host confusion, absolute-form targets, hop-by-hop abuse, forged forwarding
 * and identity headers, oversized heads. The gateway routes and forwards with one authority only,
 * never lets a client delete or forge what it adds, and refuses heads over its caps before
 * anything reaches the upstream.
 *
 * @module
 */
import assert from "node:assert/strict";
import { parseResponses } from "../fixtures/http_client.ts";
import type { SeenRequest } from "../fixtures/upstream.ts";
import { type Arena, arenaTest, headerValues, SHOP } from "./arena.ts";
import { withLegacyHeaders } from "../fixtures/named_headers.ts";

/** Expects an envelope with `status` and `code`, and that nothing reached the upstream. */
async function refusedBefore(
  arena: Arena,
  bytes: string,
  status: number,
  code: string,
): Promise<void> {
  const text = await arena.raw(bytes);
  const [response] = parseResponses(text);
  assert.equal(response?.status, status, text);
  assert.equal(JSON.parse(response.body).error.code, code);
  assert.deepEqual(arena.upstream.heads, [], "nothing reached the upstream");
}

/** The one request the upstream received. */
function onlySeen(arena: Arena): SeenRequest {
  assert.equal(arena.upstream.seen.length, 1, "the upstream received exactly one request");
  return arena.upstream.seen[0];
}

/** Every value the upstream received for `name` (any case, `_` for `-`). */
function upstreamGot(arena: Arena, name: string): string[] {
  return headerValues(onlySeen(arena).rawHeaders, name);
}

arenaTest("adversarial: request heads", { edit: withLegacyHeaders }, {
  "a missing Host on HTTP/1.1 is 400": async (arena) => {
    await refusedBefore(arena, "GET /api/echo HTTP/1.1\r\n\r\n", 400, "bad_request");
  },

  "two Host fields are 400, even when they agree": async (arena) => {
    await refusedBefore(
      arena,
      `GET /api/echo HTTP/1.1\r\nHost: ${SHOP}\r\nHost: ${SHOP}\r\n\r\n`,
      400,
      "bad_request",
    );
  },

  "a Host that is not a host name is 400": async (arena) => {
    for (const host of [`${SHOP}/evil`, `${SHOP}@evil.test`, "shop test", `${SHOP}:x`]) {
      await refusedBefore(
        arena,
        `GET /api/echo HTTP/1.1\r\nHost: ${host}\r\n\r\n`,
        400,
        "bad_request",
      );
    }
  },

  "an absolute-form target naming another host than Host is 400": async (arena) => {
    await refusedBefore(
      arena,
      `GET http://evil.test/api/echo HTTP/1.1\r\nHost: ${SHOP}\r\n\r\n`,
      400,
      "bad_request",
    );
  },

  "an absolute-form target for the Host's tenant routes and forwards with one authority": async (
    arena,
  ) => {
    const text = await arena.raw(
      `GET http://${SHOP}/api/echo?x=1 HTTP/1.1\r\nHost: ${SHOP}\r\nConnection: close\r\n\r\n`,
    );
    assert.equal(parseResponses(text)[0].status, 200);
    const seen = onlySeen(arena);
    assert.equal(seen.url, "/echo?x=1", "origin-form upstream, path from the target");
    assert.deepEqual(headerValues(seen.rawHeaders, "host"), [`127.0.0.1:${arena.upstream.port}`]);
    assert.deepEqual(headerValues(seen.rawHeaders, "x-forwarded-host"), [SHOP]);
  },

  "an unknown Host is 421 and reaches no upstream": async (arena) => {
    await refusedBefore(
      arena,
      "GET /api/echo HTTP/1.1\r\nHost: other.test\r\nConnection: close\r\n\r\n",
      421,
      "misdirected_request",
    );
  },

  "Connection naming X-Forwarded-For and identity headers cannot delete what the gateway adds":
    async (arena) => {
      const response = await arena.send({
        path: "/api/echo",
        headers: [[
          "Connection",
          "close, X-Forwarded-For, X-Real-IP, X-Portcullis-Tenant, X-Request-Id, Host",
        ]],
      });
      assert.equal(response.status, 200);
      assert.deepEqual(upstreamGot(arena, "x-forwarded-for"), ["127.0.0.1"]);
      assert.deepEqual(upstreamGot(arena, "x-real-ip"), ["127.0.0.1"]);
      assert.deepEqual(upstreamGot(arena, "x-portcullis-tenant"), [SHOP]);
      assert.equal(upstreamGot(arena, "x-request-id").length, 1);
      assert.equal(upstreamGot(arena, "host").length, 1);
      assert.deepEqual(upstreamGot(arena, "connection"), ["keep-alive"]);
    },

  "Upgrade: h2c on an ordinary request is served as HTTP/1.1, the upgrade not forwarded": async (
    arena,
  ) => {
    const response = await arena.send({
      path: "/api/echo",
      headers: [
        ["Connection", "Upgrade, HTTP2-Settings"],
        ["Upgrade", "h2c"],
        ["HTTP2-Settings", "AAMAAABkAARAAAAAAAIAAAAA"],
      ],
    });
    assert.equal(response.status, 200);
    assert.deepEqual(upstreamGot(arena, "upgrade"), []);
    assert.deepEqual(upstreamGot(arena, "http2-settings"), []);
    assert.deepEqual(upstreamGot(arena, "connection"), ["keep-alive"]);
  },

  "Upgrade: h2c with a body is 400 (the body would be left unread)": async (arena) => {
    await refusedBefore(
      arena,
      `POST /api/echo HTTP/1.1\r\nHost: ${SHOP}\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n` +
        "Content-Length: 5\r\n\r\nhello",
      400,
      "bad_request",
    );
  },

  "101 header fields are 431 before the upstream": async (arena) => {
    const fields = Array.from({ length: 101 }, (_, i) => `X-F${i}: v\r\n`).join("");
    await refusedBefore(
      arena,
      `GET /api/echo HTTP/1.1\r\nHost: ${SHOP}\r\nConnection: close\r\n${fields}\r\n`,
      431,
      "header_fields_too_large",
    );
  },

  "a head over the header byte cap is 431": async (arena) => {
    await refusedBefore(
      arena,
      `GET /api/echo HTTP/1.1\r\nHost: ${SHOP}\r\nX-Big: ${"b".repeat(20_000)}\r\n\r\n`,
      431,
      "header_fields_too_large",
    );
  },

  "a target over the URL cap is 414": async (arena) => {
    await refusedBefore(
      arena,
      `GET /api/${"u".repeat(9000)} HTTP/1.1\r\nHost: ${SHOP}\r\nConnection: close\r\n\r\n`,
      414,
      "uri_too_long",
    );
  },

  "X-Forwarded-For, Forwarded and X-Real-IP from an untrusted peer are replaced": async (arena) => {
    const response = await arena.send({
      path: "/api/echo",
      headers: [
        ["X-Forwarded-For", "1.2.3.4, 10.0.0.1"],
        ["Forwarded", "for=1.2.3.4;proto=https;host=bank.test"],
        ["X-Real-IP", "1.2.3.4"],
        ["X-Forwarded-Proto", "https"],
        ["X-Forwarded-Host", "bank.test"],
      ],
    });
    assert.equal(response.status, 200);
    assert.deepEqual(upstreamGot(arena, "x-forwarded-for"), ["127.0.0.1"]);
    assert.deepEqual(upstreamGot(arena, "x-real-ip"), ["127.0.0.1"]);
    assert.deepEqual(upstreamGot(arena, "forwarded"), []);
    assert.deepEqual(upstreamGot(arena, "x-forwarded-proto"), ["http"]);
    assert.deepEqual(upstreamGot(arena, "x-forwarded-host"), [SHOP]);
  },

  "identity headers in any case and with underscores never reach the upstream forged": async (
    arena,
  ) => {
    const response = await arena.send({
      path: "/api/echo",
      headers: [
        ["x-portcullis-tenant", "bank.test"],
        ["X-PORTCULLIS-ROUTE", "admin"],
        ["X_Portcullis_Tenant", "bank.test"],
        ["X-Portcullis_Request-Id", "forged"],
        ["X-Portcullis-Admin", "true"],
        ["X_Forwarded_For", "1.2.3.4"],
      ],
    });
    assert.equal(response.status, 200);
    assert.deepEqual(upstreamGot(arena, "x-portcullis-tenant"), [SHOP]);
    assert.deepEqual(upstreamGot(arena, "x-portcullis-route"), ["api"]);
    assert.deepEqual(upstreamGot(arena, "x-portcullis-admin"), []);
    assert.notDeepEqual(upstreamGot(arena, "x-portcullis-request-id"), ["forged"]);
    assert.deepEqual(upstreamGot(arena, "x-forwarded-for"), ["127.0.0.1"]);
    const names = onlySeen(arena).rawHeaders.filter((_, i) => i % 2 === 0);
    assert.ok(!names.some((n) => n.includes("_")), `underscore names forwarded: ${names}`);
  },

  "a control byte in a header value is 400 before the upstream": async (arena) => {
    await refusedBefore(
      arena,
      `GET /api/echo HTTP/1.1\r\nHost: ${SHOP}\r\nX-Request-Id: abc\x01def\r\n\r\n`,
      400,
      "bad_request",
    );
  },

  "an over-long X-Request-Id is replaced by a minted one, both ways": async (arena) => {
    const response = await arena.send({
      path: "/api/echo",
      headers: [["X-Request-Id", "a".repeat(200)]],
    });
    assert.equal(response.status, 200);
    const [id] = upstreamGot(arena, "x-request-id");
    assert.match(id, /^[0-9a-f-]{36}$/);
    assert.equal(response.headers["x-request-id"], id);
  },
});
