import assert from "node:assert/strict";
import { InstancePool, type Pick } from "../src/egress/pool.ts";

const ADDRESSES = ["127.0.0.1:9050", "127.0.0.1:9051", "127.0.0.1:9052"];
const PROBE = 1000;

/** A 3-instance pool on a settable clock, with a 4-outcome breaker window (min 2 samples). */
function makePool(size = 3) {
  const time = { now: 0 };
  const pool = new InstancePool(ADDRESSES.slice(0, size), {
    breaker: { window: 4, minSamples: 2, failureRatio: 0.5, probeIntervalMs: PROBE },
    clock: () => time.now,
  });
  return { pool, time };
}

/** Picks instance `index` by excluding every other one. */
/** A pick's public fields (the pool also tags its picks to catch a second finish). */
function fields(pick: Pick | undefined) {
  if (!pick) return pick;
  const { index, fallback, generation } = pick;
  return { index, fallback, generation };
}

function pickOn(pool: InstancePool, index: number): Pick {
  const others = new Set(Array.from({ length: pool.size }, (_, i) => i).filter((i) => i !== index));
  const pick = pool.pick(others)!;
  assert.equal(pick.index, index, `could not steer a pick onto instance ${index}`);
  return pick;
}

/** Runs one finished attempt on `index`. */
function attempt(pool: InstancePool, index: number, ok: boolean, latencyMs?: number): void {
  pool.finish(pickOn(pool, index), ok, latencyMs);
}

/** Opens instance `index`'s breaker with two failures. */
function open(pool: InstancePool, index: number): void {
  attempt(pool, index, false);
  attempt(pool, index, false);
}

Deno.test("InstancePool.pick() returns undefined only for an empty pool", () => {
  assert.equal(makePool(0).pool.pick(), undefined);
  assert.equal(makePool(0).pool.size, 0);
  const { pool } = makePool(1);
  assert.deepEqual(fields(pool.pick(new Set([0]))), {
    index: 0,
    fallback: false,
    generation: 0,
  });
});

Deno.test("InstancePool.pick() rotates among equal scores", () => {
  const { pool } = makePool();
  const order = [];
  for (let k = 0; k < 4; k++) {
    const pick = pool.pick()!;
    order.push(pick.index);
    pool.finish(pick, true);
  }
  assert.deepEqual(order, [0, 1, 2, 0]);
});

Deno.test("InstancePool.pick() avoids busy instances (2 per active attempt)", () => {
  const { pool } = makePool();
  pickOn(pool, 0);
  pickOn(pool, 1);
  pickOn(pool, 1);
  assert.deepEqual([pool.score(0), pool.score(1), pool.score(2)], [2, 4, 0]);
  assert.equal(pool.pick()!.index, 2);
  assert.equal(pool.pick()!.index, 0, "0 (2) and 2 (2) tie; rotation continues after 2");
});

Deno.test("InstancePool.pick() prefers the fastest instance (latency_ms / 100)", () => {
  const { pool } = makePool();
  attempt(pool, 0, true, 300);
  attempt(pool, 1, true, 100);
  attempt(pool, 2, true, 200);
  assert.deepEqual([pool.score(0), pool.score(1), pool.score(2)], [3, 1, 2]);
  assert.equal(pool.pick()!.index, 1);
});

Deno.test("InstancePool.finish() keeps latency as a moving average (alpha 0.2)", () => {
  const { pool } = makePool();
  assert.equal(pool.snapshot()[0].latency_ms, 0, "0 until the first sample");
  attempt(pool, 0, true, 500);
  assert.equal(pool.snapshot()[0].latency_ms, 500, "the first sample is taken whole");
  attempt(pool, 0, true, 1000);
  assert.equal(pool.snapshot()[0].latency_ms, 600);
  attempt(pool, 0, false, 5000);
  assert.equal(pool.snapshot()[0].latency_ms, 600, "failures carry no latency sample");
  attempt(pool, 0, true);
  assert.equal(pool.snapshot()[0].latency_ms, 600, "no sample without a latency");
});

