/**
 * Operator mutation: generates mutants of the security-critical modules with standard operators
 * (comparison boundaries, negated conditions, `&&`/`||`, `??`, constants off by one, removed calls
 * and early exits, regex anchors and character classes, CIDR prefix lengths — see
 * `mutation/operators.ts`) on every line, runs each against the tests that import its module, and
 * writes a survivors report. The hand-written list (`mutate.ts`, `mutations.json`) stays for the
 * behaviours operators cannot reach.
 *
 * ```
 * deno run --allow-read --allow-write --allow-run --allow-env scripts/mutate_ops.ts
 *   [--modules PATH_OR_GLOB…] [--changed COMMIT] [--operators NAME,…] [--list]
 *   [--full] [--transitive-limit N] [--timeout SECONDS] [--sample FRACTION]
 *   [--results FILE] [--resume [--survivors] | --fresh] [--report FILE] [--equivalents FILE]
 * ```
 *
 * Without `--modules` the list in `mutation/scope.ts` is mutated. `--changed COMMIT` keeps only
 * mutants on lines `git diff COMMIT` shows as changed, so a change is checked in minutes; a whole
 * run takes hours. Each verdict is appended to the results file (default
 * `dist/mutation/results.jsonl`): `--resume` continues an interrupted run, skipping the mutants and
 * baselines it already has; `--fresh` starts over; with neither, an existing file is refused.
 * `--sample 0.25` judges about a quarter of the mutants, chosen by a hash of each id (the same
 * ones on every run, a larger sample holding a smaller one), and scores the sample: a whole run
 * takes hours, a sample of every folder gives each folder's score in a fraction of that.
 * `--resume --survivors` judges again only the mutants the file has as survivors (after a test
 * was written to kill them), nothing else: the new verdict is appended and wins.
 * Mutants justified in `scripts/mutation_equivalents.json` are not run and are reported apart,
 * as are justifications whose mutant no longer exists (stale). The report (default
 * `dist/mutation/survivors.md`) has the score per folder and every survivor with its tests.
 *
 * The repository is copied once to a scratch folder and mutants are applied there one at a time,
 * sequentially (the suites boot real gateways and time them; two cores). `--list` only prints
 * the mutants and stale justifications.
 *
 * Exit status: 0 no survivor, 1 survivors (or stale justifications), 2 usage or a refused
 * file, 130 interrupted (the report then covers what ran; `--resume` goes on).
 *
 * @module
 */
import { dirname, join, resolve } from "node:path";
import { type Equivalent, parseEquivalents, staleEquivalents } from "./mutation/equivalents.ts";
import { generate, inSample, onChangedLines } from "./mutation/generate.ts";
import { type Mutant, type Operator, OPERATORS } from "./mutation/mutant.ts";
import { markdownReport, type ReportInput, summaryLine, tallies } from "./mutation/report.ts";
import { appendResult, readResults, type Results } from "./mutation/results.ts";
import { judge, type RunContext } from "./mutation/runner.ts";
import { changedLines, DEFAULT_MODULES, resolveModules } from "./mutation/scope.ts";
import { importGraph } from "./mutation/test_graph.ts";
import { copyTree } from "./mutation/test_run.ts";

const USAGE = "usage: deno run --allow-read --allow-write --allow-run --allow-env " +
  "scripts/mutate_ops.ts [--modules PATH…] [--changed COMMIT] [--operators NAME,…] [--list] " +
  "[--full] [--transitive-limit N] [--timeout SECONDS] [--sample FRACTION] [--results FILE] " +
  "[--resume [--survivors] | --fresh] " +
  "[--report FILE] [--equivalents FILE]";

/** The options the command line gives. */
export interface OpsOptions {
  readonly modules: readonly string[];
  readonly changed?: string;
  readonly operators?: ReadonlySet<Operator>;
  readonly list: boolean;
  readonly full: boolean;
  readonly transitiveLimit?: number;
  readonly timeoutMs?: number;
  /** Judge only about this fraction of the mutants (by a hash of the id). */
  readonly sample?: number;
  readonly results: string;
  readonly resume: boolean;
  /** With `resume`: judge the recorded survivors again. */
  readonly survivors: boolean;
  readonly fresh: boolean;
  readonly report: string;
  readonly equivalents: string;
}

