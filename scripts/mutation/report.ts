/**
 * The survivors report of an operator run (markdown) and its one-line summary. The score is
 * counted per folder as killed / (mutants − equivalent), the figure issue 33's acceptance asks for;
 * a mutant that no test imports counts as a survivor, one not yet run (an interrupted run) as not
 * killed, so an incomplete run never reads better than it is.
 *
 * @module
 */
import { dirname } from "node:path";
import type { Equivalent, Stale } from "./equivalents.ts";
import { type Mutant, mutantLines } from "./mutant.ts";
import type { MutantRecord } from "./results.ts";

/** What a report is made from. */
export interface ReportInput {
  /** The mutants this run chose, in order. */
  readonly mutants: readonly Mutant[];
  /** Verdicts by mutant id (from this run and the runs it resumed). */
  readonly verdicts: ReadonlyMap<string, MutantRecord>;
  /** Justified equivalents by mutant id. */
  readonly equivalents: ReadonlyMap<string, Equivalent>;
  readonly stale: readonly Stale[];
  /** Test files left out because they fail unmutated. */
  readonly skippedTests: readonly string[];
  /** The unmutated text of each mutated file. */
  readonly sources: ReadonlyMap<string, string>;
  readonly elapsedMs: number;
  /** The fraction of the mutants sampled (`--sample`), when not all were chosen. */
  readonly sample?: number;
}

/** Counts for one folder (or all). */
export interface Tally {
  mutants: number;
  equivalent: number;
  killed: number;
  survived: number;
  notRun: number;
}

const newTally = (): Tally => ({ mutants: 0, equivalent: 0, killed: 0, survived: 0, notRun: 0 });

/** killed / (mutants − equivalent), as a percentage; 100 when nothing is left to kill. */
export function score(tally: Tally): number {
  const counted = tally.mutants - tally.equivalent;
  return counted === 0 ? 100 : (100 * tally.killed) / counted;
}

/** The tallies per folder (sorted) and in all. */
export function tallies(input: ReportInput): { folders: Map<string, Tally>; all: Tally } {
  const folders = new Map<string, Tally>();
  const all = newTally();
  for (const mutant of input.mutants) {
    const folder = dirname(mutant.file);
    if (!folders.has(folder)) folders.set(folder, newTally());
    for (const tally of [folders.get(folder)!, all]) {
      tally.mutants++;
      const outcome = input.verdicts.get(mutant.id)?.outcome;
      if (input.equivalents.has(mutant.id)) tally.equivalent++;
      else if (outcome === "killed" || outcome === "timeout") tally.killed++;
      else if (outcome === "survived" || outcome === "no tests") tally.survived++;
      else tally.notRun++;
    }
  }
  return { folders: new Map([...folders].sort(([a], [b]) => a.localeCompare(b))), all };
}

const duration = (ms: number) => {
  const seconds = Math.round(ms / 1000);
  return seconds < 60 ? `${seconds} s` : `${Math.floor(seconds / 60)} min ${seconds % 60} s`;
};
const code = (text: string) => `\`${text.replaceAll("`", "'").replaceAll("\n", "⏎")}\``;

/** The one-line summary printed at the end of a run. */
export function summaryLine(input: ReportInput): string {
  const { all } = tallies(input);
  const sampled = input.sample === undefined ? "" : ` (a ${100 * input.sample} % sample)`;
  return `mutate:ops: ${all.mutants} mutants${sampled}, ${all.killed} killed, ${all.survived} survived, ` +
    `${all.equivalent} equivalent` + (all.notRun > 0 ? `, ${all.notRun} not run` : "") +
    (input.stale.length > 0 ? `, ${input.stale.length} stale justifications` : "") +
    `; score ${score(all).toFixed(1)} % (${duration(input.elapsedMs)})`;
}

function survivorSection(input: ReportInput, mutant: Mutant, record: MutantRecord): string[] {
  const { before, after } = mutantLines(input.sources.get(mutant.file) ?? "", mutant);
  const tests = record.tests.length === 0
    ? "none — no test file imports this module (only `--full` would reach it)"
    : record.tests.slice(0, 6).join(", ") +
      (record.tests.length > 6 ? ` and ${record.tests.length - 6} more` : "");
  return [
    `### ${mutant.file}:${mutant.line}:${mutant.column} — ${mutant.operator}`,
    "",
    `id ${code(mutant.id)}: ${code(mutant.original)} → ${code(mutant.replacement)}`,
    "",
    "```diff",
    ...before.split("\n").map((line) => `- ${line}`),
    ...after.split("\n").map((line) => `+ ${line}`),
    "```",
    "",
    `Tests run (${record.tests.length}): ${tests}`,
    "",
  ];
}

/** The markdown report. */
export function markdownReport(input: ReportInput): string {
  const { folders, all } = tallies(input);
  const row = (name: string, t: Tally) =>
    `| ${name} | ${t.mutants} | ${t.equivalent} | ${t.killed} | ${t.survived} | ${t.notRun} | ` +
    `${score(t).toFixed(1)} % |`;
  const lines = [
    "# Operator mutation: survivors",
    "",
    summaryLine(input),
    "",
    "Score = killed / (mutants − equivalent); a timeout counts as killed, a mutant no test",
    "imports as a survivor.",
    "",
    "| folder | mutants | equivalent | killed | survived | not run | score |",
    "|---|---|---|---|---|---|---|",
    ...[...folders].map(([folder, tally]) => row(folder, tally)),
    row("**all**", all),
    "",
  ];
  const survivors = input.mutants.filter((m) => {
    const outcome = input.verdicts.get(m.id)?.outcome;
    return !input.equivalents.has(m.id) && (outcome === "survived" || outcome === "no tests");
  });
  lines.push(`## Survivors (${survivors.length})`, "");
  for (const mutant of survivors) {
    lines.push(...survivorSection(input, mutant, input.verdicts.get(mutant.id)!));
  }
  const equivalent = input.mutants.filter((m) => input.equivalents.has(m.id));
  lines.push(`## Equivalent (${equivalent.length})`, "");
  for (const mutant of equivalent) {
    lines.push(
      `- ${mutant.file}:${mutant.line} ${mutant.operator} ${code(mutant.original)} → ` +
        `${code(mutant.replacement)} (${code(mutant.id)}): ${
          input.equivalents.get(mutant.id)!.reason
        }`,
    );
  }
  if (input.stale.length > 0) {
    lines.push("", `## Stale justifications (${input.stale.length})`, "");
    for (const { entry, why } of input.stale) lines.push(`- ${code(entry.id)}: ${why}`);
  }
  const flaky = new Map<string, number>();
  for (const mutant of input.mutants) {
    for (const file of input.verdicts.get(mutant.id)?.flaky ?? []) {
      flaky.set(file, (flaky.get(file) ?? 0) + 1);
    }
  }
  if (flaky.size > 0) {
    lines.push("", "## Flaky test files (failed once against a mutant, passed again)", "");
    for (const [file, count] of flaky) lines.push(`- ${file} (${count} mutants)`);
  }
  if (input.skippedTests.length > 0) {
    lines.push("", "## Test files left out (they fail on the unmutated tree)", "");
    for (const file of input.skippedTests) lines.push(`- ${file}`);
  }
  return lines.join("\n") + "\n";
}
