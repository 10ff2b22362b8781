/**
 * A small mutation runner for the security-critical modules: each named mutation in
 * `scripts/mutations.json` changes one line (flips a comparison, drops a check, skips a refusal),
 * and the tests listed for it must then fail. A mutation the tests survive is a check nothing
 * proves.
 *
 * ```
 * deno run --allow-read --allow-write --allow-run scripts/mutate.ts [--list] [--only NAME]…
 *   [--timeout SECONDS]
 * ```
 *
 * The repository is copied once to a scratch folder (without `.git`, `node_modules` and `dist`),
 * and every mutation is applied there and undone after its run — never in the working tree, which
 * other people edit and which a crash must not leave mutated. An entry's original text must occur
 * exactly once in its file (in the copy), else the entry is refused by name and nothing runs;
 * `--only` checks only the entries it names. Before its first mutation, each distinct test list
 * runs unmutated (the baseline); the mutations of a list whose baseline fails are reported as
 * `baseline failing`. A test failure kills a mutation, and so does a timeout (by default three
 * times the baseline's time, at least 60 s; `--timeout` sets it).
 *
 * The tests run with `--no-check` (see `mutation/test_run.ts`, shared with the operator runner
 * `mutate_ops.ts`). Runs are sequential: the suites boot
 * real gateways and assert on timing, which a second run beside them on two cores would disturb.
 * The 70 mutations of the list took 156 s in all.
 *
 * Exit status: 0 every mutation killed, 1 a survivor or a failing baseline, 2 refused entries or
 * usage, 130 interrupted (the run's process group is ended and the copy removed).
 *
 * @module
 */
import { dirname, isAbsolute, join, normalize } from "node:path";
import { copyTree, killedBy, runTests, type TestRun } from "./mutation/test_run.ts";

export {
  copyTree,
  killedBy,
  type RunOptions,
  runTests,
  type TestRun,
} from "./mutation/test_run.ts";

/** One named one-line mutation and the tests that must kill it. */
export interface Mutation {
  readonly name: string;
  /** Path from the repository root. */
  readonly file: string;
  /** Text that occurs exactly once in `file`, within one line. */
  readonly original: string;
  readonly replacement: string;
  /** Test files, from the repository root. */
  readonly tests: readonly string[];
}

/** What became of one mutation. */
export type Outcome = "killed" | "timeout" | "survived" | "baseline failing";

const USAGE = "usage: deno run --allow-read --allow-write --allow-run scripts/mutate.ts " +
  "[--list] [--only NAME]… [--timeout SECONDS]";

/**
 * Reads the mutation list's shape.
 *
 * @throws {TypeError} when the list is not an array of complete entries
 */
export function parseMutations(data: unknown): Mutation[] {
  if (!Array.isArray(data)) throw new TypeError("Mutation list must be an array");
  return data.map((entry, index) => {
    const text = (key: string) => typeof entry?.[key] === "string" && entry[key] !== "";
    const complete = ["name", "file", "original"].every(text) &&
      typeof entry.replacement === "string" && Array.isArray(entry.tests) &&
      entry.tests.length > 0 && entry.tests.every((t: unknown) => typeof t === "string");
    if (!complete) {
      throw new TypeError(
        `Mutation ${index} ("${entry?.name ?? "?"}") needs name, file, original, ` +
          "replacement and a non-empty tests list",
      );
    }
    const { name, file, original, replacement, tests } = entry;
    return { name, file, original, replacement, tests };
  });
}

/** How often `part` occurs in `text` (overlapping occurrences count). */
function occurrences(text: string, part: string): number {
  let count = 0;
  for (let at = text.indexOf(part); at !== -1; at = text.indexOf(part, at + 1)) count++;
  return count;
}

/** True for a relative path that stays inside the root. */
function inside(path: string): boolean {
  const clean = normalize(path);
  return !isAbsolute(clean) && clean !== ".." && !clean.startsWith("../");
}

async function readText(path: string): Promise<string | undefined> {
  try {
    return await Deno.readTextFile(path);
  } catch (error) {
    if (error instanceof Deno.errors.NotFound) return undefined;
    throw error;
  }
}

/**
 * Checks every entry against the tree at `root`.
 *
 * @returns one problem per refused entry, naming it; empty when all can run
 */
export async function checkMutations(
  root: string,
  mutations: readonly Mutation[],
): Promise<string[]> {
  const problems: string[] = [];
  const seen = new Set<string>();
  for (const mutation of mutations) {
    const refuse = (why: string) => problems.push(`Mutation "${mutation.name}": ${why}`);
    if (seen.has(mutation.name)) refuse("the name is used twice");
    seen.add(mutation.name);
    if (mutation.original.includes("\n")) refuse("original text spans more than one line");
    if (mutation.original === mutation.replacement) refuse("replacement equals the original");
    for (const test of mutation.tests) {
      if (!inside(test) || await readText(join(root, test)) === undefined) {
        refuse(`test file "${test}" not found`);
      }
    }
    const source = inside(mutation.file) ? await readText(join(root, mutation.file)) : undefined;
    if (source === undefined) {
      refuse(`file "${mutation.file}" not found`);
      continue;
    }
    const count = occurrences(source, mutation.original);
    if (count === 0) refuse(`original text not found in "${mutation.file}"`);
    else if (count > 1) {
      refuse(`original text is ambiguous: it occurs ${count} times in "${mutation.file}"`);
    }
  }
  return problems;
}

