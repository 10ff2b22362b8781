import assert from "node:assert/strict";
import { Breaker } from "../src/egress/breaker.ts";

const PROBE = 30_000;

/** Records `outcomes` ("x" = failure, "." = success) as pass requests at `now`. */
function feed(breaker: Breaker, outcomes: string, now = 0): void {
  for (const mark of outcomes) breaker.record(mark === ".", false, now);
}

Deno.test("Breaker.record() stays closed at 9 samples however many failed", () => {
  const breaker = new Breaker({ probeIntervalMs: PROBE });
  feed(breaker, "xxxxxxxxx");
  assert.equal(breaker.state(0), "closed");
  assert.deepEqual(breaker.snapshot(0), {
    state: "closed",
    samples: 9,
    failures: 9,
    opened_at: null,
    opens: 0,
    retry_in_ms: 0,
  });
  assert.equal(breaker.acquire(0), "pass");
});

Deno.test("Breaker.record() opens exactly at the 10th sample when half of them failed", () => {
  const breaker = new Breaker({ probeIntervalMs: PROBE });
  feed(breaker, "xxxxx....", 100); // 5 of 9 failed: too few samples
  assert.equal(breaker.state(100), "closed");
  breaker.record(true, false, 200); // 5 of 10
  assert.equal(breaker.state(200), "open");
  assert.deepEqual(breaker.snapshot(200), {
    state: "open",
    samples: 10,
    failures: 5,
    opened_at: 200,
    opens: 1,
    retry_in_ms: PROBE,
  });
});

Deno.test("Breaker.record() stays closed at 49 % and opens at 50 % of a full window", () => {
  const breaker = new Breaker({
    window: 100,
    minSamples: 10,
    failureRatio: 0.5,
    probeIntervalMs: 1,
  });
  feed(breaker, ".".repeat(51) + "x".repeat(49));
  assert.equal(breaker.state(0), "closed");
  assert.deepEqual([breaker.snapshot(0).samples, breaker.snapshot(0).failures], [100, 49]);
  feed(breaker, "x"); // evicts the oldest success: 50 of 100
  assert.equal(breaker.state(0), "open");
});

Deno.test("Breaker.record() keeps a rolling window: old failures age out of the ring", () => {
  const breaker = new Breaker({
    window: 20,
    minSamples: 10,
    failureRatio: 0.5,
    probeIntervalMs: 1,
  });
  feed(breaker, ".".repeat(11) + "x".repeat(9)); // 9 of 20
  feed(breaker, ".".repeat(11)); // the oldest successes fall out: still 9 of 20
  assert.deepEqual([breaker.snapshot(0).samples, breaker.snapshot(0).failures], [20, 9]);
  feed(breaker, ".".repeat(9)); // now the 9 failures fall out
  assert.deepEqual(breaker.snapshot(0), {
    state: "closed",
    samples: 20,
    failures: 0,
    opened_at: null,
    opens: 0,
    retry_in_ms: 0,
  });
  feed(breaker, "x".repeat(9)); // 9 of 20 again: the ring keeps exactly 20
  assert.equal(breaker.snapshot(0).failures, 9);
  assert.equal(breaker.state(0), "closed");
  feed(breaker, "x"); // 10 of 20
  assert.equal(breaker.state(0), "open");
});

Deno.test("Breaker.acquire() refuses while open and counts down the retry time", () => {
  const breaker = new Breaker({ probeIntervalMs: PROBE });
  feed(breaker, "x".repeat(10), 1000);
  assert.equal(breaker.acquire(1000), "refuse");
  assert.equal(breaker.acquire(1000 + PROBE - 1), "refuse");
  assert.equal(breaker.state(1000 + PROBE - 1), "open");
  assert.equal(breaker.snapshot(1000 + 10_000).retry_in_ms, PROBE - 10_000);
});

Deno.test("Breaker.acquire() half-opens after the probe interval for exactly one trial", () => {
  const breaker = new Breaker({ probeIntervalMs: PROBE });
  feed(breaker, "x".repeat(10), 0);
  assert.equal(breaker.state(PROBE), "half_open");
  assert.equal(breaker.snapshot(PROBE).retry_in_ms, 0);
  assert.equal(breaker.peek(PROBE), "trial", "peek does not take the trial");
  assert.equal(breaker.acquire(PROBE), "trial");
  assert.equal(breaker.acquire(PROBE), "refuse");
  assert.equal(breaker.acquire(PROBE + 5_000), "refuse");
  assert.equal(breaker.peek(PROBE + 5_000), "refuse");
});

