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

/** Renders one problem as `file:line:col: path: message (got value)`. */
export function formatProblem(problem: ConfigProblem): string {
  const where = problem.at ? `${problem.file}:${problem.at}` : problem.file;
  const got = "value" in problem && problem.value !== undefined
    ? ` (got ${formatValue(problem.value)})`
    : "";
  return `${where}: ${formatPath(problem.path)}: ${problem.message}${got}`;
}
