/**
 * "Did you mean …?": the known word closest to what was written, for a misspelt verb, method or
 * enum value. Closeness is the optimal-string-alignment distance (insertions, deletions,
 * substitutions and swaps of two neighbours each cost 1), so `HEDA` is one step from `HEAD` and
 * `chek` one from `check`; letter case is ignored, so `get` suggests `GET`.
 *
 * @module
 */

/**
 * The candidate closest to `word`, when it is close enough to be a slip: 1 step for a word of up
 * to 3 letters, 2 for a longer one (so `x` does not suggest `GET`). Ties go to the candidate
 * listed first.
 *
 * @param word what was written
 * @param candidates the known words
 * @returns the suggestion, or undefined
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { closest } from "./suggest.ts";
 * assert.equal(closest("HEDA", ["GET", "HEAD", "POST"]), "HEAD");
 * assert.equal(closest("chek", ["serve", "check", "flags"]), "check");
 * assert.equal(closest("get", ["GET", "HEAD"]), "GET");
 * assert.equal(closest("deploy", ["serve", "check", "flags"]), undefined);
 * ```
 */
export function closest(word: string, candidates: readonly string[]): string | undefined {
  const folded = word.toLowerCase();
  let best: string | undefined;
  let bestDistance = Infinity;
  for (const candidate of candidates) {
    const distance = editDistance(folded, candidate.toLowerCase());
    if (distance < bestDistance) {
      best = candidate;
      bestDistance = distance;
    }
  }
  return bestDistance <= (word.length <= 3 ? 1 : 2) ? best : undefined;
}

/**
 * The optimal-string-alignment distance between `a` and `b` (Damerau-Levenshtein without
 * overlapping edits), by the usual dynamic programme over three rows.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { editDistance } from "./suggest.ts";
 * assert.equal(editDistance("heda", "head"), 1);
 * assert.equal(editDistance("kitten", "sitting"), 3);
 * ```
 */
export function editDistance(a: string, b: string): number {
  let before: number[] = [];
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const current = [i];
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      let distance = Math.min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) {
        distance = Math.min(distance, before[j - 2] + 1);
      }
      current.push(distance);
    }
    before = previous;
    previous = current;
  }
  return previous[b.length];
}
