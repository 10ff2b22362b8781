import assert from "node:assert/strict";
import { compileRate, spendToken } from "../src/ledger/rate_budget.ts";

/** Spends `count` tokens at `nowMs`, returning every answer. */
function spend(
  state: BigInt64Array,
  rate: ReturnType<typeof compileRate>,
  nowMs: number,
  count = 1,
) {
  return Array.from({ length: count }, () => spendToken(state, 0, rate, nowMs));
}

Deno.test("compileRate() turns a budget into microsecond interval and tolerance", () => {
  assert.deepEqual(compileRate({ per_second: 1, burst: 2 }), {
    intervalUs: 1_000_000n,
    toleranceUs: 2_000_000n,
  });
  assert.deepEqual(compileRate({ per_second: 20, burst: 40 }), {
    intervalUs: 50_000n,
    toleranceUs: 2_000_000n,
  });
  assert.deepEqual(compileRate({ per_second: 0.5, burst: 3 }), {
    intervalUs: 2_000_000n,
    toleranceUs: 6_000_000n,
  });
  // faster than one per microsecond still refills at most one per microsecond
  assert.equal(compileRate({ per_second: 5_000_000, burst: 1 }).intervalUs, 1n);
});

Deno.test("spendToken() allows the burst back to back, then refuses", () => {
  const state = new BigInt64Array(1);
  const rate = compileRate({ per_second: 10, burst: 5 });
  assert.deepEqual(spend(state, rate, 0, 5), [0, 0, 0, 0, 0]);
  assert.equal(spendToken(state, 0, rate, 0), 100);
  assert.equal(spendToken(state, 0, rate, 0), 100, "a refusal spends nothing");
});

Deno.test("spendToken() then allows exactly one token per interval", () => {
  const state = new BigInt64Array(1);
  const rate = compileRate({ per_second: 10, burst: 3 }); // one every 100 ms
  assert.deepEqual(spend(state, rate, 0, 3), [0, 0, 0]);
  for (let t = 100; t <= 1000; t += 100) {
    assert.equal(spendToken(state, 0, rate, t), 0, `token at ${t} ms`);
    assert.equal(spendToken(state, 0, rate, t), 100, `second token at ${t} ms`);
  }
});

Deno.test("spendToken() answers the wait until the next token is due", () => {
  const state = new BigInt64Array(1);
  const rate = compileRate({ per_second: 4, burst: 1 }); // one every 250 ms
  assert.equal(spendToken(state, 0, rate, 0), 0);
  assert.equal(spendToken(state, 0, rate, 0), 250);
  assert.equal(spendToken(state, 0, rate, 100), 150);
  assert.equal(spendToken(state, 0, rate, 249), 1);
  assert.equal(spendToken(state, 0, rate, 249.5), 0.5);
  assert.equal(spendToken(state, 0, rate, 250), 0);
  assert.equal(spendToken(state, 0, rate, 250), 250);
});

Deno.test("spendToken() handles a fractional rate (0.5 per second)", () => {
  const state = new BigInt64Array(1);
  const rate = compileRate({ per_second: 0.5, burst: 2 }); // one every 2 s
  assert.deepEqual(spend(state, rate, 0, 2), [0, 0]);
  assert.equal(spendToken(state, 0, rate, 0), 2000);
  assert.equal(spendToken(state, 0, rate, 1000), 1000);
  assert.equal(spendToken(state, 0, rate, 1999), 1);
  assert.equal(spendToken(state, 0, rate, 2000), 0);
  assert.equal(spendToken(state, 0, rate, 2000), 2000);
  assert.equal(spendToken(state, 0, rate, 4000), 0);
});

Deno.test("spendToken() does not accumulate more than the burst over a long idle", () => {
  const state = new BigInt64Array(1);
  const rate = compileRate({ per_second: 10, burst: 3 });
  assert.deepEqual(spend(state, rate, 0, 3), [0, 0, 0]);
  const later = 3_600_000; // an hour idle would be 36 000 tokens if they accumulated
  assert.deepEqual(spend(state, rate, later, 4), [0, 0, 0, 100]);
  assert.equal(spendToken(state, 0, rate, later + 100), 0);
  assert.equal(spendToken(state, 0, rate, later + 100), 100);
});

Deno.test("spendToken() keeps each slot's bucket separate", () => {
  const state = new BigInt64Array(2);
  const rate = compileRate({ per_second: 1, burst: 1 });
  assert.equal(spendToken(state, 0, rate, 0), 0);
  assert.equal(spendToken(state, 0, rate, 0), 1000);
  assert.equal(spendToken(state, 1, rate, 0), 0);
  assert.equal(state[0], 1_000_000n);
  assert.equal(state[1], 1_000_000n);
});
