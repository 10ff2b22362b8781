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
