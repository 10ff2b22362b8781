/**
 * The scaler's decisions with the time passed in (no waiting), and the rule that the last live
 * instance is never removed.
 *
 * @module
 */
import assert from "node:assert/strict";
import { busyFraction, type LoadSample, mayRemoveLast, Scaler } from "../src/torpool/scaler.ts";

const SETTINGS = { upThreshold: 0.8, downThreshold: 0.2, upAfterMs: 1000, cooldownMs: 5000 };

function sample(now: number, live: number, busy: number, count = live): LoadSample {
  return { now, live, busy, count, min: 1, max: 4 };
}

Deno.test("Scaler.decide() steps up only after the fraction stayed high for one probe interval", () => {
  const scaler = new Scaler(SETTINGS);
  assert.equal(scaler.decide(sample(0, 2, 2)), undefined);
  assert.equal(scaler.decide(sample(999, 2, 2)), undefined);
  assert.equal(scaler.decide(sample(1000, 2, 2)), "up");
  // The clock starts again: the next step needs another interval.
  assert.equal(scaler.decide(sample(1500, 3, 3)), undefined);
  assert.equal(scaler.decide(sample(2000, 3, 3)), "up");
});

Deno.test("Scaler.decide() forgets a high fraction that dipped, and stops at max", () => {
  const scaler = new Scaler(SETTINGS);
  scaler.decide(sample(0, 3, 3));
  assert.equal(scaler.decide(sample(500, 3, 2)), undefined, "0.67: between the thresholds");
  assert.equal(scaler.decide(sample(1200, 3, 3)), undefined, "high again since 1200");
  assert.equal(scaler.decide(sample(2199, 3, 3)), undefined);
  assert.equal(scaler.decide(sample(2200, 3, 3)), "up");
  const full = new Scaler(SETTINGS);
  full.decide({ ...sample(0, 4, 4), max: 4 });
  assert.equal(full.decide({ ...sample(5000, 4, 4), max: 4 }), undefined, "already at max");
});

Deno.test("Scaler.decide() steps down after scale_cooldown_ms below the threshold, not below min", () => {
  const scaler = new Scaler(SETTINGS);
  assert.equal(scaler.decide(sample(0, 3, 0)), undefined);
  assert.equal(scaler.decide(sample(4999, 3, 0)), undefined);
  assert.equal(scaler.decide(sample(5000, 3, 0)), "down");
  assert.equal(scaler.decide(sample(6000, 2, 0)), undefined, "a new cooldown after a step");
  assert.equal(scaler.decide(sample(10_000, 2, 0)), "down");
  assert.equal(scaler.decide(sample(20_000, 1, 0)), undefined, "min is 1");
  assert.equal(scaler.decide(sample(99_000, 1, 0)), undefined);
});

Deno.test("Scaler.decide() takes no step when nothing is live (an offline pool)", () => {
  const scaler = new Scaler(SETTINGS);
  for (const now of [0, 10_000, 100_000]) {
    assert.equal(scaler.decide(sample(now, 0, 0, 3)), undefined);
  }
  assert.deepEqual(scaler.marks, { aboveSince: undefined, belowSince: undefined });
  assert.equal(busyFraction(0, 0), undefined);
  assert.equal(busyFraction(4, 1), 0.25);
});

Deno.test("mayRemoveLast() never removes the last live instance", () => {
  assert.equal(mayRemoveLast(["ready"]), false, "never the only instance");
  assert.equal(mayRemoveLast(["bootstrapping", "ready"]), false);
  assert.equal(mayRemoveLast(["dead", "ready"]), false);
  assert.equal(mayRemoveLast(["ready", "ready"]), true);
  assert.equal(mayRemoveLast(["ready", "bootstrapping"]), true);
  assert.equal(mayRemoveLast(["starting", "dead"]), true, "no live instance to lose");
});