Deno.test("InstancePool.pick() avoids failing instances (10 × error rate)", () => {
  const { pool } = makePool();
  attempt(pool, 0, true);
  attempt(pool, 0, true);
  attempt(pool, 0, true);
  attempt(pool, 0, false); // 1 of 4: 2.5
  attempt(pool, 1, true); // 0 of 1: 0, but busy
  pickOn(pool, 1);
  pickOn(pool, 2);
  attempt(pool, 2, true); // 0 of 1, busy: 2
  assert.deepEqual([pool.score(0), pool.score(1), pool.score(2)], [2.5, 2, 2]);
  attempt(pool, 2, true, 10); // latency breaks the tie: 2.1
  assert.equal(pool.pick()!.index, 1);
});

Deno.test("InstancePool.pick() skips excluded instances while another remains", () => {
  const { pool } = makePool();
  attempt(pool, 0, true, 100);
  attempt(pool, 1, true, 200);
  attempt(pool, 2, true, 300);
  const first = pool.pick()!;
  assert.equal(first.index, 0);
  const second = pool.pick(new Set([0]))!;
  assert.equal(second.index, 1, "the next-best instance");
  const third = pool.pick(new Set([0, 1]))!;
  assert.equal(third.index, 2);
  pool.finish(first, true, 100);
  pool.finish(second, true, 200);
  pool.finish(third, true, 300);
  const again = pool.pick(new Set([0, 1, 2]))!;
  assert.deepEqual(
    fields(again),
    { index: 0, fallback: false, generation: 0 },
    "all tried",
  );
});

Deno.test("InstancePool.pick() retries on a healthy tried instance before an open one", () => {
  const { pool } = makePool();
  open(pool, 1);
  open(pool, 2);
  const retry = pool.pick(new Set([0]))!;
  assert.deepEqual(fields(retry), { index: 0, fallback: false, generation: 0 });
});

Deno.test("InstancePool: a due half-open trial is the gateway's probe, never a client's pick", () => {
  const { pool, time } = makePool();
  open(pool, 1);
  assert.deepEqual(pool.dueProbes(), [], "not due before the probe interval");
  assert.notEqual(pool.pick()!.index, 1, "open: out of the selection");
  time.now = PROBE;
  assert.deepEqual(pool.dueProbes(), [1]);
  for (let k = 0; k < 6; k++) {
    const pick = pool.pick()!;
    assert.notEqual(pick.index, 1, "a client request is never the trial");
    pool.finish(pick, true, 10);
  }
  assert.equal(pool.snapshot()[1].state, "trial", "due, untaken");
  assert.equal(pool.beginProbe(1), true);
  assert.equal(pool.beginProbe(1), false, "one probe at a time");
  assert.deepEqual(pool.dueProbes(), [], "in flight: not due again");
  assert.equal(pool.pick(new Set([0, 2]))!.index !== 1, true, "still not for clients");
  time.now = PROBE + 40;
  pool.endProbe(1, true);
  assert.equal(pool.snapshot()[1].state, "healthy");
  assert.equal(pool.pick(new Set([0, 2]))!.index, 1, "closed: chosen again");
});

Deno.test("InstancePool.endProbe() re-opens an instance whose probe failed", () => {
  const { pool, time } = makePool();
  open(pool, 2);
  assert.equal(pool.beginProbe(2), false, "not due yet");
  time.now = PROBE + 5;
  assert.equal(pool.beginProbe(2), true);
  time.now = PROBE + 50;
  pool.endProbe(2, false);
  const row = pool.snapshot()[2];
  assert.deepEqual([row.state, row.opens, row.retry_in_ms], ["open", 2, PROBE]);
});

Deno.test("InstancePool: an instance that cannot be connected to is tripped at once", () => {
  const { pool } = makePool();
  attempt(pool, 0, true);
  attempt(pool, 0, true);
  attempt(pool, 0, true);
  pool.finish(pickOn(pool, 0), false, undefined, true);
  assert.equal(pool.snapshot()[0].state, "open", "one refused connect, not a window of them");
  for (let k = 0; k < 4; k++) assert.notEqual(pool.pick()!.index, 0);
  pool.observe(1, false);
  assert.equal(pool.snapshot()[1].state, "healthy", "an ordinary failure fills the window");
  pool.observe(1, false, true);
  assert.equal(pool.snapshot()[1].state, "open", "another worker saw it down");
  const opens = pool.snapshot()[1].opens;
  pool.trip(1);
  assert.equal(pool.snapshot()[1].opens, opens, "an open breaker is not opened again");
});

