/**
 * Equivalent mutants, written down: a mutant no test can kill because it does not change what the
 * code does (`x > y ? x : y` → `x >= y ? x : y`), each with the reason, in
 * `scripts/mutation_equivalents.json`. The runner skips them and reports them apart from the
 * survivors. A justification whose mutant no longer exists (its line was edited, or moved to
 * another file) is stale: the reason was given for code that is gone, and must be read again.
 *
 * @module
 */
import type { Mutant } from "./mutant.ts";

/** One justified equivalent mutant. */
export interface Equivalent {
  /** The mutant's stable id (see `mutant.ts`). */
  readonly id: string;
  readonly file: string;
  /** The span's text, and what the mutant puts there. */
  readonly original: string;
  readonly mutated: string;
  /** Why no test can tell the mutant from the original. */
  readonly reason: string;
}

/** A justification that no longer matches a mutant, and why. */
export interface Stale {
  readonly entry: Equivalent;
  readonly why: string;
}

/**
 * Reads the justification list's shape.
 *
 * @param source names the file in errors
 * @throws {TypeError} when it is not an array of complete entries, naming the entry and field
 */
export function parseEquivalents(data: unknown, source: string): Equivalent[] {
  if (!Array.isArray(data)) throw new TypeError(`${source}: must be an array`);
  const ids = new Set<string>();
  return data.map((entry, index) => {
    for (const field of ["id", "file", "original", "reason"]) {
      if (typeof entry?.[field] !== "string" || entry[field] === "") {
        throw new TypeError(`${source}: entry ${index} needs a non-empty string "${field}"`);
      }
    }
    if (typeof entry.mutated !== "string") {
      throw new TypeError(`${source}: entry ${index} needs a string "mutated"`);
    }
    if (ids.has(entry.id)) throw new TypeError(`${source}: entry ${index} repeats "${entry.id}"`);
    ids.add(entry.id);
    const { id, file, original, mutated, reason } = entry;
    return { id, file, original, mutated, reason };
  });
}

/**
 * The justifications whose mutant is not among `mutants` (every mutant of every file the
 * justifications name; a file absent from the map does not exist).
 */
export function staleEquivalents(
  equivalents: readonly Equivalent[],
  mutants: ReadonlyMap<string, readonly Mutant[]>,
): Stale[] {
  const stale: Stale[] = [];
  for (const entry of equivalents) {
    const ofFile = mutants.get(entry.file);
    const mutant = ofFile?.find((m) => m.id === entry.id);
    if (!ofFile) stale.push({ entry, why: `file "${entry.file}" not found` });
    else if (!mutant) stale.push({ entry, why: "no mutant has this id any more" });
    else if (mutant.original !== entry.original || mutant.replacement !== entry.mutated) {
      stale.push({
        entry,
        why: `the mutant now reads "${mutant.original}" → "${mutant.replacement}"`,
      });
    }
  }
  return stale;
}
