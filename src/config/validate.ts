/**
 * Runs a valibot schema over a parsed YAML file and turns every issue into a located problem.
 *
 * @module
 */
import * as v from "valibot";
import type { ConfigProblem } from "./problems.ts";
import type { YamlFile } from "./yaml_file.ts";
import { closest } from "./suggest.ts";

/** The outcome of validating one file. */
export type Validated<T> = { ok: true; value: T } | { ok: false; problems: ConfigProblem[] };

/**
 * Validates `source.value` against `schema`, collecting every issue (not only the first).
 *
 * @param schema the valibot schema
 * @param source the parsed file
 * @returns the typed output, or one problem per issue naming file, field path and value
 */
export function validateFile<S extends v.GenericSchema>(
  schema: S,
  source: YamlFile,
): Validated<v.InferOutput<S>> {
  const result = v.safeParse(schema, source.value, { abortEarly: false });
  if (result.success) return { ok: true, value: result.output };
  return { ok: false, problems: result.issues.map((issue) => toProblem(issue, source)) };
}

function toProblem(issue: v.BaseIssue<unknown>, source: YamlFile): ConfigProblem {
  const path: (string | number)[] = [];
  for (const item of issue.path ?? []) {
    if (typeof item.key === "string" || typeof item.key === "number") path.push(item.key);
  }
  const unknown = issue.type === "strict_object" && issue.expected === "never";
  const missing = !unknown && issue.kind === "schema" && issue.input === undefined;
  return {
    file: source.file,
    path,
    message: unknown
      ? "Unknown field (a typo? unknown fields are refused, never ignored)"
      : missing
      ? "Required field is missing"
      : tidy(issue.message) + suggestion(issue),
    ...(missing || unknown ? {} : { value: issue.input }),
    at: source.locate(path),
  };
}

/**
 * For a value outside a fixed list (a picklist), the listed value it most looks like:
 * `; did you mean "remote"?` for `mode: remtoe`. Empty when nothing is close.
 */
function suggestion(issue: v.BaseIssue<unknown>): string {
  if (issue.type !== "picklist" || typeof issue.input !== "string") return "";
  if (issue.message.includes("did you mean")) return ""; // the schema's message suggests already
  // valibot spells the list `("local" | "remote")`, or `"local"` for one value.
  const list = (issue.expected ?? "").replace(/^\((.*)\)$/, "$1");
  const options = list.split(" | ").map((option) => {
    try {
      return String(JSON.parse(option));
    } catch {
      return option;
    }
  });
  const guess = closest(issue.input, options);
  return guess === undefined || guess === issue.input ? "" : `; did you mean "${guess}"?`;
}

/** valibot's default messages say `Invalid type: Expected number but received "x"`; keep the gist. */
function tidy(message: string): string {
  return message.replace(/ but received .*$/, "").replace(/\.$/, "");
}
