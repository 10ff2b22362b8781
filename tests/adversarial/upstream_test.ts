/**
 * Adversarial upstreams: refused, hung, reset mid-body, and answering with broken framing. The
 * client gets a typed 502/504 envelope that names no internal address when the upstream failed
 * before its head; once the upstream's head has come, the gateway relays what arrived intact and
 * then closes the connection, so the client's response is visibly short — never completed, never
 * re-framed. Nothing an upstream sends confuses the framing of the client connection.
 *
 * The rogue upstream pauses where a case must first see what came before (see `RogueUpstream`),
 * so each case has exactly one outcome, whatever the machine's load.
 *
 * @module
 */
import assert from "node:assert/strict";
import type { RawResponse } from "../fixtures/http_client.ts";
import { type Arena, arenaTest, PUBLIC_DEADLINE_MS, type RawClient, SHOP } from "./arena.ts";

/**
 * A route's default `attempts`: an upstream that breaks the exchange before its head is tried
 * again for a GET (retry-eligible), each attempt failing the same way.
 */
const ATTEMPTS = 3;
const RETRIED = "a GET broken before the head is tried `attempts` times, no more";

/** Slack for timers on a loaded two-core machine. */
const SLACK_MS = 3000;

/** A GET of `path` that asks the gateway to close afterwards. */
function get(path: string): string {
  return `GET ${path} HTTP/1.1\r\nHost: ${SHOP}\r\nConnection: close\r\n\r\n`;
}

/** The head (status line and fields, lower-cased names) and the raw body bytes of a reply. */
function split(text: string): { status: string; fields: [string, string][]; body: string } {
  const end = text.indexOf("\r\n\r\n");
  assert.ok(end > 0, `no complete head: ${JSON.stringify(text.slice(0, 300))}`);
  const [status, ...lines] = text.slice(0, end).split("\r\n");
  const fields = lines.map((line): [string, string] => {
    const colon = line.indexOf(":");
    return [line.slice(0, colon).toLowerCase(), line.slice(colon + 1).trim()];
  });
  return { status, fields, body: text.slice(end + 4) };
}

/** The values of field `name` in a split head. */
function field(fields: readonly [string, string][], name: string): string[] {
  return fields.filter(([n]) => n === name).map(([, value]) => value);
}

/** Waits until the client holds a whole head and `bytes` bytes after it (5 s at most). */
function bodyBytes(client: RawClient, bytes: number): Promise<boolean> {
  return client.until((text) => {
    const end = text.indexOf("\r\n\r\n");
    return end >= 0 && text.length - end - 4 >= bytes;
  }, 5000);
}

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
    assert.ok(ms >= PUBLIC_DEADLINE_MS - 200, `answered early, after ${Math.round(ms)} ms`);
    assert.ok(ms < PUBLIC_DEADLINE_MS + SLACK_MS, `answered late, after ${Math.round(ms)} ms`);
    assert.deepEqual(arena.rogue.heads, ["GET /hang HTTP/1.1"]);
  },

  "an upstream reset mid-body: its 1,000 bytes are relayed, then the client is closed short":
    async (
      arena,
    ) => {
      const client = await arena.connect();
      await client.write(get("/rogue/reset"));
      assert.ok(await bodyBytes(client, 1000), `the relayed part: ${client.text.slice(0, 300)}`);
      arena.rogue.resume(); // the upstream closes now, 99,000 bytes short
      const { text, closed } = await client.end(5000);
      assert.ok(closed, "the gateway closed the client connection");
      const { status, fields, body } = split(text);
      assert.equal(status, "HTTP/1.1 200 OK");
      assert.deepEqual(field(fields, "content-length"), ["100000"], "the declared length, once");
      assert.deepEqual(field(fields, "transfer-encoding"), [], "not re-framed as chunked");
      assert.equal(body, "r".repeat(1000), "exactly the bytes the upstream sent, nothing after");
      assert.deepEqual(arena.rogue.heads, ["GET /reset HTTP/1.1"]);
    },

  "an upstream answering with Content-Length and Transfer-Encoding is a 502": async (arena) => {
    const response = await arena.send({ path: "/rogue/clte" });
    typedFailure(arena, response, 502, "upstream_failed");
    assert.deepEqual(arena.rogue.heads, Array(ATTEMPTS).fill("GET /clte HTTP/1.1"), RETRIED);
  },

  "an upstream with two Content-Length values is a 502": async (arena) => {
    const response = await arena.send({ path: "/rogue/twolengths" });
    typedFailure(arena, response, 502, "upstream_failed");
    assert.deepEqual(arena.rogue.heads, Array(ATTEMPTS).fill("GET /twolengths HTTP/1.1"), RETRIED);
  },

  "an invalid first chunk size (with the head) closes the client with no response at all": async (
    arena,
  ) => {
    // The upstream's head and its broken first chunk arrive together. The response had begun
    // (stream.ts: broken after its head, so no 502), but the gateway had not yet sent a byte of
    // it: the client connection is closed empty rather than given a head for a body that cannot
    // come.
    const { text, closed } = await arena.talk(get("/rogue/badchunk"), 5000);
    assert.ok(closed, "the gateway closed the client connection");
    assert.equal(text, "", "nothing relayed: no head, no bytes of the bad chunk");
    assert.deepEqual(arena.rogue.heads, ["GET /badchunk HTTP/1.1"]);
  },

  "an invalid later chunk size: the first chunk is relayed, then the client is closed short":
    async (
      arena,
    ) => {
      const client = await arena.connect();
      await client.write(get("/rogue/badchunk-later"));
      assert.ok(
        await client.until((text) => text.endsWith("\r\n\r\n5\r\nhello\r\n"), 5000),
        `the first chunk: ${JSON.stringify(client.text)}`,
      );
      arena.rogue.resume(); // now the broken chunk size
      const { text, closed } = await client.end(5000);
      assert.ok(closed, "the gateway closed the client connection");
      const { status, fields, body } = split(text);
      assert.equal(status, "HTTP/1.1 200 OK");
      assert.deepEqual(field(fields, "transfer-encoding"), ["chunked"]);
      assert.deepEqual(field(fields, "content-length"), []);
      assert.equal(body, "5\r\nhello\r\n", "the good chunk, then no terminating chunk");
      assert.deepEqual(arena.rogue.heads, ["GET /badchunk-later HTTP/1.1"]);
    },

  "after all of that, an honest upstream is still served": async (arena) => {
    const response = await arena.send({ path: "/api/echo" });
    assert.equal(response.status, 200);
    assert.equal(JSON.parse(response.body).url, "/echo");
    assert.deepEqual(arena.upstream.heads, ["GET /echo"]);
    assert.equal(arena.upstream.seen.length, 1);
  },
});
