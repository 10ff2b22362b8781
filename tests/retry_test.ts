import assert from "node:assert/strict";
import { backoffMs, RetryBudget, retryEligible } from "../src/egress/retry.ts";

/** A budget on a settable clock. */
function makeBudget(ratio: number, minRetries: number, windowMs = 10_000, start = 0) {
  const time = { now: start };
  const budget = new RetryBudget({ ratio, minRetries, windowMs }, () => time.now);
  return { budget, time };
}

/** Asks for `count` retries; returns how many were granted. */
function retries(budget: RetryBudget, count: number): number {
  let granted = 0;
  for (let k = 0; k < count; k++) if (budget.tryRetry()) granted++;
  return granted;
}

/** Counts `count` requests. */
function requests(budget: RetryBudget, count: number): void {
  for (let k = 0; k < count; k++) budget.request();
}

Deno.test("retryEligible() follows the method table", () => {
  const table: [string, boolean, boolean][] = [
    // method, retryPost = false, retryPost = true
    ["GET", true, true],
    ["HEAD", true, true],
    ["OPTIONS", true, true],
    ["TRACE", true, true],
    ["PUT", true, true],
    ["POST", false, true],
    ["PATCH", false, false],
    ["DELETE", false, false],
    ["CONNECT", false, false],
    ["PROPFIND", false, false],
    ["get", false, false],
    ["", false, false],
  ];
  const actual = table.map((
    [method],
  ) => [method, retryEligible(method, false), retryEligible(method, true)]);
  assert.deepEqual(actual, table);
});

Deno.test("RetryBudget.tryRetry() always allows minRetries per window", () => {
  const { budget } = makeBudget(0.2, 10);
  assert.equal(retries(budget, 15), 10, "no requests at all: the floor still allows 10");
  assert.deepEqual(budget.snapshot(), { requests: 0, retries: 10, refused: 5 });
});

Deno.test("RetryBudget.tryRetry() allows ratio × requests above the floor", () => {
  const { budget } = makeBudget(0.2, 10);
  requests(budget, 100);
  assert.equal(retries(budget, 30), 20, "0.2 × 100");
  requests(budget, 5);
  assert.equal(retries(budget, 5), 1, "0.2 × 105 = 21");
  assert.deepEqual(budget.snapshot(), { requests: 105, retries: 21, refused: 14 });
});

Deno.test("RetryBudget.tryRetry() with a zero floor follows the ratio only", () => {
  const { budget } = makeBudget(0.5, 0);
  assert.equal(budget.tryRetry(), false);
  requests(budget, 3);
  assert.equal(retries(budget, 3), 2, "retries < 1.5: the 2nd is at 1 < 1.5, the 3rd at 2");
});

Deno.test("RetryBudget rotates its window bucket by bucket with the clock", () => {
  const { budget, time } = makeBudget(0.5, 0, 10_000);
  requests(budget, 10); // bucket 0: [0, 1000)
  time.now = 4_500;
  requests(budget, 10); // bucket 4
  assert.equal(retries(budget, 20), 10);
  assert.deepEqual(budget.snapshot(), { requests: 20, retries: 10, refused: 10 });
  time.now = 9_999; // still the same window: nothing expired
  assert.deepEqual(budget.snapshot(), { requests: 20, retries: 10, refused: 10 });
  time.now = 10_000; // bucket 0 leaves the window
  assert.deepEqual(budget.snapshot(), { requests: 10, retries: 10, refused: 10 });
  assert.equal(budget.tryRetry(), false, "10 retries ≥ 0.5 × 10 requests");
  time.now = 13_999;
  assert.deepEqual(budget.snapshot(), { requests: 10, retries: 10, refused: 11 });
  time.now = 14_000; // bucket 4 ([4000, 5000)) leaves too, with the retries counted in it
  assert.deepEqual(budget.snapshot(), { requests: 0, retries: 0, refused: 11 });
});

Deno.test("RetryBudget clears everything after a gap longer than the window", () => {
  const { budget, time } = makeBudget(0.2, 2, 1000, 123_456);
  requests(budget, 50);
  assert.equal(retries(budget, 20), 10);
  time.now += 60_000;
  assert.deepEqual(budget.snapshot(), { requests: 0, retries: 0, refused: 10 });
  assert.equal(retries(budget, 3), 2, "back to the floor");
  time.now -= 5_000; // a clock step backwards keeps counting into the current bucket
  assert.equal(budget.tryRetry(), false);
  assert.deepEqual(budget.snapshot(), { requests: 0, retries: 2, refused: 12 });
});

Deno.test("RetryBudget() rejects options out of range", () => {
  const clock = () => 0;
  assert.throws(
    () => new RetryBudget({ ratio: -0.1, minRetries: 1, windowMs: 1 }, clock),
    RangeError,
  );
  assert.throws(
    () => new RetryBudget({ ratio: 0.2, minRetries: 1.5, windowMs: 1 }, clock),
    RangeError,
  );
  assert.throws(() => new RetryBudget({ ratio: 0.2, minRetries: 1, windowMs: 0 }, clock), {
    name: "RangeError",
    message: 'Retry budget windowMs must be positive, got "0"',
  });
});

Deno.test("backoffMs() doubles from the base until the cap, scaled by random()", () => {
  const options = { baseMs: 25, capMs: 250 };
  const ceilings = [1, 2, 3, 4, 5, 6, 40].map((attempt) => backoffMs(attempt, options, () => 1));
  assert.deepEqual(ceilings, [25, 50, 100, 200, 250, 250, 250]);
  assert.equal(backoffMs(3, options, () => 0.25), 25);
  assert.equal(backoffMs(5000, options, () => 0.5), 125, "a huge attempt stays at the cap");
});

Deno.test("backoffMs() stays within [0, ceiling) for random() in [0, 1)", () => {
  const options = { baseMs: 10, capMs: 1000 };
  for (let attempt = 1; attempt <= 12; attempt++) {
    const ceiling = Math.min(1000, 10 * 2 ** (attempt - 1));
    assert.equal(backoffMs(attempt, options, () => 0), 0);
    const top = backoffMs(attempt, options, () => 0.999999);
    assert.ok(top < ceiling && top > ceiling * 0.999, `attempt ${attempt}: ${top} vs ${ceiling}`);
  }
});

Deno.test("backoffMs() rejects an attempt below 1", () => {
  const options = { baseMs: 10, capMs: 100 };
  assert.throws(() => backoffMs(0, options, () => 0.5), {
    name: "RangeError",
    message: 'Backoff attempt must be a whole number ≥ 1, got "0"',
  });
  assert.throws(() => backoffMs(1.5, options, () => 0.5), RangeError);
});
