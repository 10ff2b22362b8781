/**
 * Adversarial upstreams: refused, hung, reset mid-body, and answering with broken framing. The
 * client always gets a typed 502/504 envelope that names no internal address, or — once a
 * response has started — a connection the gateway closes early instead of a body it could
 * mistake for complete. Nothing an upstream sends confuses the framing of the client connection.
 *
 * @module
 */
import assert from "node:assert/strict";
import { parseResponses, type RawResponse } from "../fixtures/http_client.ts";
import { type Arena, arenaTest, PUBLIC_DEADLINE_MS, SHOP } from "./arena.ts";

/** Asserts a failure envelope whose body mentions no loopback address or test port. */
function typedFailure(arena: Arena, response: RawResponse, status: number, code: string): void {
  assert.equal(response.status, status, response.body);
  const error = JSON.parse(response.body).error;
  assert.equal(error.code, code);
  for (const leak of ["127.0.0.1", String(arena.rogue.port), String(arena.upstream.port)]) {
    assert.ok(!response.body.includes(leak), `the envelope leaks ${leak}`);
  }
}

arenaTest("adversarial: upstreams", {}, {
  "a refused upstream is a 502 envelope": async (arena) => {
    const response = await arena.send({ path: "/refused/x" });
    typedFailure(arena, response, 502, "upstream_unreachable");
  },

  "a hung upstream is a 504 at the lane deadline, and the upstream saw the request": async (
    arena,
  ) => {
    const started = performance.now();
    const response = await arena.send({ path: "/rogue/hang" });
    const ms = performance.now() - started;
    typedFailure(arena, response, 504, "upstream_timeout");
    assert.ok(ms >= PUBLIC_DEADLINE_MS - 200, `answered after ${Math.round(ms)} ms`);
    assert.deepEqual(arena.rogue.heads, ["GET /hang HTTP/1.1"]);
  },

  "an upstream reset mid-body never looks complete to the client": async (arena) => {
    const text = await arena.raw(
      `GET /rogue/reset HTTP/1.1\r\nHost: ${SHOP}\r\nConnection: close\r\n\r\n`,
      8000,
    );
    const head = text.slice(0, text.indexOf("\r\n\r\n"));
    assert.match(head, /^HTTP\/1\.1 200/);
    const declared = Number(/content-length: *(\d+)/i.exec(head)?.[1]);
    const body = text.length - head.length - 4;
    assert.equal(declared, 100_000, "the declared length is relayed");
    assert.ok(body < declared, `got ${body} of ${declared} bytes, then the close`);
    assert.deepEqual(arena.rogue.heads, ["GET /reset HTTP/1.1"]);
  },

  "an upstream answering with Content-Length and Transfer-Encoding is a 502": async (arena) => {
    const response = await arena.send({ path: "/rogue/clte" });
    typedFailure(arena, response, 502, "upstream_failed");
  },

  "an upstream with two Content-Length values is a 502": async (arena) => {
    const response = await arena.send({ path: "/rogue/twolengths" });
    typedFailure(arena, response, 502, "upstream_failed");
  },

  "an upstream's invalid chunk size ends the client's response early, never re-framed": async (
    arena,
  ) => {
    const text = await arena.raw(
      `GET /rogue/badchunk HTTP/1.1\r\nHost: ${SHOP}\r\nConnection: close\r\n\r\n`,
      8000,
    );
    // The broken chunk aborts the exchange: the client gets a 502 when nothing was sent yet,
    // or a response cut off without its terminating chunk, or (when the head and the bad
    // chunk arrived together) a close with no response at all — never "hello" as a body.
    assert.ok(!text.includes("hello"), `bytes after the bad chunk size were relayed: ${text}`);
    if (/^HTTP\/1\.1 502/.test(text)) {
      typedFailure(arena, parseResponses(text)[0], 502, "upstream_failed");
    } else if (text !== "") {
      assert.match(text, /^HTTP\/1\.1 200/);
      assert.ok(!text.endsWith("0\r\n\r\n"), `the body was terminated as complete: ${text}`);
    }
    assert.deepEqual(arena.rogue.heads, ["GET /badchunk HTTP/1.1"]);
  },

  "after all of that, an honest upstream is still served": async (arena) => {
    const response = await arena.send({ path: "/api/echo" });
    assert.equal(response.status, 200);
    assert.equal(arena.upstream.seen.length, 1);
  },
});
