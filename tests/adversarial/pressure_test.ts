/**
 * Adversarial pressure: a head that does not arrive by `header_ms` is closed without a reply (as
 * nginx closes it); a body that stops arriving is ended at `request_ms`; either one that finishes in time is
 * served. A body is cut off with a 413 one byte over `max_body_bytes` (declared, in its first chunk
 * or in a later one) and served whole at the cap. A client cannot evade the per-client rate limit
 * by forging X-Forwarded-For. A flood above the public lane's slots is answered with typed 429/503
 * envelopes while both health lanes keep answering.
 *
 * @module
 */
import assert from "node:assert/strict";
import { parseResponses, type RawResponse } from "../fixtures/http_client.ts";
import {
  type Arena,
  arenaTest,
  HEADER_MS,
  healthOf,
  pause,
  type RawClient,
  REQUEST_MS,
  SHOP,
  type Talk,
} from "./arena.ts";

/** Slack for the server's timer checks and scheduling on a loaded two-core machine. */
const SLACK_MS = 3000;
/** How early a timeout may fire as the client measures it (connect and accept are not one instant). */
const EARLY_MS = 100;
/** `shop.test`'s body cap in the body-cap arena. */
const CAP = 4096;

/** The overload and policy codes a refused flood request may carry. */
const FLOOD_CODES = new Set([
  "lane_pool_full",
  "aggregate_full",
  "per_connection_limit",
  "byte_budget",
]);

/** Asserts one envelope response and nothing after it: `status`, `code`, `Connection: close`. */
function onlyEnvelope(text: string, status: number, code: string, method = "GET"): RawResponse {
  const responses = parseResponses(text, [method]);
  assert.equal(responses.length, 1, `one response, then close: ${JSON.stringify(text)}`);
  const [response] = responses;
  assert.equal(response.status, status, text);
  assert.equal(JSON.parse(response.body).error.code, code);
  assert.equal(response.headers.connection, "close");
  return response;
}

/** Asserts the gateway closed `client` between `ms` (less a little) and `ms` plus slack. */
function closedAt(client: { closed: boolean; ms: number }, ms: number, what: string): void {
  assert.ok(client.closed, `${what}: the gateway did not close the connection`);
  const at = Math.round(client.ms);
  assert.ok(at >= ms - EARLY_MS, `${what}: closed early, after ${at} ms (limit ${ms} ms)`);
  assert.ok(at < ms + SLACK_MS, `${what}: closed late, after ${at} ms (limit ${ms} ms)`);
}

/** Polls until the upstream has seen `count` request heads (5 s at most). */
async function headsArrived(arena: Arena, count: number): Promise<void> {
  const until = Date.now() + 5000;
  while (arena.upstream.heads.length < count && Date.now() < until) await pause(20);
  assert.equal(arena.upstream.heads.length, count, `heads ${arena.upstream.heads}`);
}

/** Writes `parts` with `gapMs` between them, then waits for the reply and the close. */
async function trickle(client: RawClient, parts: readonly string[], gapMs: number): Promise<Talk> {
  for (const [i, part] of parts.entries()) {
    if (i > 0) await pause(gapMs);
    assert.ok(await client.write(part), `part ${i} was refused`);
  }
  return await client.end(5000);
}

