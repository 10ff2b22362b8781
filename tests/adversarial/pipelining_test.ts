/**
 * Pipelining as a flood, as an attacker found it: 60 connections × 2,000 pipelined GETs, written
 * and closed at once, left `local_health` and `provider_health` unanswered for 11–13 s, and the
 * gateway answered every request beyond the per-connection bound with a 429 nobody read.
 *
 * Now the public lane runs in its own request worker even with `workers: 1`, a request beyond a
 * connection's `per_connection` bound waits (unadmitted, the socket not read further) instead of
 * being answered, whatever waits is dropped when the client leaves, and a connection's request
 * rate can be capped. Each case checks the client's view, the upstream's, and the ledger's.
 *
 * @module
 */
import assert from "node:assert/strict";
import { parseResponses, request } from "../fixtures/http_client.ts";
import { arenaTest, SHOP } from "./arena.ts";

/** The public lane's counter `name` from `/metrics`. */
async function metric(port: number, name: string): Promise<number> {
  const text = (await request(port, { path: "/metrics" })).body;
  const line = text.split("\n").find((l) => l.startsWith(`portcullis_${name}{lane="public"}`));
  return Number(line?.split(" ").at(-1) ?? NaN);
}

/**
 * Writes `bytes` on a new connection, ends its side (FIN, so the gateway reads every byte), and
 * goes away 100 ms later without having read anything.
 */
async function fireAndLeave(port: number, bytes: Uint8Array): Promise<void> {
  const conn = await Deno.connect({ hostname: "127.0.0.1", port });
  try {
    let offset = 0;
    while (offset < bytes.byteLength) offset += await conn.write(bytes.subarray(offset));
    await conn.closeWrite();
    await new Promise((resolve) => setTimeout(resolve, 100));
  } catch {
    /* the gateway may close first */
  } finally {
    conn.close();
  }
}

/** A probe of a protected lane, answered within `ms` or failed. */
async function probe(port: number, path: string, ms: number): Promise<number> {
  const answer = request(port, { path }).then((r) => r.status, () => 0);
  const late = new Promise<number>((resolve) => setTimeout(() => resolve(-1), ms));
  return await Promise.race([answer, late]);
}

const CONNECTIONS = 60;
const PIPELINED = 2000;

