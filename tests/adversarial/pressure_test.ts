/**
 * Adversarial pressure: slow heads and slow bodies are closed at their timeouts, a flood above
 * the public lane's slots is answered with typed 429/503 envelopes while both health lanes keep
 * answering, an oversized body is cut off mid-stream with a 413, and a client cannot evade the
 * per-client rate limit by forging X-Forwarded-For.
 *
 * @module
 */
import assert from "node:assert/strict";
import { parseResponses, type RawResponse, readUntilClosed } from "../fixtures/http_client.ts";
import { type Arena, arenaTest, HEADER_MS, healthOf, pause, REQUEST_MS, SHOP } from "./arena.ts";

/** Slack for the server's timer checks and scheduling on a loaded two-core machine. */
const SLACK_MS = 3000;

/** Opens a raw connection to the public lane. */
function connect(arena: Arena): Promise<Deno.TcpConn> {
  return Deno.connect({ hostname: "127.0.0.1", port: arena.ports.public });
}

/** Writes text, ignoring a connection the gateway already closed. */
async function write(conn: Deno.Conn, text: string): Promise<boolean> {
  try {
    await conn.write(new TextEncoder().encode(text));
    return true;
  } catch {
    return false;
  }
}

/** The overload and policy codes a refused flood request may carry. */
const FLOOD_CODES = new Set([
  "lane_pool_full",
  "aggregate_full",
  "per_connection_limit",
  "byte_budget",
]);

arenaTest("adversarial: pressure", {
  policies: {
    caps: { max_body_bytes: 4096 },
    rate_limit: { per_second: 1, burst: 3 },
  },
}, {
  "slowloris: a head trickled byte by byte is closed at the header timeout": async (arena) => {
    const conn = await connect(arena);
    const reading = readUntilClosed(conn, HEADER_MS + SLACK_MS * 2);
    const head = `GET /api/echo HTTP/1.1\r\nHost: ${SHOP}\r\nX-Slow: `;
    let sent = 0;
    const started = performance.now();
    for (const char of head + "a".repeat(100)) {
      if (!await write(conn, char)) break;
      sent++;
      await pause(50);
      if (performance.now() - started > HEADER_MS + SLACK_MS) break;
    }
    const { text, ms } = await reading;
    assert.ok(ms < HEADER_MS + SLACK_MS * 2, `closed after ${Math.round(ms)} ms`);
    assert.ok(sent < head.length + 100, "the gateway stopped reading before the head was sent");
    if (text !== "") assert.equal(parseResponses(text)[0].status, 408, text);
    assert.deepEqual(arena.upstream.heads, []);
  },

  "slow body: a body that stops arriving is closed at the request timeout": async (arena) => {
    const conn = await connect(arena);
    const started = performance.now();
    await write(
      conn,
      `POST /api/echo HTTP/1.1\r\nHost: ${SHOP}\r\nContent-Length: 100\r\n\r\n0123456789`,
    );
    const { ms } = await readUntilClosed(conn, REQUEST_MS + SLACK_MS * 2);
    assert.ok(performance.now() - started < REQUEST_MS + SLACK_MS * 2, `closed after ${ms} ms`);
    assert.equal(arena.upstream.seen.length, 0, "no complete request reached the upstream");
  },

  "oversized body: a chunked upload over max_body_bytes is cut off with a 413": async (arena) => {
    const conn = await connect(arena);
    const chunk = `400\r\n${"z".repeat(1024)}\r\n`;
    await write(
      conn,
      `POST /api/echo HTTP/1.1\r\nHost: ${SHOP}\r\nTransfer-Encoding: chunked\r\n\r\n`,
    );
    for (let i = 0; i < 8; i++) {
      if (!await write(conn, chunk)) break;
      await pause(10);
    }
    const { text } = await readUntilClosed(conn, 5000);
    const [response] = parseResponses(text, ["POST"]);
    assert.equal(response.status, 413, text);
    assert.equal(JSON.parse(response.body).error.code, "payload_too_large");
    assert.equal(response.headers.connection, "close");
    assert.equal(arena.upstream.seen.length, 0, "the upstream never got a complete body");
  },

  "oversized body: a declared Content-Length over the cap is 413 before the upstream": async (
    arena,
  ) => {
    const text = await arena.raw(
      `POST /api/echo HTTP/1.1\r\nHost: ${SHOP}\r\nContent-Length: 999999\r\n\r\nabc`,
    );
    const [response] = parseResponses(text, ["POST"]);
    assert.equal(response.status, 413);
    assert.deepEqual(arena.upstream.heads, []);
  },

  "X-Forwarded-For from an untrusted peer does not evade the per-client rate limit": async (
    arena,
  ) => {
    // Earlier cases spent part of this client's budget: drain the rest, each request from a
    // different forged address.
    const statuses: number[] = [];
    for (let i = 0; i < 6; i++) {
      const response = await arena.send({
        path: "/api/echo",
        headers: [["X-Forwarded-For", `198.51.100.${i}`], ["X-Real-IP", `198.51.100.${i}`]],
      });
      statuses.push(response.status);
      if (response.status === 429) {
        assert.ok(Number(response.headers["retry-after"]) >= 1);
        assert.equal(response.headers["ratelimit-remaining"], "0");
      }
    }
    assert.ok(statuses.includes(429), `forged addresses got a fresh budget: ${statuses}`);
    assert.equal(arena.upstream.seen.length, statuses.filter((s) => s === 200).length);
  },
});

arenaTest("adversarial: flood above the public slots", {}, {
  "a flood is refused with typed envelopes while both health lanes answer": async (arena) => {
    // The public lane holds 10 slots (16 less the health reserves); send 40 slow requests at once.
    const flood = Array.from(
      { length: 40 },
      () => arena.send({ path: "/api/slow/1500" }).catch((error) => error as Error),
    );
    await pause(400);
    const health = await Promise.all([
      healthOf(arena.ports.local_health),
      healthOf(arena.ports.provider_health),
    ]);
    const ledger = await arena.gateway.ledger();
    const results = await Promise.all(flood);
    assert.deepEqual(health, [200, 200], "both health lanes answered during the flood");
    assert.ok(ledger.lanes.public.in_use <= ledger.lanes.public.max_slots);

    const responses = results.filter((r): r is RawResponse => !(r instanceof Error));
    assert.equal(responses.length, 40, "every flood request was answered");
    const served = responses.filter((r) => r.status === 200).length;
    const refused = responses.filter((r) => r.status !== 200);
    assert.ok(refused.length > 0, "the flood exceeded the lane");
    for (const response of refused) {
      assert.ok([429, 503].includes(response.status), `status ${response.status}`);
      const code = JSON.parse(response.body).error.code;
      assert.ok(FLOOD_CODES.has(code), `code ${code}`);
    }
    assert.equal(arena.upstream.seen.length, served, "only admitted requests reached upstream");
  },
});
