/**
 * Adversarial request framing: the ambiguities request smuggling is built on. Every ambiguous
 * request is refused with 400 before anything reaches the upstream, and bytes smuggled behind it
 * are never served; an honest body reaches the upstream exactly as declared.
 *
 * @module
 */
import assert from "node:assert/strict";
import { parseResponses } from "../fixtures/http_client.ts";
import { type Arena, arenaTest, SHOP } from "./arena.ts";

/** A smuggled request hidden behind the framing under test. */
const SMUGGLED = `GET /api/smuggled HTTP/1.1\r\nHost: ${SHOP}\r\n\r\n`;

/** Sends `bytes`; expects a single 400 envelope and that nothing reached the upstream. */
async function refused(arena: Arena, bytes: string): Promise<void> {
  const text = await arena.raw(bytes);
  const responses = parseResponses(text, ["POST"]);
  assert.equal(responses.length, 1, `one response, then close: ${JSON.stringify(text)}`);
  assert.equal(responses[0].status, 400, text);
  assert.equal(JSON.parse(responses[0].body).error.code, "bad_request");
  assert.deepEqual(arena.upstream.heads, [], "nothing reached the upstream");
}

arenaTest("adversarial: request framing", {}, {
  "Content-Length with Transfer-Encoding (CL.TE) is 400, nothing smuggled": async (arena) => {
    await refused(
      arena,
      `POST /api/echo HTTP/1.1\r\nHost: ${SHOP}\r\nContent-Length: 6\r\n` +
        `Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n${SMUGGLED}`,
    );
  },

  "Transfer-Encoding before Content-Length (TE.CL) is 400": async (arena) => {
    await refused(
      arena,
      `POST /api/echo HTTP/1.1\r\nHost: ${SHOP}\r\nTransfer-Encoding: chunked\r\n` +
        `Content-Length: 3\r\n\r\n5\r\nhello\r\n0\r\n\r\n`,
    );
  },

  "conflicting Content-Length fields are 400": async (arena) => {
    await refused(
      arena,
      `POST /api/echo HTTP/1.1\r\nHost: ${SHOP}\r\nContent-Length: 5\r\nContent-Length: 7\r\n\r\n` +
        "hello..",
    );
  },

  "identical duplicate Content-Length fields are 400 too": async (arena) => {
    await refused(
      arena,
      `POST /api/echo HTTP/1.1\r\nHost: ${SHOP}\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n` +
        "hello",
    );
  },

  "a Content-Length list in one field is 400": async (arena) => {
    await refused(
      arena,
      `POST /api/echo HTTP/1.1\r\nHost: ${SHOP}\r\nContent-Length: 5, 5\r\n\r\nhello`,
    );
  },

  "a non-numeric or signed Content-Length is 400": async (arena) => {
    for (const value of ["+5", "-1", "0x5", "5 5"]) {
      await refused(
        arena,
        `POST /api/echo HTTP/1.1\r\nHost: ${SHOP}\r\nContent-Length: ${value}\r\n\r\nhello`,
      );
    }
  },

  "an invalid chunk size never delivers a request upstream": async (arena) => {
    for (const size of ["zz", "fffffffffffffffffff", "-5", "5 ;"]) {
      const text = await arena.raw(
        `POST /api/echo HTTP/1.1\r\nHost: ${SHOP}\r\nTransfer-Encoding: chunked\r\n\r\n` +
          `${size}\r\nhello\r\n0\r\n\r\n`,
      );
      const [response] = parseResponses(text, ["POST"]);
      // The head may already be on its way upstream: the gateway must cut that exchange off
      // (a 400, or a close), and the upstream must never receive a complete request.
      assert.ok(response === undefined || response.status === 400, `${size}: ${text}`);
      assert.equal(arena.upstream.seen.length, 0, `${size}: the upstream got a whole request`);
    }
  },

  "a Transfer-Encoding other than chunked is 400": async (arena) => {
    for (const coding of ["xchunked", "chunked, identity", "gzip"]) {
      await refused(
        arena,
        `POST /api/echo HTTP/1.1\r\nHost: ${SHOP}\r\nTransfer-Encoding: ${coding}\r\n\r\n` +
          "5\r\nhello\r\n0\r\n\r\n",
      );
    }
  },

  "whitespace before a header's colon is 400": async (arena) => {
    await refused(
      arena,
      `POST /api/echo HTTP/1.1\r\nHost: ${SHOP}\r\nContent-Length : 5\r\n\r\nhello`,
    );
  },

  "a folded (obs-fold) header line is 400": async (arena) => {
    await refused(
      arena,
      `GET /api/echo HTTP/1.1\r\nHost: ${SHOP}\r\nX-Long: a\r\n  folded\r\n\r\n`,
    );
  },

  "bytes beyond Content-Length are never forwarded as body": async (arena) => {
    const text = await arena.raw(
      `POST /api/echo HTTP/1.1\r\nHost: ${SHOP}\r\nContent-Length: 5\r\n\r\nhelloGARBAGE\r\n\r\n`,
    );
    // The parser reads the whole buffer at once: the leftover bytes are a malformed second
    // request, and the connection is refused with a 400 (the first exchange may or may not have
    // been answered first). Whatever reached the upstream carried exactly the declared body.
    const responses = parseResponses(text, ["POST", "GET"]);
    assert.equal(responses.at(-1)?.status, 400, text);
    // A first exchange may still be on its way upstream: let it finish inside this case.
    await arena.gateway.ledgerWhen((r) => r.outstanding === 0);
    await new Promise((resolve) => setTimeout(resolve, 50)); // its head reaching the recorder
    for (const seen of arena.upstream.seen) assert.equal(seen.body, "hello");
    assert.ok(arena.upstream.heads.length <= 1);
  },

  "Transfer-Encoding on HTTP/1.0 is 400": async (arena) => {
    await refused(
      arena,
      `POST /api/echo HTTP/1.0\r\nHost: ${SHOP}\r\nTransfer-Encoding: chunked\r\n\r\n` +
        "5\r\nhello\r\n0\r\n\r\n",
    );
  },
});
