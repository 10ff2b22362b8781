/**
 * Unit tests for the per-client rate limiter (GCRA, LRU-bounded), the TTL blocklist and the match
 * counter, on an explicit clock.
 *
 * @module
 */
import assert from "node:assert/strict";
import { ClientRateLimiter } from "../src/policy/rate_limit.ts";
import { MatchCounter, TtlBlocklist } from "../src/policy/ttl_block.ts";

/** A snapshot of a decision (the limiter reuses its decision object). */
function take(limiter: ClientRateLimiter, client: string, now: number) {
  return { ...limiter.take(client, now) };
}

Deno.test("ClientRateLimiter admits a burst, then denies with whole-second Retry-After", () => {
  const limiter = new ClientRateLimiter({ perSecond: 0.5, burst: 3, maxClients: 10 });
  assert.deepEqual(take(limiter, "a", 0), {
    allowed: true,
    limit: 3,
    remaining: 2,
    resetS: 2,
    retryAfterS: 0,
    denialsInARow: 0,
  });
  assert.equal(take(limiter, "a", 0).remaining, 1);
  assert.equal(take(limiter, "a", 0).remaining, 0);
  const denied = take(limiter, "a", 0);
  assert.equal(denied.allowed, false);
  assert.equal(denied.retryAfterS, 2, "one token every two seconds");
  assert.equal(denied.resetS, 6, "the bucket is full again after three tokens");
  assert.equal(denied.denialsInARow, 1);
  assert.equal(take(limiter, "a", 1).denialsInARow, 2, "still empty after one second");
});

Deno.test("ClientRateLimiter refills at its rate and never rounds Retry-After to 0", () => {
  const limiter = new ClientRateLimiter({ perSecond: 100, burst: 1, maxClients: 10 });
  assert.equal(take(limiter, "a", 0).allowed, true);
  const denied = take(limiter, "a", 1);
  assert.equal(denied.allowed, false);
  assert.equal(denied.retryAfterS, 1, "a 9 ms wait is still announced as 1 s");
  const later = take(limiter, "a", 10);
  assert.equal(later.allowed, true, "one token back after 10 ms");
  assert.equal(later.denialsInARow, 0, "an admission resets the denial run");
});

Deno.test("ClientRateLimiter keeps clients apart", () => {
  const limiter = new ClientRateLimiter({ perSecond: 1, burst: 1, maxClients: 10 });
  assert.equal(take(limiter, "tenant\n10.0.0.1", 0).allowed, true);
  assert.equal(take(limiter, "tenant\n10.0.0.1", 0).allowed, false);
  assert.equal(take(limiter, "tenant\n10.0.0.2", 0).allowed, true);
  assert.equal(take(limiter, "other\n10.0.0.1", 0).allowed, true);
});

Deno.test("ClientRateLimiter stays within max_clients, evicting the least recently seen", () => {
  const limiter = new ClientRateLimiter({ perSecond: 1, burst: 1, maxClients: 3 });
  for (const client of ["a", "b", "c"]) take(limiter, client, 0);
  take(limiter, "a", 0); // a is now the most recently seen (and denied)
  take(limiter, "d", 0); // evicts b
  assert.equal(limiter.size, 3);
  assert.equal(limiter.evictions, 1);
  assert.equal(take(limiter, "a", 0).allowed, false, "a was kept, with its empty bucket");
  assert.equal(take(limiter, "b", 0).allowed, true, "b was forgotten: a fresh bucket");
  assert.equal(limiter.evictions, 2);
  for (let i = 0; i < 1000; i++) take(limiter, `x${i}`, 0);
  assert.equal(limiter.size, 3);
  assert.equal(limiter.evictions, 1002);
});

Deno.test("TtlBlocklist blocks for the TTL, then forgets", () => {
  const list = new TtlBlocklist({ ttlMs: 1000, maxEntries: 10 });
  assert.equal(list.blocked("a", 0), false);
  list.block("a", 100);
  assert.equal(list.blocked("a", 100), true);
  assert.equal(list.blocked("a", 1099), true);
  assert.equal(list.blocked("a", 1100), false);
  assert.equal(list.size, 0, "an expired entry is dropped when read");
});

Deno.test("TtlBlocklist is bounded, evicting the least recently blocked", () => {
  const list = new TtlBlocklist({ ttlMs: 1000, maxEntries: 2 });
  list.block("a", 0);
  list.block("b", 0);
  list.block("a", 1); // renewed: b is now the oldest
  list.block("c", 2);
  assert.equal(list.evictions, 1);
  assert.deepEqual(["a", "b", "c"].map((x) => list.blocked(x, 3)), [true, false, true]);
});

Deno.test("MatchCounter counts within its window and restarts after it", () => {
  const counter = new MatchCounter({ windowMs: 1000, maxEntries: 10 });
  assert.equal(counter.count("a", 0), 1);
  assert.equal(counter.count("a", 500), 2);
  assert.equal(counter.count("b", 500), 1);
  assert.equal(counter.count("a", 1000), 1, "a new window");
});
