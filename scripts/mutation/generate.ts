/**
 * The mutants of a set of modules: each file parsed once inside one typed program (so `??` can be
 * judged by type, see `nullish.ts`), its operator edits found and given stable ids; then, with
 * `--changed`, only those on changed lines kept. Ids are always counted over the whole file, so a
 * mutant has the same id whether or not `--changed` narrowed the run.
 *
 * @module
 */
import { join } from "node:path";
import type { Mutant, Operator } from "./mutant.ts";
import { nullishJudge, typedProgram } from "./nullish.ts";
import { mutantsOf } from "./operators.ts";
import { type ChangedLines, touches } from "./scope.ts";

/** How {@link generate} works. */
export interface GenerateOptions {
  /** Only these operators; all when absent. */
  readonly operators?: ReadonlySet<Operator>;
}

/**
 * Every mutant of each of `files` (paths from `root`) that exists; a missing file is absent from
 * the map.
 */
export async function generate(
  root: string,
  files: readonly string[],
  options: GenerateOptions = {},
): Promise<Map<string, Mutant[]>> {
  const present: string[] = [];
  for (const file of new Set(files)) {
    try {
      if ((await Deno.stat(join(root, file))).isFile) present.push(file);
    } catch { /* absent */ }
  }
  const program = typedProgram(root, present);
  const nullish = nullishJudge(program);
  const found = new Map<string, Mutant[]>();
  for (const file of present) {
    const source = program.getSourceFile(join(root, file));
    if (!source) throw new Error(`Cannot parse "${file}"`);
    found.set(file, mutantsOf(file, source, { nullish, operators: options.operators }));
  }
  return found;
}

/** The mutants whose span touches a changed line. */
export function onChangedLines(mutants: readonly Mutant[], changed: ChangedLines): Mutant[] {
  return mutants.filter((mutant) => {
    const lines = mutant.original.split("\n").length - 1;
    return touches(changed, mutant.file, mutant.line, mutant.line + lines);
  });
}

/**
 * True when `id` falls in a sample of about `fraction` of all mutants. The choice is a hash of the
 * id alone (FNV-1a), so a mutant is in or out of the sample whatever else changed, a resumed run
 * keeps the same sample, and a larger fraction holds every mutant of a smaller one.
 *
 * @param fraction in (0, 1]; 1 keeps every mutant
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { inSample } from "./generate.ts";
 * assert.equal(inSample("src/a.ts:number:0123456789", 1), true);
 * assert.equal(inSample("src/a.ts:number:0123456789", 0.5), inSample("src/a.ts:number:0123456789", 0.5));
 * ```
 */
export function inSample(id: string, fraction: number): boolean {
  let hash = 0x811c9dc5;
  for (let i = 0; i < id.length; i++) {
    hash ^= id.charCodeAt(i);
    hash = Math.imul(hash, 0x01000193) >>> 0;
  }
  return hash / 0x1_0000_0000 < fraction;
}