/** Reads the command line; a string saying why when it is not understood. */
export function parseOpsArgs(args: readonly string[]): OpsOptions | string {
  const modules: string[] = [];
  const flags = new Set<string>();
  const values = new Map<string, string>();
  for (let i = 0; i < args.length; i++) {
    const arg = args[i];
    if (arg === "--modules") {
      while (args[i + 1] !== undefined && !args[i + 1].startsWith("--")) modules.push(args[++i]);
    } else if (["--list", "--full", "--resume", "--survivors", "--fresh"].includes(arg)) {
      flags.add(arg);
    } else if (
      [
        "--changed",
        "--operators",
        "--transitive-limit",
        "--timeout",
        "--sample",
        "--results",
        "--report",
        "--equivalents",
      ].includes(arg) && args[i + 1] !== undefined
    ) values.set(arg, args[++i]);
    else return `Unknown or incomplete argument "${arg}"`;
  }
  const operators = values.get("--operators")?.split(",");
  const unknown = operators?.filter((name) => !(OPERATORS as readonly string[]).includes(name));
  if (unknown?.length) return `Unknown operator "${unknown[0]}" (known: ${OPERATORS.join(", ")})`;
  const positive = (flag: string) => {
    const text = values.get(flag);
    return text === undefined ? undefined : Number(text) > 0 ? Number(text) : NaN;
  };
  const transitiveLimit = positive("--transitive-limit");
  const timeout = positive("--timeout");
  if (Number.isNaN(transitiveLimit) || Number.isNaN(timeout)) {
    return "--transitive-limit and --timeout take a positive number";
  }
  const sample = positive("--sample");
  if (Number.isNaN(sample) || sample! > 1) {
    return `--sample takes a fraction above 0 and at most 1, not "${values.get("--sample")}"`;
  }
  if (flags.has("--resume") && flags.has("--fresh")) {
    return "--resume and --fresh exclude each other";
  }
  if (flags.has("--survivors") && !flags.has("--resume")) {
    return "--survivors judges a results file's survivors again: it needs --resume";
  }
  return {
    modules: modules.length > 0 ? modules : Object.values(DEFAULT_MODULES).flat(),
    changed: values.get("--changed"),
    operators: operators && new Set(operators as Operator[]),
    list: flags.has("--list"),
    full: flags.has("--full"),
    transitiveLimit,
    timeoutMs: timeout === undefined ? undefined : timeout * 1000,
    sample,
    results: values.get("--results") ?? "dist/mutation/results.jsonl",
    resume: flags.has("--resume"),
    survivors: flags.has("--survivors"),
    fresh: flags.has("--fresh"),
    report: values.get("--report") ?? "dist/mutation/survivors.md",
    equivalents: values.get("--equivalents") ?? "scripts/mutation_equivalents.json",
  };
}

async function readEquivalents(path: string): Promise<Equivalent[]> {
  let text: string;
  try {
    text = await Deno.readTextFile(path);
  } catch (error) {
    if (error instanceof Deno.errors.NotFound) return [];
    throw error;
  }
  return parseEquivalents(JSON.parse(text), path);
}

/** The mutants a run judges, and everything the report needs besides verdicts. */
interface Plan {
  readonly chosen: Mutant[];
  readonly equivalents: Map<string, Equivalent>;
  readonly stale: ReturnType<typeof staleEquivalents>;
  readonly sources: Map<string, string>;
}

/** Generates the mutants of the chosen modules in `tree` and matches the justifications. */
async function plan(root: string, tree: string, options: OpsOptions): Promise<Plan> {
  const modules = await resolveModules(root, options.modules);
  const justified = await readEquivalents(resolve(root, options.equivalents));
  const all = await generate(tree, [...modules, ...justified.map((e) => e.file)], {
    operators: options.operators,
  });
  const stale = staleEquivalents(justified, all);
  let chosen = modules.flatMap((file) => all.get(file) ?? []);
  if (options.sample !== undefined) {
    const fraction = options.sample;
    chosen = chosen.filter((mutant) => inSample(mutant.id, fraction));
  }
  if (options.changed) {
    chosen = onChangedLines(chosen, await changedLines(root, options.changed, modules));
  }
  const ids = new Set(chosen.map((m) => m.id));
  const sources = new Map<string, string>();
  for (const file of modules) sources.set(file, await Deno.readTextFile(join(tree, file)));
  return {
    chosen,
    equivalents: new Map(justified.filter((e) => ids.has(e.id)).map((e) => [e.id, e])),
    stale,
    sources,
  };
}

const show = (text: string) => JSON.stringify(text.length > 70 ? `${text.slice(0, 67)}…` : text);
const label = (m: Mutant) =>
  `${m.file}:${m.line}:${m.column}  ${m.operator}  ${show(m.original)} → ${show(m.replacement)}`;

/** How {@link main} is run: the repository and where its lines go. */
export interface MainContext {
  readonly root: string;
  readonly log: (line: string) => void;
  /** Ends the run early when aborted (the CLI aborts on SIGINT and SIGTERM). */
  readonly signal?: AbortSignal;
}

