/**
 * Judges one operator mutant in the scratch copy: its file is mutated, the test files that import
 * the module directly run (`--fail-fast`, most specific first); if all pass, those that import it
 * through other modules; with `--full`, then every other test file. The first failing run kills
 * it — once the failing files fail again against it and pass without it (see `stageRun`);
 * a run past its time limit (three times its files' baseline, at least 60 s) counts as killed
 * too. The file is restored after every run, so the copy is clean whenever a baseline runs.
 *
 * Baselines are per test file, each run alone on the unmutated copy once and kept in the results
 * file: a stage's time limit is three times the sum of its files' baselines; a file that fails
 * unmutated is left out of every stage (and named in the report) instead of killing every mutant.
 * Running each file alone once costs one sequential pass of the suite at most, where a baseline
 * per distinct test set would cost one per module.
 *
 * @module
 */
import { join } from "node:path";
import { applyMutant, type Mutant } from "./mutant.ts";
import {
  appendResult,
  type MutantRecord,
  mutantRecord,
  type Results,
  type Stage,
} from "./results.ts";
import { type ImportGraph, selectTests } from "./test_graph.ts";
import { failingFiles, killedBy, runTests, type TestRun } from "./test_run.ts";

/** What every mutant of a run is judged with. */
export interface RunContext {
  /** The scratch copy of the repository. */
  readonly scratch: string;
  readonly graph: ImportGraph;
  /** Baselines and verdicts so far (baselines are added as they run). */
  readonly results: Results;
  /** Where records are appended. */
  readonly resultsPath: string;
  /** Also run every remaining test file for mutants the importers do not kill. */
  readonly full: boolean;
  /** At most this many transitive importers (the nearest), when set. */
  readonly transitiveLimit?: number;
  /** A fixed time limit per run instead of three times the baseline. */
  readonly timeoutMs?: number;
  /** How long one test file may take on its baseline run. */
  readonly baselineTimeoutMs: number;
  readonly signal: AbortSignal;
  readonly log: (line: string) => void;
}

/** The stages for mutants of `module`: each a name and its test files, in order. */
export function stagesFor(context: RunContext, module: string): [Stage, string[]][] {
  const selection = selectTests(context.graph, module);
  const transitive = selection.transitive.slice(0, context.transitiveLimit);
  const stages: [Stage, string[]][] = [
    ["direct", [...selection.direct]],
    ["transitive", transitive],
  ];
  if (context.full) {
    const run = new Set([...selection.direct, ...transitive]);
    stages.push(["full", context.graph.tests.filter((test) => !run.has(test))]);
  }
  return stages;
}

/** Runs each of `files` alone on the unmutated copy, once per results file. */
async function baselines(
  context: RunContext,
  files: readonly string[],
): Promise<{ passing: string[]; failing: string[]; ms: number }> {
  const passing: string[] = [];
  const failing: string[] = [];
  let ms = 0;
  for (const file of files) {
    let baseline = context.results.baselines.get(file);
    if (!baseline) {
      const run = await runTests(context.scratch, [file], {
        timeoutMs: context.baselineTimeoutMs,
        signal: context.signal,
      });
      if (context.signal.aborted) break;
      baseline = { type: "baseline", file, status: run.status, ms: Math.round(run.ms) };
      context.results.baselines.set(file, baseline);
      await appendResult(context.resultsPath, baseline);
      const note = run.status === "pass" ? "" : `  — left out of every stage (${run.status})`;
      context.log(`baseline  ${file}  ${(run.ms / 1000).toFixed(1)} s${note}`);
    }
    if (baseline.status === "pass") {
      passing.push(file);
      ms += baseline.ms;
    } else failing.push(file);
  }
  return { passing, failing, ms };
}

/** The mutant being judged: its file's text both ways, and what its runs found out. */
interface Subject {
  readonly path: string;
  readonly source: string;
  readonly mutated: string;
  /** Test files that failed against it once and passed when run again. */
  readonly flaky: string[];
  /** Test files found failing on the unmutated copy while it was judged. */
  readonly dropped: string[];
}

/** Runs `files` against the mutated file, restoring the original afterwards. */
async function mutatedRun(
  context: RunContext,
  subject: Subject,
  files: readonly string[],
  timeoutMs: number,
): Promise<TestRun> {
  await Deno.writeTextFile(subject.path, subject.mutated);
  try {
    return await runTests(context.scratch, files, {
      timeoutMs,
      signal: context.signal,
      flags: ["--fail-fast"],
    });
  } finally {
    await Deno.writeTextFile(subject.path, subject.source);
  }
}

/** Records `files` as failing on the unmutated copy: left out of every later stage. */
async function baselineBroken(context: RunContext, files: readonly string[], ms: number) {
  for (const file of files) {
    const baseline = { type: "baseline" as const, file, status: "fail" as const, ms };
    context.results.baselines.set(file, baseline);
    await appendResult(context.resultsPath, baseline);
    context.log(`baseline  ${file}  now fails unmutated — left out of every stage`);
  }
}