/** The options the command line gives. */
interface Options {
  readonly list: boolean;
  readonly only: readonly string[];
  readonly timeoutMs?: number;
}

function parseArgs(args: readonly string[]): Options | undefined {
  const only: string[] = [];
  let list = false;
  let timeoutMs: number | undefined;
  for (let i = 0; i < args.length; i++) {
    if (args[i] === "--list") list = true;
    else if (args[i] === "--only" && args[i + 1]) only.push(args[++i]);
    else if (args[i] === "--timeout" && Number(args[i + 1]) > 0) {
      timeoutMs = Number(args[++i]) * 1000;
    } else return undefined;
  }
  return { list, only, timeoutMs };
}

const seconds = (ms: number) => `${(ms / 1000).toFixed(1)} s`;

/**
 * Applies each mutation in the copy at `scratch`, runs its tests, restores the file; stops early
 * when `signal` is aborted.
 */
async function runAll(
  scratch: string,
  mutations: readonly Mutation[],
  options: { readonly timeoutMs?: number; readonly signal: AbortSignal },
): Promise<Outcome[]> {
  const { timeoutMs, signal } = options;
  const baselines = new Map<string, TestRun>();
  const width = Math.max(...mutations.map((m) => m.name.length));
  const outcomes: Outcome[] = [];
  for (const mutation of mutations) {
    const key = [...mutation.tests].sort().join(" ");
    let baseline = baselines.get(key);
    if (!baseline) {
      baseline = await runTests(scratch, mutation.tests, {
        timeoutMs: timeoutMs ?? 600_000,
        signal,
      });
      if (signal.aborted) break;
      baselines.set(key, baseline);
      if (baseline.status !== "pass") {
        console.log(`baseline failing (${baseline.status}, ${seconds(baseline.ms)}): ${key}`);
        console.log(baseline.output.trimEnd().split("\n").slice(-20).join("\n"));
      }
    }
    const label = `${mutation.name.padEnd(width)}  ${mutation.file}`;
    if (baseline.status !== "pass") {
      console.log(`baseline failing  ${label}`);
      outcomes.push("baseline failing");
      continue;
    }
    const path = join(scratch, mutation.file);
    const source = await Deno.readTextFile(path);
    await Deno.writeTextFile(path, source.replace(mutation.original, () => mutation.replacement));
    let run: TestRun;
    try {
      const limit = timeoutMs ?? Math.max(60_000, 3 * baseline.ms);
      run = await runTests(scratch, mutation.tests, { timeoutMs: limit, signal });
    } finally {
      await Deno.writeTextFile(path, source);
    }
    if (signal.aborted) break;
    const outcome = run.status === "timeout"
      ? "timeout"
      : run.status === "fail"
      ? "killed"
      : "survived";
    const verdict = outcome === "timeout" ? "killed (timeout)" : outcome;
    const by = outcome === "killed" ? `  by ${killedBy(run.output)}` : "";
    console.log(`${verdict.padEnd(16)}  ${label}  ${seconds(run.ms)}${by}`);
    outcomes.push(outcome);
  }
  return outcomes;
}

async function main(args: readonly string[]): Promise<number> {
  const options = parseArgs(args);
  if (!options) {
    console.error(USAGE);
    return 2;
  }
  const here = import.meta.dirname!;
  const root = dirname(here);
  const all = parseMutations(JSON.parse(await Deno.readTextFile(join(here, "mutations.json"))));
  const unknown = options.only.filter((name) => !all.some((m) => m.name === name));
  if (unknown.length > 0) {
    console.error(`No mutation named ${unknown.map((n) => `"${n}"`).join(", ")}`);
    return 2;
  }
  const chosen = options.only.length > 0 ? all.filter((m) => options.only.includes(m.name)) : all;
  if (options.list) {
    for (const m of chosen) console.log(`${m.name}  ${m.file}  ${m.tests.join(" ")}`);
    const problems = await checkMutations(root, chosen);
    for (const problem of problems) console.error(problem);
    return problems.length > 0 ? 2 : 0;
  }

  const started = performance.now();
  const scratch = await Deno.makeTempDir({ prefix: "portcullis-mutate-" });
  const interrupt = new AbortController();
  const stop = () => interrupt.abort();
  Deno.addSignalListener("SIGINT", stop);
  Deno.addSignalListener("SIGTERM", stop);
  try {
    await copyTree(root, scratch);
    const problems = await checkMutations(scratch, chosen);
    if (problems.length > 0) {
      for (const problem of problems) console.error(problem);
      return 2;
    }
    const outcomes = await runAll(scratch, chosen, {
      timeoutMs: options.timeoutMs,
      signal: interrupt.signal,
    });
    if (interrupt.signal.aborted) return 130;
    const count = (...kinds: Outcome[]) => outcomes.filter((o) => kinds.includes(o)).length;
    const failing = count("baseline failing");
    console.log(
      `${count("killed", "timeout")} killed, ${count("survived")} survived` +
        (failing > 0 ? `, ${failing} baseline failing` : "") +
        ` (${seconds(performance.now() - started)})`,
    );
    return count("survived", "baseline failing") > 0 ? 1 : 0;
  } finally {
    Deno.removeSignalListener("SIGINT", stop);
    Deno.removeSignalListener("SIGTERM", stop);
    await Deno.remove(scratch, { recursive: true });
  }
}

if (import.meta.main) Deno.exit(await main(Deno.args));
