/**
 * A mirror's verdict for every combination of region answers, and its age: none, all ok, all
 * failed, mixed, no region answered, fresh, at the edge of staleness and past it.
 *
 * @module
 */
import assert from "node:assert/strict";
import { type RegionAnswer, type Verdict, verdictOf } from "../src/hub/mirrors/verdict.ts";

const INTERVAL = 60_000;
const NOW = 10_000_000;

function result(answers: RegionAnswer[], ageMs = 0) {
  return { at: NOW - ageMs, regions: new Map(answers.map((a, i) => [`r${i}`, a])) };
}

Deno.test("verdictOf() for every mix of answers from one to three regions", () => {
  const expected = (answers: RegionAnswer[]): Verdict => {
    const ok = answers.filter((a) => a === "ok").length;
    return ok === answers.length ? "live" : ok === 0 ? "blocked" : "degraded";
  };
  let cases = 0;
  for (let n = 1; n <= 3; n++) {
    for (let mask = 0; mask < 2 ** n; mask++) {
      const answers = Array.from(
        { length: n },
        (_, i) => (mask >> i & 1 ? "ok" : "failed") as RegionAnswer,
      );
      assert.equal(
        verdictOf(result(answers), { now: NOW, intervalMs: INTERVAL }),
        expected(answers),
        answers.join(","),
      );
      cases++;
    }
  }
  assert.equal(cases, 14);
  assert.equal(verdictOf(result(["ok", "ok"]), { now: NOW, intervalMs: INTERVAL }), "live");
  assert.equal(verdictOf(result(["ok", "failed"]), { now: NOW, intervalMs: INTERVAL }), "degraded");
  assert.equal(
    verdictOf(result(["failed", "failed"]), { now: NOW, intervalMs: INTERVAL }),
    "blocked",
  );
});

Deno.test("verdictOf() is unknown with no result, no answering region, or a result over three intervals old", () => {
  const clock = { now: NOW, intervalMs: INTERVAL };
  assert.equal(verdictOf(undefined, clock), "unknown");
  assert.equal(verdictOf(result([]), clock), "unknown");
  for (const answers of [["ok"], ["failed"], ["ok", "failed"]] as RegionAnswer[][]) {
    assert.notEqual(
      verdictOf(result(answers, 3 * INTERVAL), clock),
      "unknown",
      "three intervals is still fresh",
    );
    assert.equal(verdictOf(result(answers, 3 * INTERVAL + 1), clock), "unknown");
  }
});