/** How often a stage runs when its failures do not hold up (see {@link stageRun}). */
const STAGE_ATTEMPTS = 3;
const PASSED: TestRun = { status: "pass", ms: 0, output: "" };

/**
 * One stage against the mutant; a failure kills it only when the failing files (all of the
 * stage's when the failure named none) fail again against it and pass without it. When they pass
 * against it the second time, the failure was a flake (a timing test on a loaded machine); when
 * they fail without it too, their baseline no longer holds (the tree changed since, or they broke
 * under load) and they are left out. Either way the stage runs again, up to
 * {@link STAGE_ATTEMPTS} times, after which it counts as passed and the mutant goes on (or
 * survives, for a person to judge).
 *
 * @returns the run whose answer stands, and the files it ran
 */
async function stageRun(
  context: RunContext,
  subject: Subject,
  files: readonly string[],
  timeoutMs: number,
): Promise<{ run: TestRun; ran: string[] }> {
  const passed: string[] = [];
  let current = [...files];
  for (let attempt = 1; attempt <= STAGE_ATTEMPTS && current.length > 0; attempt++) {
    const run = await mutatedRun(context, subject, current, timeoutMs);
    if (run.status !== "fail" || context.signal.aborted) {
      return { run, ran: [...passed, ...current] };
    }
    const named = failingFiles(run.output).filter((test) => current.includes(test));
    const suspects = named.length > 0 ? named : current;
    // `deno test` runs files in the order given and stops at the first failure: those before it
    // passed against the mutant, and a new attempt starts from the failing file.
    const first = Math.min(...suspects.map((test) => current.indexOf(test)));
    passed.push(...current.slice(0, first));
    current = current.slice(first);
    const again = await mutatedRun(context, subject, suspects, timeoutMs);
    if (context.signal.aborted) return { run, ran: [...passed, ...suspects] };
    if (again.status === "pass") {
      for (const test of named) if (!subject.flaky.includes(test)) subject.flaky.push(test);
      const which = named.length > 0 ? named.join(" ") : "(a failure that named no test file)";
      context.log(`flaky     ${which}: failed once, passed again (attempt ${attempt})`);
      continue;
    }
    const clean = await runTests(context.scratch, suspects, { timeoutMs, signal: context.signal });
    if (clean.status === "pass" || context.signal.aborted) {
      return { run, ran: [...passed, ...suspects] };
    }
    // A file is left out only when it fails unmutated on its own, too: a group that fails
    // together on a loaded machine (one file's timeout) does not cost every file in it.
    const broken: string[] = [];
    for (const test of suspects) {
      const alone = await runTests(context.scratch, [test], { timeoutMs, signal: context.signal });
      if (context.signal.aborted) return { run, ran: [...passed, ...suspects] };
      if (alone.status !== "pass") broken.push(test);
    }
    if (broken.length === 0) {
      context.log(`flaky     ${suspects.join(" ")}: failed unmutated together, passed alone`);
      continue;
    }
    await baselineBroken(context, broken, Math.round(clean.ms));
    subject.dropped.push(...broken);
    current = current.filter((test) => !broken.includes(test));
  }
  return { run: PASSED, ran: passed };
}

/**
 * Judges `mutant` in the scratch copy and appends its record.
 *
 * @returns the record, or undefined when the run was interrupted (nothing recorded)
 */
export async function judge(
  context: RunContext,
  mutant: Mutant,
): Promise<MutantRecord | undefined> {
  const path = join(context.scratch, mutant.file);
  const source = await Deno.readTextFile(path);
  const mutated = applyMutant(source, mutant);
  const subject: Subject = { path, source, mutated, flaky: [], dropped: [] };
  const started = performance.now();
  const tests: string[] = [];
  const skipped: string[] = [];
  const verdict = async (
    fields: Pick<MutantRecord, "outcome" | "stage" | "killedBy">,
  ): Promise<MutantRecord> => {
    const ms = Math.round(performance.now() - started);
    const record = mutantRecord(mutant, {
      ...fields,
      tests,
      skipped: [...skipped, ...subject.dropped],
      flaky: subject.flaky,
      ms,
    });
    context.results.mutants.set(mutant.id, record);
    await appendResult(context.resultsPath, record);
    return record;
  };
  for (const [stage, files] of stagesFor(context, mutant.file)) {
    if (files.length === 0) continue;
    const base = await baselines(context, files);
    if (context.signal.aborted) return undefined;
    skipped.push(...base.failing);
    if (base.passing.length === 0) continue;
    const timeoutMs = context.timeoutMs ?? Math.max(60_000, 3 * base.ms);
    const { run, ran } = await stageRun(context, subject, base.passing, timeoutMs);
    if (context.signal.aborted) return undefined;
    tests.push(...ran);
    if (run.status === "fail") {
      return await verdict({ outcome: "killed", stage, killedBy: killedBy(run.output) });
    }
    if (run.status === "timeout") return await verdict({ outcome: "timeout", stage });
  }
  return await verdict({ outcome: tests.length === 0 ? "no tests" : "survived" });
}