arenaTest("adversarial: slow clients", {}, {
  "slowloris: a head trickled byte by byte is closed at header_ms, with no reply": async (
    arena,
  ) => {
    const client = await arena.connect();
    const head = `GET /api/echo HTTP/1.1\r\nHost: ${SHOP}\r\nX-Slow: ${"a".repeat(200)}`;
    // One byte every 50 ms would take 12 s; the gateway must give up at header_ms (1 s).
    let sent = 0;
    for (const char of head) {
      if (!await client.write(char)) break;
      sent++;
      await pause(50);
      if (client.ms > HEADER_MS + SLACK_MS * 2) break;
    }
    const { text } = await client.end(SLACK_MS);
    closedAt(client, HEADER_MS, "slowloris");
    assert.equal(text, "", "closed without a reply");
    assert.equal(client.failedWrites, 1, `writes kept being taken after the close (${sent} sent)`);
    assert.ok(sent < head.length, "the gateway was still reading when the head was done");
    assert.deepEqual(arena.upstream.heads, []);
  },

  "a connection that sends nothing is closed the same way at header_ms": async (arena) => {
    const client = await arena.connect();
    const { text } = await client.end(HEADER_MS + SLACK_MS);
    closedAt(client, HEADER_MS, "silent");
    assert.equal(text, "", "closed without a reply");
    assert.deepEqual(arena.upstream.heads, []);
  },

  "a head trickled in pieces but complete before header_ms is served": async (arena) => {
    const client = await arena.connect();
    const { text, closed } = await trickle(client, [
      "GET /api/echo HTTP/1.1\r\n",
      `Host: ${SHOP}\r\n`,
      "Connection: close\r\n\r\n",
    ], 100);
    assert.ok(closed, "closed after the reply, as the client asked");
    const responses = parseResponses(text);
    assert.deepEqual(responses.map((r) => r.status), [200], text);
    assert.deepEqual(arena.upstream.heads, ["GET /echo"]);
  },

  "slow body: a body that stops arriving is ended at request_ms with a 400": async (arena) => {
    const client = await arena.connect();
    await client.write(
      `POST /api/echo HTTP/1.1\r\nHost: ${SHOP}\r\nContent-Length: 100\r\n\r\n0123456789`,
    );
    const { text } = await client.end(REQUEST_MS + SLACK_MS);
    closedAt(client, REQUEST_MS, "slow body");
    // The request was admitted and its head forwarded; a body that can never be complete ends
    // the request with the connection's one refusal (the runner: a broken body is a 400).
    onlyEnvelope(text, 400, "bad_request", "POST");
    assert.deepEqual(arena.upstream.heads, ["POST /echo"]);
    assert.equal(arena.upstream.seen.length, 0, "no complete request reached the upstream");
  },

  "a body that arrives slowly but whole before request_ms is served": async (arena) => {
    const client = await arena.connect();
    const { text, closed } = await trickle(client, [
      `POST /api/echo HTTP/1.1\r\nHost: ${SHOP}\r\nContent-Length: 10\r\nConnection: close\r\n\r\n`,
      "01234",
      "56789",
    ], 300);
    assert.ok(closed, "closed after the reply, as the client asked");
    const responses = parseResponses(text, ["POST"]);
    assert.deepEqual(responses.map((r) => r.status), [200], text);
    assert.deepEqual(arena.upstream.seen.map((seen) => seen.body), ["0123456789"]);
  },
});

/** A POST of `body` to the echo route, declared with Content-Length. */
function declared(body: string): string {
  return `POST /api/echo HTTP/1.1\r\nHost: ${SHOP}\r\nContent-Length: ${body.length}\r\n` +
    `Connection: close\r\n\r\n${body}`;
}

/** A chunked POST head to the echo route. */
const CHUNKED_HEAD = `POST /api/echo HTTP/1.1\r\nHost: ${SHOP}\r\nTransfer-Encoding: chunked\r\n` +
  "Connection: close\r\n\r\n";

/** One chunk of `size` bytes of `fill`. */
function chunk(size: number, fill = "z"): string {
  return `${size.toString(16)}\r\n${fill.repeat(size)}\r\n`;
}

/** Asserts a served body of exactly `size` bytes: 200 to the client, the whole body upstream. */
function servedWhole(arena: Arena, text: string, size: number): void {
  const responses = parseResponses(text, ["POST"]);
  assert.deepEqual(responses.map((r) => r.status), [200], text.slice(0, 300));
  assert.equal(arena.upstream.seen.length, 1);
  assert.equal(arena.upstream.seen[0].body.length, size);
}