arenaTest("adversarial: a pipelined flood", {}, {
  "protected lanes answer throughout; nothing is done for clients that left": async (arena) => {
    const one = `GET /api/echo HTTP/1.1\r\nHost: ${SHOP}\r\n\r\n`;
    const flood = new TextEncoder().encode(one.repeat(PIPELINED));
    const floods = Array.from(
      { length: CONNECTIONS },
      () => fireAndLeave(arena.ports.public, flood),
    );
    // While the flood is parsed and abandoned, both protected lanes keep answering.
    const probes: number[] = [];
    for (let i = 0; i < 5; i++) {
      probes.push(await probe(arena.ports.provider_health, "/healthz", 5000));
      probes.push(await probe(arena.ports.local_health, "/healthz", 5000));
    }
    await Promise.all(floods);
    assert.deepEqual(probes, Array(10).fill(200), "every probe answered within 5 s");

    const ledger = await arena.gateway.ledgerWhen((r) => r.outstanding === 0);
    const lane = ledger.lanes.public;
    assert.equal(lane.overload.per_connection_limit, 0, "no 429 was written for anyone");
    // At most a few per connection were ever admitted: the rest waited and were dropped.
    assert.ok(
      lane.admitted <= CONNECTIONS * 64,
      `admitted ${lane.admitted} of ${CONNECTIONS * PIPELINED}`,
    );
    assert.ok(arena.upstream.heads.length <= lane.admitted, "the upstream saw no more");
    assert.equal(ledger.lanes.local_health.overload.lane_pool_full, 0);
  },

  "requests waiting when their client leaves are dropped unserved, and counted": async (arena) => {
    const before = await metric(arena.ports.local_health, "pipelined_abandoned_total");
    const earlier = await arena.gateway.ledgerWhen((r) => r.outstanding === 0);
    // per_connection (8) slow ones in flight, 30 more waiting behind them.
    const bytes = `GET /api/slow/2000 HTTP/1.1\r\nHost: ${SHOP}\r\n\r\n`.repeat(8) +
      `GET /api/echo HTTP/1.1\r\nHost: ${SHOP}\r\n\r\n`.repeat(30);
    const conn = await Deno.connect({ hostname: "127.0.0.1", port: arena.ports.public });
    await conn.write(new TextEncoder().encode(bytes));
    const until = Date.now() + 5000;
    while (arena.upstream.heads.length < 8 && Date.now() < until) {
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    assert.equal(arena.upstream.heads.length, 8, "the eight in flight reached the upstream");
    conn.close();
    const ledger = await arena.gateway.ledgerWhen((r) => r.outstanding === 0);
    const admitted = ledger.lanes.public.admitted - earlier.lanes.public.admitted;
    assert.equal(admitted, 8, "the waiting thirty were never admitted");
    assert.equal(ledger.cancelled - earlier.cancelled, 8, "the eight were cancelled: client gone");
    const after = await metric(arena.ports.local_health, "pipelined_abandoned_total");
    assert.equal(after - before, 30);
    assert.deepEqual(arena.upstream.heads.filter((h) => h.includes("/echo")), []);
  },

  "pipelined requests beyond per_connection wait and are answered in order": async (arena) => {
    const bytes = Array.from(
      { length: 20 },
      (_, i) =>
        `GET /api/echo/${i} HTTP/1.1\r\nHost: ${SHOP}\r\n${
          i === 19 ? "Connection: close\r\n" : ""
        }\r\n`,
    ).join("");
    const text = await arena.raw(bytes, 10_000);
    const urls = [...text.matchAll(/"url":"([^"]*)"/g)].map((m) => m[1]);
    assert.deepEqual(urls, Array.from({ length: 20 }, (_, i) => `/echo/${i}`));
    const ledger = await arena.gateway.ledgerWhen((r) => r.outstanding === 0);
    assert.equal(ledger.lanes.public.overload.per_connection_limit, 0);
  },

  "a connection with more than 64 requests waiting is closed": async (arena) => {
    const earlier = await arena.gateway.ledgerWhen((r) => r.outstanding === 0);
    // One slow request in front; then requests small enough that one parse slice (2 KiB) holds
    // more than 64 of them, all waiting behind the eight admitted.
    const bytes = `GET /api/slow/300 HTTP/1.1\r\nHost: ${SHOP}\r\n\r\n` +
      "GET /a HTTP/1.1\r\nHost:s\r\n\r\n".repeat(100);
    const text = await arena.raw(bytes, 10_000);
    assert.equal(text, "", "closed before any answer");
    const ledger = await arena.gateway.ledgerWhen((r) => r.outstanding === 0);
    const admitted = ledger.lanes.public.admitted - earlier.lanes.public.admitted;
    assert.ok(admitted <= 8, `admitted ${admitted}`);
    assert.ok(arena.upstream.heads.length <= 1, `upstream saw ${arena.upstream.heads.length}`);
  },
});

arenaTest("adversarial: one connection's request rate", {
  edit: (config) => {
    (config.ledger as Record<string, unknown>).connection_rate = { per_second: 1, burst: 5 };
  },
}, {
  "the burst is served, then a 429 connection_rate closes the connection": async (arena) => {
    const bytes = `GET /api/echo HTTP/1.1\r\nHost: ${SHOP}\r\n\r\n`.repeat(20);
    const text = await arena.raw(bytes, 10_000);
    const statuses = parseResponses(text).map((r) => r.status);
    assert.deepEqual(statuses, [200, 200, 200, 200, 200, 429], text.slice(-400));
    assert.match(text, /"code":"connection_rate"/);
    assert.match(text, /\r\nretry-after: \d+\r\n/i);
    assert.equal(arena.upstream.heads.length, 5, "the upstream saw the burst and no more");
    const ledger = await arena.gateway.ledgerWhen((r) => r.outstanding === 0);
    assert.equal(ledger.lanes.public.overload.connection_rate, 1);
    // A new connection has its own bucket.
    assert.equal((await arena.send({ path: "/api/echo" })).status, 200);
  },
});