Deno.test("InstancePool.pick() falls back to round-robin when every breaker refuses", () => {
  const { pool } = makePool();
  open(pool, 0);
  open(pool, 1);
  open(pool, 2);
  const picks = Array.from({ length: 4 }, () => pool.pick()!);
  assert.deepEqual(picks.map((p) => [p.index, p.fallback]), [
    [0, true],
    [1, true],
    [2, true],
    [0, true],
  ]);
  assert.equal(pool.pick(new Set([1]))!.index, 2, "the cursor skips an excluded instance");
  for (const pick of picks) pool.finish(pick, true, 10);
  const rows = pool.snapshot();
  assert.deepEqual(rows.map((r) => [r.state, r.opens, r.active]), [
    ["open", 1, 0],
    ["open", 1, 0],
    ["open", 1, 1],
  ]);
  assert.equal(rows[0].requests, 4, "2 failures + 2 fallback successes");
});

Deno.test("InstancePool.finish() counts an attempt once", () => {
  const { pool } = makePool();
  const pick = pool.pick()!;
  assert.equal(pool.finish(pick, false), true);
  assert.equal(pool.finish(pick, false), false);
  assert.equal(pool.finish({ ...pick }, false), false, "a copy is not a live pick");
  const row = pool.snapshot()[pick.index];
  assert.deepEqual([row.active, row.requests, row.failures], [0, 1, 1]);
});

Deno.test("InstancePool.snapshot() reports every instance's state and counters", () => {
  const { pool, time } = makePool();
  time.now = 100;
  attempt(pool, 0, true, 200);
  attempt(pool, 0, true, 400); // latency 200 + 0.2 × 200 = 240
  attempt(pool, 0, false); // 1 of 3 failed
  open(pool, 1);
  pickOn(pool, 2);
  time.now = 400;
  assert.deepEqual(pool.snapshot(), [
    {
      address: "127.0.0.1:9050",
      state: "healthy",
      active: 0,
      latency_ms: 240,
      failure_ratio: 1 / 3,
      window: { failures: 1, samples: 3 },
      consecutive_failures: 1,
      requests: 3,
      failures: 1,
      score: 240 / 100 + 10 * (1 / 3),
      retry_in_ms: 0,
      opens: 0,
    },
    {
      address: "127.0.0.1:9051",
      state: "open",
      active: 0,
      latency_ms: 0,
      failure_ratio: 1,
      window: { failures: 2, samples: 2 },
      consecutive_failures: 2,
      requests: 2,
      failures: 2,
      score: 10,
      retry_in_ms: 700,
      opens: 1,
    },
    {
      address: "127.0.0.1:9052",
      state: "healthy",
      active: 1,
      latency_ms: 0,
      failure_ratio: 0,
      window: { failures: 0, samples: 0 },
      consecutive_failures: 0,
      requests: 0,
      failures: 0,
      score: 2,
      retry_in_ms: 0,
      opens: 0,
    },
  ]);
});

Deno.test("InstancePool() rejects a latency weight outside (0, 1]", () => {
  const options = { breaker: { probeIntervalMs: 1 }, clock: () => 0 };
  assert.throws(() => new InstancePool([], { ...options, latencyAlpha: 0 }), RangeError);
  assert.throws(() => new InstancePool([], { ...options, latencyAlpha: 1.5 }), RangeError);
  assert.equal(new InstancePool(["a"], { ...options, latencyAlpha: 1 }).size, 1);
});

Deno.test("InstancePool.seedLatency() sets the score until the first own sample replaces it", () => {
  const { pool } = makePool(2);
  pool.seedLatency(0, 400);
  assert.equal(pool.score(0), 4);
  const first = pool.pick()!;
  assert.equal(first.index, 1, "the seeded instance scores worse than an unknown one");
  pool.finish(first, undefined);
  const pick = pool.pick(new Set([1]))!;
  assert.equal(pick.index, 0);
  pool.finish(pick, true, 100);
  assert.equal(pool.score(0), 1, "the own sample replaced the seed, not averaged with it");
  pool.seedLatency(0, 900);
  assert.equal(pool.score(0), 1, "a seed never overrides an own sample");
  pool.seedLatency(1, -5);
  pool.seedLatency(1, Number.NaN);
  assert.equal(pool.score(1), 0);
});