arenaTest("adversarial: body cap", { policies: { caps: { max_body_bytes: CAP } } }, {
  "a declared Content-Length at the cap is served whole": async (arena) => {
    const { text } = await arena.talk(declared("d".repeat(CAP)));
    servedWhole(arena, text, CAP);
  },

  "a declared Content-Length one over the cap is 413 before the upstream": async (arena) => {
    for (const size of [CAP + 1, 999_999]) {
      const { text, closed } = await arena.talk(
        `POST /api/echo HTTP/1.1\r\nHost: ${SHOP}\r\nContent-Length: ${size}\r\n\r\nabc`,
      );
      assert.ok(closed, `${size}: the gateway closed the connection`);
      onlyEnvelope(text, 413, "payload_too_large", "POST");
    }
    assert.deepEqual(arena.upstream.heads, []);
  },

  "a chunked body at the cap is served whole": async (arena) => {
    const { text } = await arena.talk(CHUNKED_HEAD + chunk(1024).repeat(CAP / 1024) + "0\r\n\r\n");
    servedWhole(arena, text, CAP);
  },

  "a first chunk one over the cap is 413; the upstream never gets a whole request": async (
    arena,
  ) => {
    const { text, closed } = await arena.talk(CHUNKED_HEAD + chunk(CAP + 1) + "0\r\n\r\n");
    assert.ok(closed, "the gateway closed the connection");
    onlyEnvelope(text, 413, "payload_too_large", "POST");
    await arena.gateway.ledgerWhen((r) => r.outstanding === 0);
    assert.equal(arena.upstream.seen.length, 0, "the upstream never got a complete body");
  },

  "a later chunk one byte over the cap is cut off with a 413 after the head went upstream": async (
    arena,
  ) => {
    const client = await arena.connect();
    await client.write(CHUNKED_HEAD + chunk(1024).repeat(CAP / 1024));
    await headsArrived(arena, 1); // admitted and streaming, exactly at the cap so far
    await client.write(chunk(1) + "0\r\n\r\n");
    const { text, closed } = await client.end(5000);
    assert.ok(closed, "the gateway closed the connection");
    onlyEnvelope(text, 413, "payload_too_large", "POST");
    await arena.gateway.ledgerWhen((r) => r.outstanding === 0);
    assert.deepEqual(arena.upstream.heads, ["POST /echo"]);
    assert.equal(arena.upstream.seen.length, 0, "the upstream never got a complete body");
  },
});

arenaTest("adversarial: rate limit", {
  policies: { rate_limit: { per_second: 1, burst: 3, headers: true } },
}, {
  "X-Forwarded-For from an untrusted peer does not evade the per-client rate limit": async (
    arena,
  ) => {
    // Each request claims a different address; the gateway must count them all as 127.0.0.1.
    const started = performance.now();
    const statuses: number[] = [];
    for (let i = 0; i < 6; i++) {
      const response = await arena.send({
        path: "/api/echo",
        headers: [["X-Forwarded-For", `198.51.100.${i}`], ["X-Real-IP", `198.51.100.${i}`]],
      });
      statuses.push(response.status);
      if (response.status === 429) {
        assert.equal(JSON.parse(response.body).error.code, "rate_limited");
        assert.ok(Number(response.headers["retry-after"]) >= 1);
        assert.equal(response.headers["ratelimit-remaining"], "0");
      }
    }
    const seconds = (performance.now() - started) / 1000;
    assert.deepEqual(statuses.slice(0, 3), [200, 200, 200], `the burst is served: ${statuses}`);
    assert.ok(statuses.every((s) => s === 200 || s === 429), `${statuses}`);
    const served = statuses.filter((s) => s === 200).length;
    // Past the burst, only what refilled (1 per second) may be served.
    assert.ok(served <= 3 + Math.ceil(seconds), `forged addresses got a fresh budget: ${statuses}`);
    assert.ok(statuses.includes(429), `forged addresses got a fresh budget: ${statuses}`);
    assert.equal(arena.upstream.seen.length, served, "only served requests reached the upstream");
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
