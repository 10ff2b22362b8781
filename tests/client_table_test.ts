/**
 * Unit tests for the shared client table: its GCRA against `MapRateLimiter` on a seeded random
 * sequence, one state across views and across real worker isolates, eviction, TTL blocks, and the
 * FNV-1a key hash against a plain BigInt implementation.
 *
 * @module
 */
import assert from "node:assert/strict";
import {
  ClientTable,
  ENTRY_BYTES,
  type GcraRate,
  keyFromHalves,
  keyOf,
} from "../src/policy/client_table.ts";
import { MapRateLimiter } from "./fixtures/gcra_model.ts";
import { mulberry32 } from "./fixtures/random.ts";

/** The rate of `per_second` and `burst`, as `MapRateLimiter` derives it. */
function rateOf(perSecond: number, burst: number): GcraRate {
  const intervalMs = 1000 / perSecond;
  return { intervalMs, toleranceMs: intervalMs * burst };
}

/** FNV-1a 64 over `TextEncoder`'s bytes, in BigInt arithmetic. */
function fnv1a64(text: string): bigint {
  let hash = 0xcbf29ce484222325n;
  for (const byte of new TextEncoder().encode(text)) {
    hash = BigInt.asUintN(64, (hash ^ BigInt(byte)) * 0x100000001b3n);
  }
  return hash;
}

Deno.test("keyOf() is FNV-1a 64 over UTF-8, lone surrogates as U+FFFD", () => {
  assert.equal(keyOf(""), 0xcbf29ce484222325n);
  assert.equal(keyOf("a"), 0xaf63dc4c8601ec8cn);
  assert.equal(keyOf("foobar"), 0x85944171f73967e8n);
  assert.equal(keyFromHalves(0xaf63dc4c, 0x8601ec8c), keyOf("a"));
  const texts = [
    "tenant-salt|203.0.113.7",
    "é|ü",
    "東京|2001:db8::1",
    "😀|x",
    "\ud800|\udfff",
    "\uffff",
  ];
  for (const text of texts) assert.equal(keyOf(text), fnv1a64(text), JSON.stringify(text));
  const random = mulberry32(19);
  for (let n = 0; n < 500; n++) {
    const text = String.fromCharCode(
      ...Array.from({ length: 1 + Math.floor(random() * 12) }, () => Math.floor(random() * 65536)),
    );
    assert.equal(keyOf(text), fnv1a64(text), JSON.stringify(text));
  }
});

Deno.test("ClientTable.allocate() rounds capacity up to a power of two, 40 bytes an entry", () => {
  const buffer = ClientTable.allocate(100);
  assert.equal(ENTRY_BYTES, 40);
  assert.equal(buffer.byteLength, 32 + 128 * 40);
  assert.deepEqual(new ClientTable(buffer).stats(), { capacity: 128, used: 0, evictions: 0 });
  assert.throws(() => ClientTable.allocate(0), RangeError);
  assert.throws(() => new ClientTable(new SharedArrayBuffer(64)), TypeError);
});

Deno.test("ClientTable.take() decides exactly as MapRateLimiter.take() on a random sequence", () => {
  for (const [perSecond, burst, seed] of [[8, 5, 1], [64, 3, 2], [0.5, 10, 3], [1000, 1, 4]]) {
    const limiter = new MapRateLimiter({ perSecond, burst, maxClients: 1000 });
    const table = new ClientTable(ClientTable.allocate(1024));
    const rate = rateOf(perSecond, burst);
    const random = mulberry32(seed);
    let now = 0;
    for (let op = 0; op < 20_000; op++) {
      if (random() < 0.5) now += Math.floor(random() * 8 * 200) / 8; // whole 125 µs steps
      const client = `salt|10.0.0.${Math.floor(random() ** 2 * 50)}`;
      const expected = { ...limiter.take(client, now) };
      const got = table.take(keyOf(client), now, rate);
      const where = `rate ${perSecond}/s burst ${burst}, op ${op}, ${client} at ${now} ms`;
      assert.equal(got.allowed, expected.allowed, where);
      assert.equal(got.denialsInARow, expected.denialsInARow, where);
    }
    assert.equal(table.stats().evictions, 0);
    assert.equal(table.stats().used, 50);
  }
});

