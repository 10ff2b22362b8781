/**
 * Adversarial request framing: the ambiguities request smuggling is built on. Every ambiguous
 * request is refused with 400 before anything reaches the upstream, and bytes smuggled behind it
 * are never served; an honest body reaches the upstream exactly as declared.
 *
 * @module
 */
import assert from "node:assert/strict";
import { parseResponses } from "../fixtures/http_client.ts";
import { type Arena, arenaTest, pause, SHOP } from "./arena.ts";

/** A smuggled request hidden behind the framing under test. */
const SMUGGLED = `GET /api/smuggled HTTP/1.1\r\nHost: ${SHOP}\r\n\r\n`;

/**
 * Sends `bytes`; expects exactly one 400 `bad_request` envelope, the connection closed by the
 * gateway, and nothing — not even a head — at the upstream.
 */
async function refused(arena: Arena, bytes: string): Promise<void> {
  const { text, closed } = await arena.talk(bytes);
  assert.ok(closed, `the gateway closed the connection: ${JSON.stringify(text)}`);
  const responses = parseResponses(text, ["POST"]);
  assert.equal(responses.length, 1, `one response, then close: ${JSON.stringify(text)}`);
  assert.equal(responses[0].status, 400, text);
  assert.equal(JSON.parse(responses[0].body).error.code, "bad_request");
  assert.equal(responses[0].headers.connection, "close");
  assert.deepEqual(arena.upstream.heads, [], "nothing reached the upstream");
}

/** Polls until the upstream has seen `count` request heads (5 s at most). */
async function headsArrived(arena: Arena, count: number): Promise<void> {
  const until = Date.now() + 5000;
  while (arena.upstream.heads.length < count && Date.now() < until) await pause(20);
  assert.equal(arena.upstream.heads.length, count, `heads ${arena.upstream.heads}`);
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

  "an invalid first chunk size (sent with the head) is 400 before anything goes upstream": async (
    arena,
  ) => {
    for (const size of ["zz", "fffffffffffffffffff", "-5", "5 ;"]) {
      await refused(
        arena,
        `POST /api/echo HTTP/1.1\r\nHost: ${SHOP}\r\nTransfer-Encoding: chunked\r\n\r\n` +
          `${size}\r\nhello\r\n0\r\n\r\n`,
      );
    }
  },

  "an invalid later chunk size is 400; the upstream got the head, never a whole request": async (
    arena,
  ) => {
    const client = await arena.connect();
    try {
      await client.write(
        `POST /api/echo HTTP/1.1\r\nHost: ${SHOP}\r\nTransfer-Encoding: chunked\r\n\r\n` +
          "5\r\nhello\r\n",
      );
      // Admitted and streaming: the head is upstream before the broken chunk size is sent.
      await headsArrived(arena, 1);
      await client.write(`zz\r\nworld\r\n0\r\n\r\n${SMUGGLED}`);
      const { text, closed } = await client.end(5000);
      assert.ok(closed, `the gateway closed the connection: ${JSON.stringify(text)}`);
      const responses = parseResponses(text, ["POST"]);
      assert.deepEqual(responses.map((r) => r.status), [400], text);
      assert.equal(JSON.parse(responses[0].body).error.code, "bad_request");
      assert.equal(responses[0].headers.connection, "close");
    } finally {
      client.close();
    }
    await arena.gateway.ledgerWhen((r) => r.outstanding === 0);
    assert.deepEqual(arena.upstream.heads, ["POST /echo"], "no smuggled request upstream");
    assert.deepEqual(arena.upstream.seen, [], "the upstream never got a complete request");
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

  "bytes beyond Content-Length are never forwarded: the request is served, then a 400": async (
    arena,
  ) => {
    const { text, closed } = await arena.talk(
      `POST /api/echo HTTP/1.1\r\nHost: ${SHOP}\r\nContent-Length: 5\r\n\r\nhelloGARBAGE\r\n\r\n`,
    );
    // The leftover bytes are a malformed second request. The request parsed before them is
    // answered first, in order; the 400 comes last and closes the connection.
    assert.ok(closed, "the gateway closed the connection");
    const responses = parseResponses(text, ["POST", "GET"]);
    assert.deepEqual(responses.map((r) => r.status), [200, 400], text);
    assert.equal(JSON.parse(responses[0].body).body, "hello", "the upstream echoed 5 bytes");
    assert.equal(JSON.parse(responses[1].body).error.code, "bad_request");
    assert.deepEqual(arena.upstream.heads, ["POST /echo"]);
    assert.deepEqual(arena.upstream.seen.map((seen) => seen.body), ["hello"]);
  },

  "an honest body — declared or chunked — reaches the upstream exactly": async (arena) => {
    const declared = await arena.talk(
      `POST /api/echo HTTP/1.1\r\nHost: ${SHOP}\r\nContent-Length: 5\r\n` +
        "Connection: close\r\n\r\nhello",
    );
    const chunked = await arena.talk(
      `POST /api/echo HTTP/1.1\r\nHost: ${SHOP}\r\nTransfer-Encoding: chunked\r\n` +
        "Connection: close\r\n\r\n2\r\nhe\r\n3\r\nllo\r\n0\r\n\r\n",
    );
    for (const { text, closed } of [declared, chunked]) {
      assert.ok(closed, "closed as the client asked");
      const responses = parseResponses(text, ["POST"]);
      assert.deepEqual(responses.map((r) => r.status), [200], text);
      assert.equal(JSON.parse(responses[0].body).body, "hello");
    }
    assert.deepEqual(arena.upstream.seen.map((seen) => seen.body), ["hello", "hello"]);
  },

  "Transfer-Encoding on HTTP/1.0 is 400": async (arena) => {
    await refused(
      arena,
      `POST /api/echo HTTP/1.0\r\nHost: ${SHOP}\r\nTransfer-Encoding: chunked\r\n\r\n` +
        "5\r\nhello\r\n0\r\n\r\n",
    );
  },
});
