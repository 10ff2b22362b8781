/**
 * What both mutation runners share: a scratch copy of the repository, and one `deno test` run in
 * it that can be timed out or interrupted with everything it started. Mutations are applied in the
 * copy, never in the working tree, which other people edit and which a crash must not leave
 * mutated.
 *
 * The tests run with `--no-check`, so that a kill comes from a failing assertion, never from a
 * replacement that does not type-check (`deno task ok` type-checks the unmutated tree); it also
 * makes a run of one small test file take about a second.
 *
 * @module
 */
import { join } from "node:path";

/** One `deno test` run: passed, failed or timed out, and how long it took. */
export interface TestRun {
  readonly status: "pass" | "fail" | "timeout";
  readonly ms: number;
  readonly output: string;
}

/** `deno task test`'s flags, less `--parallel` and `--doc`, plus `--no-check`. */
export const TEST_FLAGS: readonly string[] = Object.freeze(
  ("test --no-check --no-prompt --allow-run --allow-read --allow-write " +
    "--allow-net=127.0.0.1,[::1] --allow-env").split(" "),
);
/** Left out of the scratch copy at any depth. */
const SKIPPED = new Set([".git", "node_modules", "dist", ".deno", "coverage"]);

/** Copies the tree at `from` into `to` (which exists), leaving out {@link SKIPPED} folders. */
export async function copyTree(from: string, to: string): Promise<void> {
  for await (const entry of Deno.readDir(from)) {
    if (SKIPPED.has(entry.name)) continue;
    const source = join(from, entry.name);
    const target = join(to, entry.name);
    if (entry.isSymlink) await Deno.symlink(await Deno.readLink(source), target);
    else if (entry.isDirectory) {
      await Deno.mkdir(target);
      await copyTree(source, target);
    } else if (entry.isFile) await Deno.copyFile(source, target);
  }
}

/** How {@link runTests} runs. */
export interface RunOptions {
  /** The whole process group is ended after this long, and the run counts as timed out. */
  readonly timeoutMs: number;
  /** Ends the run (and its process group) when aborted: an interrupt. */
  readonly signal?: AbortSignal;
  /** Flags added after {@link TEST_FLAGS}, e.g. `--fail-fast`. */
  readonly flags?: readonly string[];
}

/**
 * Runs `deno test` on `tests` in `root`, in a process group of its own so that ending it also
 * ends the gateways the tests boot.
 */
export async function runTests(
  root: string,
  tests: readonly string[],
  options: RunOptions,
): Promise<TestRun> {
  const started = performance.now();
  const child = new Deno.Command(Deno.execPath(), {
    args: [...TEST_FLAGS, ...(options.flags ?? []), ...tests],
    cwd: root,
    env: { NO_COLOR: "1" },
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
    detached: true,
  }).spawn();
  const end = () => {
    try {
      Deno.kill(-child.pid, "SIGKILL");
    } catch { /* the group is gone */ }
  };
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    end();
  }, options.timeoutMs);
  options.signal?.addEventListener("abort", end);
  const result = await child.output();
  clearTimeout(timer);
  options.signal?.removeEventListener("abort", end);
  end(); // whatever a test left running
  const decoder = new TextDecoder();
  const output = decoder.decode(result.stdout) + decoder.decode(result.stderr);
  const status = timedOut ? "timeout" : result.success ? "pass" : "fail";
  return { status, ms: performance.now() - started, output };
}

/** The FAILURES section of a `deno test` output: `name => ./file:line:column` lines. */
function failureLines(output: string): RegExpMatchArray[] {
  const failures = output.slice(output.lastIndexOf(" FAILURES "));
  return [...failures.matchAll(/^(.+) => \.\/(\S+):\d+:\d+$/gm)];
}

/**
 * What failed in a killed run: the first failing test's name (`deno test` lists them under
 * FAILURES as `name => ./file:line:column`) and how many more, else the first error line (a module
 * that did not load).
 */
export function killedBy(output: string): string {
  const tests = failureLines(output);
  if (tests.length > 0) {
    return `"${tests[0][1]}"${tests.length > 1 ? ` and ${tests.length - 1} more` : ""}`;
  }
  return output.split("\n").find((line) => line.startsWith("error:"))?.trim() ?? "a failure";
}

/** The test files a failed run names under FAILURES (paths as given, without `./`). */
export function failingFiles(output: string): string[] {
  return [...new Set(failureLines(output).map((match) => match[2]))];
}