Deno.test("ClientTable.take() admits a burst at once, then one token per interval", () => {
  const table = new ClientTable(ClientTable.allocate(16));
  const rate = rateOf(10, 4); // one token every 100 ms
  const key = keyOf("t|203.0.113.7");
  for (let n = 0; n < 4; n++) assert.equal(table.take(key, 0, rate).allowed, true);
  const denied = table.take(key, 0, rate);
  assert.deepEqual({ ...denied }, { allowed: false, tatMs: 400, aheadMs: 400, denialsInARow: 1 });
  assert.equal(table.take(key, 99, rate).denialsInARow, 2, "no token before 100 ms");
  assert.deepEqual({ ...table.take(key, 100, rate) }, {
    allowed: true,
    tatMs: 500,
    aheadMs: 400,
    denialsInARow: 0,
  });
  assert.equal(table.take(key, 150, rate).allowed, false);
  assert.equal(table.take(key, 200, rate).allowed, true);
});

Deno.test("ClientTable views over one buffer share one state", () => {
  const buffer = ClientTable.allocate(64);
  const [a, b] = [new ClientTable(buffer), new ClientTable(buffer)];
  const rate = rateOf(1, 2);
  const key = keyOf("t|198.51.100.1");
  assert.equal(a.take(key, 0, rate).allowed, true);
  assert.equal(b.take(key, 0, rate).allowed, true);
  assert.equal(a.take(key, 0, rate).allowed, false, "the second view spent the last token");
  assert.equal(b.take(key, 0, rate).denialsInARow, 2);
  assert.equal(b.take(keyOf("t|198.51.100.2"), 0, rate).allowed, true);
  assert.deepEqual(a.stats(), { capacity: 64, used: 2, evictions: 0 });
});

/** A worker that takes `takes` tokens per round on its round's key, in lockstep with its peer. */
const WORKER_SOURCE = `
import { ClientTable } from "${new URL("../src/policy/client_table.ts", import.meta.url).href}";
self.onmessage = ({ data }) => {
  const table = new ClientTable(data.buffer);
  const gate = new Int32Array(data.gate);
  const rate = { intervalMs: 1, toleranceMs: data.burst };
  const allowed = [];
  for (let round = 0; round < data.rounds; round++) {
    Atomics.add(gate, 0, 1);
    while (Atomics.load(gate, 0) < data.workers * (round + 1)); // spin: start together
    let count = 0;
    for (let n = 0; n < data.takes; n++) if (table.take(BigInt(round + 1), 1000, rate).allowed) count++;
    allowed.push(count);
  }
  self.postMessage(allowed);
};
`;

/** Runs `workers` workers over one table; the tokens each round's key admitted, over all. */
async function admittedAcrossWorkers(
  options: { workers: number; rounds: number; takes: number; burst: number; capacity: number },
): Promise<number[]> {
  const url = URL.createObjectURL(new Blob([WORKER_SOURCE], { type: "application/javascript" }));
  const data = {
    ...options,
    buffer: ClientTable.allocate(options.capacity),
    gate: new SharedArrayBuffer(4),
  };
  const spawned = Array.from(
    { length: options.workers },
    () => new Worker(url, { type: "module" }),
  );
  try {
    const results = await Promise.all(
      spawned.map((worker) =>
        new Promise<number[]>((resolve, reject) => {
          worker.onmessage = (event) => resolve(event.data);
          worker.onerror = (event) => {
            event.preventDefault();
            reject(new Error(event.message));
          };
          worker.postMessage(data);
        })
      ),
    );
    return results[0].map((_, round) => results.reduce((sum, counts) => sum + counts[round], 0));
  } finally {
    for (const worker of spawned) worker.terminate();
    URL.revokeObjectURL(url);
  }
}