/** `--list`: prints the chosen mutants and stale justifications; 1 when any is stale. */
async function listMutants(options: OpsOptions, context: MainContext): Promise<number> {
  const { chosen, equivalents, stale } = await plan(context.root, context.root, options);
  for (const m of chosen) {
    context.log(`${m.id}  ${label(m)}${equivalents.has(m.id) ? "  (equivalent)" : ""}`);
  }
  for (const { entry, why } of stale) context.log(`stale justification ${entry.id}: ${why}`);
  context.log(
    `${chosen.length} mutants, ${equivalents.size} justified equivalent, ${stale.length} stale`,
  );
  return stale.length > 0 ? 1 : 0;
}

/** Judges every chosen mutant in a scratch copy, then writes the report; the exit status. */
async function runMutants(
  args: readonly string[],
  options: OpsOptions,
  context: MainContext,
): Promise<number> {
  const resultsPath = resolve(context.root, options.results);
  const { root, log } = context;
  const started = performance.now();
  const scratch = await Deno.makeTempDir({ prefix: "portcullis-mutate-ops-" });
  const signal = context.signal ?? new AbortController().signal;
  try {
    await copyTree(root, scratch);
    const { chosen, equivalents, stale, sources } = await plan(root, scratch, options);
    const results: Results = await readResults(resultsPath);
    await appendResult(resultsPath, { type: "run", started: new Date().toISOString(), args });
    const graph = await importGraph(scratch);
    log(`${chosen.length} mutants in ${sources.size} modules (${equivalents.size} justified)`);
    const runContext: RunContext = {
      scratch,
      graph,
      results,
      resultsPath,
      full: options.full,
      transitiveLimit: options.transitiveLimit,
      timeoutMs: options.timeoutMs,
      baselineTimeoutMs: options.timeoutMs ?? 600_000,
      signal,
      log,
    };
    for (const [index, mutant] of chosen.entries()) {
      if (equivalents.has(mutant.id)) continue;
      const known = results.mutants.get(mutant.id);
      if (options.survivors ? known?.outcome !== "survived" : known) continue;
      const record = await judge(runContext, mutant);
      if (!record) break;
      const verdict = record.outcome === "timeout" ? "killed (timeout)" : record.outcome;
      const by = record.killedBy ? ` by ${record.killedBy}` : "";
      log(
        `[${index + 1}/${chosen.length}] ${verdict.padEnd(16)} ${label(mutant)}  ` +
          `${(record.ms / 1000).toFixed(1)} s${record.stage ? ` (${record.stage})` : ""}${by}`,
      );
    }
    const input: ReportInput = {
      mutants: chosen,
      verdicts: results.mutants,
      equivalents,
      stale,
      skippedTests: [...results.baselines.values()].filter((b) => b.status !== "pass")
        .map((b) => b.file),
      sources,
      elapsedMs: performance.now() - started,
      sample: options.sample,
    };
    const reportPath = resolve(root, options.report);
    await Deno.mkdir(dirname(reportPath), { recursive: true });
    await Deno.writeTextFile(reportPath, markdownReport(input));
    log(summaryLine(input));
    log(`report: ${options.report}`);
    if (signal.aborted) return 130;
    return tallies(input).all.survived > 0 || stale.length > 0 ? 1 : 0;
  } finally {
    await Deno.remove(scratch, { recursive: true });
  }
}

/** Runs the command line `args` against the repository at `context.root`; the exit status. */
export async function main(args: readonly string[], context: MainContext): Promise<number> {
  const options = parseOpsArgs(args);
  if (typeof options === "string") {
    context.log(`${options}\n${USAGE}`);
    return 2;
  }
  if (options.list) return await listMutants(options, context);
  const resultsPath = resolve(context.root, options.results);
  const exists = await Deno.stat(resultsPath).then(() => true, () => false);
  if (exists && !options.resume && !options.fresh) {
    context.log(
      `Results file "${options.results}" exists: --resume continues it, --fresh starts over`,
    );
    return 2;
  }
  if (exists && options.fresh) await Deno.remove(resultsPath);
  return await runMutants(args, options, context);
}

if (import.meta.main) {
  const interrupt = new AbortController();
  const stop = () => interrupt.abort();
  Deno.addSignalListener("SIGINT", stop);
  Deno.addSignalListener("SIGTERM", stop);
  const root = dirname(import.meta.dirname!);
  const status = await main(Deno.args, { root, log: console.log, signal: interrupt.signal });
  Deno.exit(status);
}