Deno.test("Breaker.record() closes with an empty window on a trial success", () => {
  const breaker = new Breaker({ probeIntervalMs: PROBE });
  feed(breaker, "x".repeat(10), 0);
  assert.equal(breaker.acquire(PROBE), "trial");
  breaker.record(true, true, PROBE + 50);
  assert.deepEqual(breaker.snapshot(PROBE + 50), {
    state: "closed",
    samples: 0,
    failures: 0,
    opened_at: null,
    opens: 1,
    retry_in_ms: 0,
  });
  assert.equal(breaker.acquire(PROBE + 50), "pass");
  feed(breaker, "x".repeat(9), PROBE + 60);
  assert.equal(breaker.state(PROBE + 60), "closed", "a fresh window needs 10 samples again");
});

Deno.test("Breaker.record() re-opens from the trial's end on a trial failure", () => {
  const breaker = new Breaker({ probeIntervalMs: PROBE });
  feed(breaker, "x".repeat(10), 0);
  assert.equal(breaker.acquire(PROBE + 10), "trial");
  breaker.record(false, true, PROBE + 700);
  const reopened = PROBE + 700;
  assert.deepEqual(breaker.snapshot(reopened), {
    state: "open",
    samples: 11,
    failures: 11,
    opened_at: reopened,
    opens: 2,
    retry_in_ms: PROBE,
  });
  assert.equal(breaker.acquire(reopened + PROBE - 1), "refuse");
  assert.equal(breaker.acquire(reopened + PROBE), "trial");
});

Deno.test("Breaker.record() ignores pass outcomes that finish after the breaker opened", () => {
  const breaker = new Breaker({ probeIntervalMs: PROBE });
  const generation = breaker.generation;
  feed(breaker, "x".repeat(10), 0);
  breaker.record(true, false, 10, generation); // admitted before the open
  breaker.record(false, false, 20);
  assert.deepEqual([breaker.snapshot(20).samples, breaker.snapshot(20).opens], [10, 1]);
  assert.equal(breaker.acquire(PROBE), "trial");
  breaker.record(true, true, PROBE);
  breaker.record(false, false, PROBE + 1, generation); // stale: admitted in the first period
  assert.equal(breaker.snapshot(PROBE + 1).samples, 0);
  breaker.record(false, false, PROBE + 2, breaker.generation);
  assert.equal(breaker.snapshot(PROBE + 2).samples, 1);
});

Deno.test("Breaker.record() ignores a trial outcome when no trial is in flight", () => {
  const breaker = new Breaker({ probeIntervalMs: PROBE });
  breaker.record(false, true, 0);
  assert.deepEqual([breaker.state(0), breaker.snapshot(0).samples], ["closed", 0]);
  feed(breaker, "x".repeat(10), 0);
  breaker.record(true, true, PROBE); // no acquire: not a trial
  assert.equal(breaker.state(PROBE), "half_open");
});

Deno.test("Breaker.acquire() presumes a trial lost after another probe interval", () => {
  const breaker = new Breaker({ probeIntervalMs: PROBE });
  feed(breaker, "x".repeat(10), 0);
  assert.equal(breaker.acquire(PROBE), "trial");
  assert.equal(breaker.acquire(2 * PROBE - 1), "refuse");
  assert.equal(breaker.acquire(2 * PROBE), "trial");
  breaker.record(true, true, 2 * PROBE + 5);
  assert.equal(breaker.state(2 * PROBE + 5), "closed");
  breaker.record(false, true, 2 * PROBE + 9); // the lost trial reports late: ignored
  assert.equal(breaker.state(2 * PROBE + 9), "closed");
});

Deno.test("Breaker() rejects options that could never work", () => {
  assert.throws(() => new Breaker({ window: 0, probeIntervalMs: 1 }), RangeError);
  assert.throws(() => new Breaker({ window: 5, minSamples: 6, probeIntervalMs: 1 }), {
    name: "RangeError",
    message: 'Breaker minSamples must be a whole number from 1 to the window "5", got "6"',
  });
  assert.throws(() => new Breaker({ failureRatio: 1.5, probeIntervalMs: 1 }), RangeError);
  assert.throws(() => new Breaker({ probeIntervalMs: -1 }), RangeError);
  assert.throws(() => new Breaker({ probeIntervalMs: NaN }), RangeError);
});