Deno.test("ClientTable.take() from two worker isolates at once admits exactly the burst", async () => {
  const burst = 20_000;
  const options = { workers: 2, rounds: 40, takes: 30_000, burst, capacity: 256 };
  const admitted = await admittedAcrossWorkers(options);
  assert.deepEqual(admitted, admitted.map(() => burst), "every round admits the burst, never more");
});

Deno.test("ClientTable.take() from two isolates admits exactly the burst when each key evicts", async () => {
  const burst = 20_000;
  const options = { workers: 2, rounds: 40, takes: 30_000, burst, capacity: 8 };
  const admitted = await admittedAcrossWorkers(options);
  assert.deepEqual(admitted, admitted.map(() => burst), "racing claims of a full window agree");
});

Deno.test("ClientTable evicts the least recently seen when a window is full, and counts it", () => {
  const table = new ClientTable(ClientTable.allocate(8)); // one window spans the whole table
  const rate = rateOf(0.001, 1); // one token per 1000 s
  const first = keyOf("t|first");
  assert.equal(table.take(first, 0, rate).allowed, true);
  assert.equal(table.take(first, 0, rate).allowed, false);
  for (let n = 1; n <= 19; n++) table.take(keyOf(`t|cold-${n}`), n, rate);
  assert.deepEqual(table.stats(), { capacity: 8, used: 8, evictions: 12 });
  const back = table.take(first, 20, rate);
  assert.deepEqual({ ...back }, {
    allowed: true,
    tatMs: 1_000_020,
    aheadMs: 1_000_000,
    denialsInARow: 0,
  });
  assert.equal(table.stats().evictions, 13, "coming back evicted someone else");
});

Deno.test("ClientTable keeps a hot key while cold keys churn through its window", () => {
  const table = new ClientTable(ClientTable.allocate(8));
  const rate = rateOf(0.001, 2);
  const hot = keyOf("t|hot");
  table.take(hot, 0, rate);
  table.take(hot, 0, rate);
  for (let n = 1; n <= 1000; n++) {
    table.take(keyOf(`t|cold-${n}`), n, rate);
    assert.equal(table.take(hot, n, rate).allowed, false, `hot key evicted at ${n}`);
  }
  assert.equal(table.take(hot, 1001, rate).denialsInARow, 1001);
  assert.equal(table.stats().evictions, 1000 - 7);
});

Deno.test("ClientTable.block() holds until its end, not after, seen from every view", () => {
  const buffer = ClientTable.allocate(32);
  const [a, b] = [new ClientTable(buffer), new ClientTable(buffer)];
  const key = keyOf("t|192.0.2.9");
  assert.equal(a.blockedUntil(key, 0), undefined, "unknown key");
  assert.equal(a.stats().used, 0, "a lookup claims nothing");
  a.block(key, 5000, 1000);
  assert.equal(b.blockedUntil(key, 1000), 5000);
  assert.equal(b.blockedUntil(key, 4999.999), 5000);
  assert.equal(a.blockedUntil(key, 5000), undefined, "expired at its end");
  assert.equal(b.blockedUntil(keyOf("t|192.0.2.10"), 1000), undefined, "other clients pass");
  b.block(key, 9000, 6000);
  assert.equal(a.blockedUntil(key, 8000), 9000, "blocked again");
  assert.equal(a.take(key, 8000, rateOf(1, 1)).allowed, true, "a block leaves the bucket alone");
});

Deno.test("ClientTable.advance() moves an arrival time forward, never back", () => {
  const table = new ClientTable(ClientTable.allocate(16));
  const rate = rateOf(1, 2); // tolerance 2 s
  const key = keyOf("t|203.0.113.7");
  table.advance(key, 5000, 0); // the fleet says: 5 s ahead
  assert.equal(table.take(key, 0, rate).allowed, false, "an empty bucket, as the fleet left it");
  table.advance(key, 1000, 0); // an older answer arriving late
  // Allowed once 5 s + 1 s − now ≤ the 2 s tolerance: from 4 s on.
  assert.equal(table.take(key, 3999, rate).allowed, false, "still 5 s: not moved back");
  assert.equal(table.take(key, 4000, rate).allowed, true);
});
