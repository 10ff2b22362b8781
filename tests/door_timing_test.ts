/**
 * The door's slug matcher, timed: a hit on the first slug, a hit on the last slug and a miss must
 * take the same time, or a prober could learn where a slug sits, or that it is one. The approach
 * of `hub_auth_timing_test.ts`, in process (the matcher alone, so network noise does not hide a
 * leak of a few microseconds):
 *
 * - **Triples in random order.** Each triple times the three candidates back to back (each sample
 *   {@link REPEAT} matches), in an order a shuffle decides; `d = t(hit) − t(miss)` for the first
 *   and for the last slug. If the candidate makes no difference, each `d`'s sign is the shuffle's,
 *   so the Wilcoxon signed-rank statistic has its exact null distribution whatever the machine does
 *   meanwhile (GC, load bursts hit all three members alike).
 * - **A strict level, in rounds.** A round counts as a difference when |z| > 3.29 (p < 0.001,
 *   two-sided); the test fails when two of {@link ROUNDS} rounds do, for either hit.
 * - **Power, shown.** The same procedure on a matcher that stops at the first equal slug (the
 *   mistake this guards against) must find the difference — else the test could not fail.
 *
 * Bounded: {@link PAIRS} triples a round, a few seconds in all.
 *
 * @module
 */
import assert from "node:assert/strict";
import { createHmac, randomBytes, timingSafeEqual } from "node:crypto";
import { SlugMatcher } from "../src/door/matcher.ts";
import { signedRankZ, timeInRandomOrder, Z_STRICT } from "./fixtures/timing.ts";

const SLUGS = 64;
const REPEAT = 4;
const PAIRS = 600;
const WARM_UP = 100;
const ROUNDS = 3;

/** A slug of the shape operators write: 24 letters and digits. */
function randomSlug(): string {
  return crypto.randomUUID().replaceAll("-", "").slice(0, 24);
}

/** Times `match(candidate)` {@link REPEAT} times, in ms. */
function time(match: (candidate: string) => number, candidate: string): number {
  const start = performance.now();
  for (let i = 0; i < REPEAT; i++) match(candidate);
  return performance.now() - start;
}

/** One round's z for (first − miss) and (last − miss). */
function round(match: (candidate: string) => number, slugs: readonly string[]) {
  const miss = randomSlug();
  const triple = {
    first: () => time(match, slugs[0]),
    last: () => time(match, slugs[slugs.length - 1]),
    miss: () => time(match, miss),
  };
  const first: number[] = [];
  const last: number[] = [];
  for (let pair = 0; pair < WARM_UP + PAIRS; pair++) {
    const times = timeInRandomOrder(triple);
    if (pair < WARM_UP) continue;
    first.push(times.first - times.miss);
    last.push(times.last - times.miss);
  }
  return { first: signedRankZ(first), last: signedRankZ(last) };
}

/** Rounds of the procedure; how many rounds found a difference for the first and last slug. */
function judge(match: (candidate: string) => number, slugs: readonly string[]) {
  const rounds = Array.from({ length: ROUNDS }, () => round(match, slugs));
  const seen = rounds.map((r) => `z first ${r.first.toFixed(2)}, last ${r.last.toFixed(2)}`);
  return {
    first: rounds.filter((r) => Math.abs(r.first) > Z_STRICT).length,
    last: rounds.filter((r) => Math.abs(r.last) > Z_STRICT).length,
    seen: seen.join("; "),
  };
}

Deno.test("signedRankZ() is 0 for a symmetric sample and large for a shifted one", () => {
  const symmetric = Array.from({ length: 200 }, (_, i) => (i % 2 ? 1 : -1) * (i + 1));
  assert.ok(Math.abs(signedRankZ(symmetric)) < 0.1);
  assert.ok(signedRankZ(symmetric.map((x) => x + 150)) > 5);
});

Deno.test("the timing procedure finds a matcher that stops at the first equal slug", () => {
  // The real matcher's work per slug (an HMAC, then 32-byte comparisons), with an early exit.
  const slugs = Array.from({ length: SLUGS }, randomSlug);
  const key = randomBytes(32);
  const digest = (text: string) => createHmac("sha256", key).update(text).digest();
  const digests = slugs.map(digest);
  const leaky = (candidate: string) => {
    const mine = digest(candidate);
    for (let i = 0; i < digests.length; i++) if (timingSafeEqual(digests[i], mine)) return i;
    return -1;
  };
  const found = judge(leaky, slugs);
  console.log(`early exit: ${found.seen}`);
  assert.ok(found.first >= 2, `An early exit must show on the first slug: ${found.seen}`);
});

Deno.test("SlugMatcher.match() takes the same time for the first slug, the last slug and a miss", () => {
  const slugs = Array.from({ length: SLUGS }, randomSlug);
  const matcher = new SlugMatcher(slugs);
  assert.equal(matcher.match(slugs[0]), 0);
  assert.equal(matcher.match(slugs[SLUGS - 1]), SLUGS - 1);
  assert.equal(matcher.match(randomSlug()), -1);
  const found = judge((candidate) => matcher.match(candidate), slugs);
  console.log(found.seen);
  assert.ok(found.first < 2, `A hit on the first slug is told apart from a miss: ${found.seen}`);
  assert.ok(found.last < 2, `A hit on the last slug is told apart from a miss: ${found.seen}`);
});
