/**
 * Config problems: every diagnostic names the file, the field path and the offending value.
 *
 * @module
 */

/** One thing wrong with one field of one file. */
export interface ConfigProblem {
  /** The file the value came from, as the operator named it. */
  readonly file: string;
  /** Field path inside the file, e.g. `["lanes", "public", "listen", 0, "port"]`. */
  readonly path: readonly (string | number)[];
  /** The offending value (absent when the field is missing). */
  readonly value?: unknown;
  /** What is wrong, starting with a capital letter, without a trailing period. */
  readonly message: string;
  /** `line:column` in the file when known. */
  readonly at?: string;
}

/** Thrown when a config file or set of files cannot be used; carries every problem found. */
export class ConfigError extends Error {
  /** Every problem found, in file order. */
  readonly problems: readonly ConfigProblem[];

  /**
   * Collects the problems into one error whose message lists them, one per line.
   *
   * @param problems every problem found (at least one)
   */
  constructor(problems: readonly ConfigProblem[]) {
    super(problems.map(formatProblem).join("\n"));
    this.name = "ConfigError";
    this.problems = problems;
  }
}

/**
 * Renders a field path the way an operator writes it: `lanes.public.listen[0].port`.
 *
 * @example
 * ```ts
 * import { formatPath } from "./problems.ts";
 * formatPath(["lanes", "public", "listen", 0, "port"]); // "lanes.public.listen[0].port"
 * ```
 */
export function formatPath(path: readonly (string | number)[]): string {
  let out = "";
  for (const part of path) {
    if (typeof part === "number") out += `[${part}]`;
    else out += out === "" ? part : `.${part}`;
  }
  return out === "" ? "(top level)" : out;
}

/** Renders a value for a diagnostic: quoted, short, never multi-line. */
export function formatValue(value: unknown): string {
  let text: string;
  try {
    text = typeof value === "string"
      ? JSON.stringify(value)
      : JSON.stringify(value) ?? String(value);
  } catch {
    text = String(value);
  }
  return text.length > 80 ? `${text.slice(0, 77)}...` : text;
}

/** The longest value a problem carries as it was found; a longer one is cut to an excerpt. */
export const EXCERPT_CHARS = 80;

/**
 * A problem whose value is at most an excerpt: a number, boolean or short string stays as found;
 * anything longer (a whole document that is not a mapping, a list, a mapping) becomes its first
 * {@link EXCERPT_CHARS} characters, so a rejection says where a file is wrong without echoing it.
 *
 * @example
 * ```ts
 * import { excerpt } from "./problems.ts";
 * const whole = "root:x:0:0:root:/root:/bin/bash\n".repeat(20);
 * const problem = excerpt({ file: "zz.yaml", path: [], value: whole, message: "Expected a mapping" });
 * (problem.value as string).length; // 80
 * ```
 */
export function excerpt(problem: ConfigProblem): ConfigProblem {
  const value = problem.value;
  if (value === undefined || value === null || typeof value === "number") return problem;
  if (typeof value === "boolean") return problem;
  if (typeof value === "string" && value.length <= EXCERPT_CHARS) return problem;
  return { ...problem, value: formatValue(value) };
}

/** Renders one problem as `file:line:col: path: message (got value)`. */
export function formatProblem(problem: ConfigProblem): string {
  const where = problem.at ? `${problem.file}:${problem.at}` : problem.file;
  const got = "value" in problem && problem.value !== undefined
    ? ` (got ${formatValue(problem.value)})`
    : "";
  return `${where}: ${formatPath(problem.path)}: ${problem.message}${got}`;
}

/**
 * A problem for a load that threw instead of reporting problems — a bug or a resource limit met
 * outside the parser: named in one line (error name and first line of its message), never with a
 * stack trace, so a reload records a rejection instead of failing.
 *
 * @param file the file or folder being loaded
 * @param error what was thrown
 * @example
 * ```ts
 * import { problemFromError } from "./problems.ts";
 * problemFromError("/srv/tenants", new RangeError("Maximum call stack size exceeded")).message;
 * // "Cannot load the set: RangeError: Maximum call stack size exceeded"
 * ```
 */
export function problemFromError(file: string, error: unknown): ConfigProblem {
  const said = error instanceof Error
    ? `${error.name}: ${error.message.split("\n")[0]}`
    : String(error).split("\n")[0];
  return { file, path: [], message: `Cannot load the set: ${said}` };
}
