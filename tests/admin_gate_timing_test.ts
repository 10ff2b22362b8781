/**
 * The admin gate's match, timed as an attacker would like to time it: a target wrong in its first
 * segment, one wrong in its third, and a hit — all the same length — must take the same time. A
 * match that stopped at the first wrong segment would answer a first-segment miss about two HMACs
 * sooner than a third-segment miss, and let the segments be found one at a time.
 *
 * Pure-function level (no sockets: what is judged is `AdminGate.matches`, not the network's noise).
 * The statistics are `tests/hub_auth_timing_test.ts`'s (shared in `tests/fixtures/timing.ts`):
 *
 * - **Triplets in random order.** Each triplet times the three kinds back to back, in an order
 *   drawn at random; a time is {@link CALLS} calls, so it is well above the clock's resolution.
 *   `d = t(kind) − t(third-segment miss)` for the other two kinds. If the kind makes no difference,
 *   each `d`'s sign is a coin whatever the machine does meanwhile, and the Wilcoxon signed-rank
 *   statistic has its exact null distribution.
 * - **A strict level, in rounds.** A comparison differs in a round when |z| > 3.29 (p < 0.001,
 *   two-sided); the test fails when one comparison differs in two of {@link ROUNDS} rounds.
 * - **Enough triplets to see a small leak.** A round takes batches until a leak of
 *   {@link LEAK_MS} per time (1 µs a call, a third of one segment's HMAC) would be a difference,
 *   judged on the sizes `|d|` only; a round that cannot get there in {@link MAX_TRIPLETS} fails as
 *   too noisy to judge.
 *
 * Measured on two busy cores (load ~2): rounds of 750–2,500 triplets, |z| ≤ 2.2, 4–7 s in all.
 * With the match short-circuited (`&&` instead of the bitwise AND), the first-segment miss was
 * 170–230 µs a time faster, z −30 to −42 in every round; the hit and the third-segment miss,
 * which both still hash all three, stayed alike.
 *
 * @module
 */
import assert from "node:assert/strict";
import { AdminGate } from "../src/pipeline/admin_gate.ts";
import { leakPower, median, signedRankZ, timeInRandomOrder, Z_STRICT } from "./fixtures/timing.ts";

const CALLS = 16;
const BATCH = 250;
const MAX_TRIPLETS = 3000;
const WARM_UP = 300;
const ROUNDS = 3;
/** The smallest leak the test must see: 1 µs a call, over {@link CALLS} calls (ms). */
const LEAK_MS = 0.001 * CALLS;

const SLUG = "slug-0123456789abcdef";
const T1 = "t1_ABCDEFGHIJKLMNOPq";
const T2 = "t2-qrstuvwxyz0123456";

type Kind = "first" | "third" | "hit";
type Triplet = Record<Kind, number>;

/** One round: batches until both comparisons could see the leak; their z. */
function measureRound(
  round: number,
  time: Record<Kind, () => number>,
): { first: number; hit: number; line: string } {
  const triplets: Triplet[] = [];
  let power = 0;
  let first: number[] = [];
  let hit: number[] = [];
  while (triplets.length < MAX_TRIPLETS && power <= Z_STRICT) {
    for (let i = 0; i < BATCH; i++) triplets.push(timeInRandomOrder(time));
    first = triplets.map((t) => t.first - t.third);
    hit = triplets.map((t) => t.hit - t.third);
    power = Math.min(leakPower(first, LEAK_MS), leakPower(hit, LEAK_MS));
  }
  const z = { first: signedRankZ(first), hit: signedRankZ(hit) };
  const us = (ms: number) => `${(ms * 1000).toFixed(1)} µs`;
  const line = `round ${round}: ${triplets.length} triplets of ${CALLS} calls, median third-miss ` +
    `${us(median(triplets.map((t) => t.third)))}; first−third ${us(median(first))} ` +
    `z ${z.first.toFixed(2)}, hit−third ${us(median(hit))} z ${z.hit.toFixed(2)} ` +
    `(a ${us(LEAK_MS)} leak: ${power.toFixed(2)})`;
  console.log(line);
  assert.ok(power > Z_STRICT, `Too noisy to see the leak in ${MAX_TRIPLETS} triplets: ${line}`);
  return { ...z, line };
}

Deno.test("signedRankZ() is 0 for a symmetric sample and large for a shifted one", () => {
  const symmetric = Array.from({ length: 200 }, (_, i) => (i % 2 ? 1 : -1) * (i + 1));
  assert.ok(Math.abs(signedRankZ(symmetric)) < 0.1);
  assert.ok(signedRankZ(symmetric.map((x) => x + 150)) > 5);
});

Deno.test("AdminGate.matches() takes the same time for a miss in segment 1, a miss in segment 3 and a hit", () => {
  const gate = AdminGate.fromLine(`/${SLUG}/${T1}/${T2}/`);
  const flip = (segment: string) => segment.slice(0, -1) + (segment.endsWith("x") ? "y" : "x");
  const targets: Record<Kind, string> = {
    first: `/${flip(SLUG)}/${T1}/${T2}/status`,
    third: `/${SLUG}/${T1}/${flip(T2)}/status`,
    hit: `/${SLUG}/${T1}/${T2}/status`,
  };
  const expected: Record<Kind, boolean> = { first: false, third: false, hit: true };
  const timer = (kind: Kind) => () => {
    const target = targets[kind];
    let hits = 0;
    const start = performance.now();
    for (let i = 0; i < CALLS; i++) hits += Number(gate.matches(target));
    const ms = performance.now() - start;
    assert.equal(hits, expected[kind] ? CALLS : 0, kind);
    return ms;
  };
  const time = { first: timer("first"), third: timer("third"), hit: timer("hit") };
  for (let i = 0; i < WARM_UP; i++) timeInRandomOrder(time);

  const rounds = [];
  for (let round = 1; round <= ROUNDS; round++) rounds.push(measureRound(round, time));
  const seen = rounds.map((r) => r.line).join("\n");
  for (const kind of ["first", "hit"] as const) {
    const different = rounds.filter((r) => Math.abs(r[kind]) > Z_STRICT);
    assert.ok(
      different.length < 2,
      `${kind === "first" ? "A first-segment miss" : "A hit"} is told apart from a third-segment ` +
        `miss (p < 0.001 in ${different.length} of ${ROUNDS} rounds):\n${seen}`,
    );
  }
});
