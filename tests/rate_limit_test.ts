/**
 * Unit tests for the per-client rate limiter (GCRA in a shared table), the TTL blocklist and the
 * match counter, on an explicit clock. The limiter's every header number is held to the map-based
 * reference model the gateway ran before issue 19, on a seeded random sequence.
 *
 * @module
 */
import assert from "node:assert/strict";
import { ClientTable, keyOf } from "../src/policy/client_table.ts";
import { ClientRateLimiter } from "../src/policy/rate_limit.ts";
import { MatchCounter, TtlBlocklist } from "../src/policy/ttl_block.ts";
import { MapRateLimiter } from "./fixtures/gcra_model.ts";
import { mulberry32 } from "./fixtures/random.ts";

/** A limiter over a fresh table of `entries` entries. */
function limiterOf(perSecond: number, burst: number, entries = 64) {
  const table = new ClientTable(ClientTable.allocate(entries));
  return new ClientRateLimiter({ perSecond, burst, table, key: keyOf });
}

Deno.test("ClientRateLimiter admits a burst, then denies with whole-second Retry-After", () => {
  const limiter = limiterOf(0.5, 3);
  assert.deepEqual(limiter.take("a", 0), {
    allowed: true,
    limit: 3,
    remaining: 2,
    resetS: 2,
    retryAfterS: 0,
    denialsInARow: 0,
  });
  assert.equal(limiter.take("a", 0).remaining, 1);
  assert.equal(limiter.take("a", 0).remaining, 0);
  const denied = limiter.take("a", 0);
  assert.equal(denied.allowed, false);
  assert.equal(denied.retryAfterS, 2, "one token every two seconds");
  assert.equal(denied.resetS, 6, "the bucket is full again after three tokens");
  assert.equal(denied.denialsInARow, 1);
  assert.equal(limiter.take("a", 1).denialsInARow, 2, "still empty after one second");
});

Deno.test("ClientRateLimiter refills at its rate and never rounds Retry-After to 0", () => {
  const limiter = limiterOf(100, 1);
  assert.equal(limiter.take("a", 0).allowed, true);
  const denied = limiter.take("a", 1);
  assert.equal(denied.allowed, false);
  assert.equal(denied.retryAfterS, 1, "a 9 ms wait is still announced as 1 s");
  const later = limiter.take("a", 10);
  assert.equal(later.allowed, true, "one token back after 10 ms");
  assert.equal(later.denialsInARow, 0, "an admission resets the denial run");
});

Deno.test("ClientRateLimiter keeps clients apart", () => {
  const limiter = limiterOf(1, 1);
  assert.equal(limiter.take("10.0.0.1", 0).allowed, true);
  assert.equal(limiter.take("10.0.0.1", 0).allowed, false);
  assert.equal(limiter.take("10.0.0.2", 0).allowed, true);
  assert.equal(limiter.take("2001:db8::1", 0).allowed, true);
});

Deno.test("ClientRateLimiter gives every header number the reference model gives", () => {
  for (const [perSecond, burst, seed] of [[8, 5, 1], [3, 7, 2], [0.5, 10, 3], [1000, 1, 4]]) {
    const model = new MapRateLimiter({ perSecond, burst, maxClients: 1000 });
    const limiter = limiterOf(perSecond, burst, 1024);
    const random = mulberry32(seed);
    let now = 1_700_000_000_000; // the edge's clock is epoch milliseconds
    for (let op = 0; op < 5000; op++) {
      if (random() < 0.5) now += Math.floor(random() * 8 * 400) / 8; // whole 125 µs steps
      const client = `10.0.0.${Math.floor(random() ** 2 * 20)}`;
      const where = `rate ${perSecond}/s burst ${burst}, op ${op}, ${client}`;
      assert.deepEqual(limiter.take(client, now), model.take(client, now), where);
    }
  }
});

Deno.test("ClientRateLimiter stays within its table, evicting the least recently seen", () => {
  const limiter = limiterOf(1, 1, 4); // 4 slots: one probe window holds every key
  for (const client of ["a", "b", "c", "d"]) limiter.take(client, 0);
  limiter.take("a", 1); // a is now seen last of all (and denied)
  limiter.take("e", 2); // evicts b, the least recently seen
  assert.equal(limiter.evictions, 1);
  assert.equal(limiter.take("a", 3).allowed, false, "a was kept, with its empty bucket");
  assert.equal(limiter.take("b", 4).allowed, true, "b was forgotten: a fresh bucket");
  assert.equal(limiter.evictions, 2);
  for (let i = 0; i < 1000; i++) limiter.take(`x${i}`, 5 + i);
  assert.equal(limiter.evictions, 1002);
});

/** A blocklist over a fresh table of `entries` entries. */
function blocklistOf(ttlMs: number, entries = 16) {
  const table = new ClientTable(ClientTable.allocate(entries));
  return new TtlBlocklist({ table, ttlMs, key: keyOf });
}

Deno.test("TtlBlocklist blocks for the TTL, then forgets", () => {
  const list = blocklistOf(1000);
  assert.equal(list.blocked("a", 0), false);
  list.block("a", 100);
  assert.equal(list.blocked("a", 100), true);
  assert.equal(list.blocked("a", 1099), true);
  assert.equal(list.blocked("a", 1100), false);
  assert.equal(list.blocked("b", 500), false, "only a was blocked");
});

Deno.test("TtlBlocklist is bounded, evicting the least recently seen", () => {
  const list = blocklistOf(1000, 2);
  list.block("a", 0);
  list.block("b", 1);
  list.block("a", 2); // renewed: b is now the oldest
  list.block("c", 3);
  assert.equal(list.evictions, 1);
  assert.deepEqual(["a", "b", "c"].map((x) => list.blocked(x, 4)), [true, false, true]);
});

Deno.test("TtlBlocklist tells the fleet store of every block it makes, with the TTL", () => {
  const published: [string, number][] = [];
  const table = new ClientTable(ClientTable.allocate(16));
  const list = new TtlBlocklist({
    table,
    ttlMs: 5000,
    key: keyOf,
    remote: { key: keyOf, publish: (client, ttl) => published.push([client, ttl]) },
  });
  list.block("203.0.113.7", 0);
  assert.deepEqual(published, [["203.0.113.7", 5000]]);
});

Deno.test("MatchCounter counts within its window and restarts after it", () => {
  const counter = new MatchCounter({ windowMs: 1000, maxEntries: 10 });
  assert.equal(counter.count("a", 0), 1);
  assert.equal(counter.count("a", 500), 2);
  assert.equal(counter.count("b", 500), 1);
  assert.equal(counter.count("a", 1000), 1, "a new window");
});
