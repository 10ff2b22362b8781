import assert from "node:assert/strict";
import { NegativeCache, pickBackend } from "../src/egress/negative_cache.ts";

/** A cache on a settable clock: 3 failures make a backend cold for 5 s. */
function makeCache(failures = 3) {
  const time = { now: 0 };
  const cache = new NegativeCache({ failures, ttlMs: 5000 }, () => time.now);
  return { cache, time };
}

/** A random() that answers `values` in turn. */
function scripted(values: number[]): () => number {
  let next = 0;
  return function scriptedRandom() {
    return values[next++ % values.length];
  };
}

/** The keys picked for each value of a scripted random. */
function picks(
  backends: readonly { key: string; weight: number }[],
  cache: NegativeCache,
  values: number[],
) {
  const random = scripted(values);
  return values.map(() => pickBackend(backends, cache, random)?.key);
}

const BACKENDS = [{ key: "a", weight: 1 }, { key: "b", weight: 3 }, { key: "c", weight: 6 }];

Deno.test("NegativeCache.failure() makes a backend cold at the threshold, not before", () => {
  const { cache, time } = makeCache();
  time.now = 100;
  cache.failure("a");
  cache.failure("a");
  assert.equal(cache.isCold("a"), false);
  assert.deepEqual(cache.snapshot(), [
    { backend: "a", state: "healthy", consecutive_failures: 2, cold_for_ms: 0 },
  ]);
  cache.failure("a");
  assert.equal(cache.isCold("a"), true);
  assert.equal(cache.isCold("b"), false);
  assert.deepEqual(cache.snapshot(), [{
    backend: "a",
    state: "cold",
    consecutive_failures: 3,
    cold_for_ms: 5000,
  }]);
});

Deno.test("NegativeCache.isCold() ends at the TTL, and the backend starts over", () => {
  const { cache, time } = makeCache();
  cache.failure("a");
  cache.failure("a");
  cache.failure("a");
  time.now = 4999;
  assert.equal(cache.isCold("a"), true);
  assert.deepEqual(cache.snapshot(), [
    { backend: "a", state: "cold", consecutive_failures: 3, cold_for_ms: 1 },
  ]);
  time.now = 5000;
  assert.equal(cache.isCold("a"), false);
  assert.deepEqual(cache.snapshot(), [], "an expired entry with no failure since is dropped");
  cache.failure("a");
  assert.equal(cache.isCold("a"), false, "one failure after the TTL is not enough");
  cache.failure("a");
  cache.failure("a");
  assert.equal(cache.isCold("a"), true);
  assert.equal(cache.snapshot()[0].cold_for_ms, 5000);
});

Deno.test("NegativeCache.success() resets the run and deletes the entry", () => {
  const { cache } = makeCache();
  cache.failure("a");
  cache.failure("a");
  cache.success("a");
  cache.failure("a");
  cache.failure("a");
  assert.equal(cache.isCold("a"), false, "the run restarted at the success");
  cache.success("a");
  assert.deepEqual(cache.snapshot(), []);
  cache.failure("b");
  cache.failure("b");
  cache.failure("b");
  cache.success("b");
  assert.equal(cache.isCold("b"), false, "a success ends a cold period too");
  cache.success("never-failed");
  assert.deepEqual(cache.snapshot(), []);
});

Deno.test("NegativeCache.snapshot() lists failing backends in first-failure order", () => {
  const { cache, time } = makeCache(2);
  cache.failure("b");
  cache.failure("a");
  cache.failure("a");
  time.now = 1500;
  assert.deepEqual(cache.snapshot(), [
    { backend: "b", state: "healthy", consecutive_failures: 1, cold_for_ms: 0 },
    { backend: "a", state: "cold", consecutive_failures: 2, cold_for_ms: 3500 },
  ]);
});

Deno.test("NegativeCache() rejects a threshold below 1 and a negative TTL", () => {
  assert.throws(() => new NegativeCache({ failures: 0, ttlMs: 1 }, () => 0), {
    name: "RangeError",
    message: 'Negative cache failures must be a whole number ≥ 1, got "0"',
  });
  assert.throws(() => new NegativeCache({ failures: 1.5, ttlMs: 1 }, () => 0), RangeError);
  assert.throws(() => new NegativeCache({ ttlMs: -1 }, () => 0), RangeError);
  const defaults = new NegativeCache({ ttlMs: 10 }, () => 0);
  defaults.failure("x");
  defaults.failure("x");
  assert.equal(defaults.isCold("x"), false);
  defaults.failure("x");
  assert.equal(defaults.isCold("x"), true, "the default threshold is 3");
});

Deno.test("pickBackend() picks by weight over cumulative ranges", () => {
  const { cache } = makeCache();
  // a: [0, 0.1), b: [0.1, 0.4), c: [0.4, 1)
  assert.deepEqual(picks(BACKENDS, cache, [0, 0.0999, 0.1, 0.3999, 0.4, 0.9999]), [
    "a",
    "a",
    "b",
    "b",
    "c",
    "c",
  ]);
});

Deno.test("pickBackend() leaves cold backends out and reweighs the rest", () => {
  const { cache } = makeCache(1);
  cache.failure("c");
  // a: [0, 0.25), b: [0.25, 1)
  assert.deepEqual(picks(BACKENDS, cache, [0, 0.2499, 0.25, 0.9999]), ["a", "a", "b", "b"]);
  cache.failure("a");
  assert.deepEqual(picks(BACKENDS, cache, [0, 0.5, 0.9999]), ["b", "b", "b"]);
});

Deno.test("pickBackend() fails open by weight among all when every backend is cold", () => {
  const { cache } = makeCache(1);
  for (const { key } of BACKENDS) cache.failure(key);
  assert.deepEqual(picks(BACKENDS, cache, [0.05, 0.2, 0.7]), ["a", "b", "c"]);
  let counts = { a: 0, b: 0, c: 0 };
  const steps = Array.from({ length: 100 }, (_, i) => i / 100);
  for (const key of picks(BACKENDS, cache, steps)) {
    counts = { ...counts, [key!]: counts[key as "a"] + 1 };
  }
  assert.deepEqual(counts, { a: 10, b: 30, c: 60 });
});

Deno.test("pickBackend() never picks weight 0 and answers undefined with nothing to pick", () => {
  const { cache } = makeCache();
  const backends = [{ key: "zero", weight: 0 }, { key: "one", weight: 1 }];
  assert.deepEqual(picks(backends, cache, [0, 0.5, 0.9999]), ["one", "one", "one"]);
  assert.equal(pickBackend([], cache, () => 0), undefined);
  assert.equal(pickBackend([{ key: "zero", weight: 0 }], cache, () => 0), undefined);
});
