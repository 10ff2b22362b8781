/**
 * The results file of an operator run: one JSON record a line, appended as each baseline and each
 * mutant finishes, so that a run of hours that is interrupted (or a machine that restarts)
 * continues where it stopped with `--resume` instead of starting over. A line cut off by a crash
 * is ignored on reading. Records name mutants by their stable id, so a resumed run skips exactly
 * the mutants it already judged, even after small edits elsewhere in their files.
 *
 * @module
 */
import { dirname } from "node:path";
import type { Mutant, Operator } from "./mutant.ts";

/** A test file run alone on the unmutated tree: whether it passes, and how long it takes. */
export interface BaselineRecord {
  readonly type: "baseline";
  readonly file: string;
  readonly status: "pass" | "fail" | "timeout";
  readonly ms: number;
}

/** Which set of tests a mutant was run against. */
export type Stage = "direct" | "transitive" | "full";

/** What became of a mutant: `timeout` counts as killed; `no tests` as a survivor. */
export type Outcome = "killed" | "timeout" | "survived" | "no tests";

/** One judged mutant. */
export interface MutantRecord {
  readonly type: "mutant";
  readonly id: string;
  readonly file: string;
  readonly line: number;
  readonly column: number;
  readonly operator: Operator;
  readonly original: string;
  readonly replacement: string;
  readonly outcome: Outcome;
  /** The stage whose tests killed it. */
  readonly stage?: Stage;
  readonly killedBy?: string;
  /** Every test file run against it, in order. */
  readonly tests: readonly string[];
  /** Test files left out because they fail on the unmutated tree. */
  readonly skipped: readonly string[];
  /** Test files that failed once against it and passed when run again. */
  readonly flaky?: readonly string[];
  readonly ms: number;
}

/** The start of one run (or of one resumption). */
export interface RunRecord {
  readonly type: "run";
  readonly started: string;
  readonly args: readonly string[];
}

/** A line of the results file. */
export type ResultRecord = BaselineRecord | MutantRecord | RunRecord;

/** What a results file holds: the latest baseline per test file, the latest result per mutant. */
export interface Results {
  readonly baselines: Map<string, BaselineRecord>;
  readonly mutants: Map<string, MutantRecord>;
}

/** Reads the results file at `path` (absent: empty results). */
export async function readResults(path: string): Promise<Results> {
  const results: Results = { baselines: new Map(), mutants: new Map() };
  let text: string;
  try {
    text = await Deno.readTextFile(path);
  } catch (error) {
    if (error instanceof Deno.errors.NotFound) return results;
    throw error;
  }
  for (const line of text.split("\n")) {
    let record: ResultRecord;
    try {
      record = JSON.parse(line);
    } catch {
      continue; // empty, or cut off by a crash
    }
    if (record?.type === "baseline") results.baselines.set(record.file, record);
    else if (record?.type === "mutant") results.mutants.set(record.id, record);
  }
  return results;
}

/** Appends one record to the results file at `path` (made, with its folder, when absent). */
export async function appendResult(path: string, record: ResultRecord): Promise<void> {
  await Deno.mkdir(dirname(path), { recursive: true });
  await Deno.writeTextFile(path, JSON.stringify(record) + "\n", { append: true });
}

/** The record of `mutant`'s verdict. */
export function mutantRecord(
  mutant: Mutant,
  verdict: Pick<
    MutantRecord,
    "outcome" | "stage" | "killedBy" | "tests" | "skipped" | "flaky" | "ms"
  >,
): MutantRecord {
  const { id, file, line, column, operator, original, replacement } = mutant;
  return { type: "mutant", id, file, line, column, operator, original, replacement, ...verdict };
}
