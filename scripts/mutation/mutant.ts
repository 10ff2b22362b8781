/**
 * One operator mutant: a span of a source file and the text that replaces it, and the id that
 * names it across runs. The id leaves out the line number on purpose: an edit above a line (a new
 * import, a longer doc comment) must not turn every mutant below it into a new one, or every
 * justification in `scripts/mutation_equivalents.json` would go stale at once. It is made of the
 * file, the operator and a hash of the mutated line's text (trimmed, so re-indenting keeps it), the
 * span's place in that line and the replacement; a mutant whose line reads the same as another's
 * gets `~2`, `~3` in file order. Editing the mutated line itself gives a new id — then the
 * justification has to be read again, which is the point.
 *
 * @module
 */
import { createHash } from "node:crypto";

/** The operators, by the name reports and `--operators` use. */
export const OPERATORS = [
  "boundary",
  "equality",
  "negate",
  "logical",
  "nullish",
  "number",
  "remove-call",
  "remove-exit",
  "regex-anchor",
  "char-class",
  "cidr",
] as const;

/** One operator's name. */
export type Operator = typeof OPERATORS[number];

/** A mutant as the generator finds it, before it has an id. */
export interface Edit {
  readonly operator: Operator;
  /** Offsets in the file's text. */
  readonly start: number;
  readonly end: number;
  readonly replacement: string;
}

/** A mutant with its place in the file and its stable id. */
export interface Mutant extends Edit {
  readonly id: string;
  /** Path from the repository root, with `/`. */
  readonly file: string;
  /** 1-based line and column of `start`. */
  readonly line: number;
  readonly column: number;
  /** The text the span holds before mutation. */
  readonly original: string;
}

/** 1-based line and column of `offset` in `text`, given the offsets where lines start. */
function place(lineStarts: readonly number[], offset: number): { line: number; column: number } {
  let low = 0;
  let high = lineStarts.length - 1;
  while (low < high) {
    const middle = (low + high + 1) >> 1;
    if (lineStarts[middle] <= offset) low = middle;
    else high = middle - 1;
  }
  return { line: low + 1, column: offset - lineStarts[low] + 1 };
}

/** Offsets where each line of `text` starts. */
export function lineStarts(text: string): number[] {
  const starts = [0];
  for (let at = text.indexOf("\n"); at !== -1; at = text.indexOf("\n", at + 1)) starts.push(at + 1);
  return starts;
}

/**
 * Gives each edit of `file` its place and stable id, in file order.
 *
 * @param file the path from the repository root
 * @param text the file's text the edits were found in
 */
export function identify(file: string, text: string, edits: readonly Edit[]): Mutant[] {
  const starts = lineStarts(text);
  const sorted = [...edits].sort((a, b) =>
    a.start - b.start || a.end - b.end || a.operator.localeCompare(b.operator) ||
    a.replacement.localeCompare(b.replacement)
  );
  const seen = new Map<string, number>();
  return sorted.map(function withId(edit) {
    const { line, column } = place(starts, edit.start);
    const lineEnd = text.indexOf("\n", edit.start);
    const lineText = text.slice(starts[line - 1], lineEnd === -1 ? text.length : lineEnd);
    const indent = lineText.length - lineText.trimStart().length;
    const original = text.slice(edit.start, edit.end);
    const hash = createHash("sha256")
      .update([edit.operator, lineText.trim(), column - 1 - indent, original, edit.replacement]
        .join("\0"))
      .digest("hex").slice(0, 10);
    const base = `${file}:${edit.operator}:${hash}`;
    const count = (seen.get(base) ?? 0) + 1;
    seen.set(base, count);
    const id = count === 1 ? base : `${base}~${count}`;
    return { ...edit, id, file, line, column, original };
  });
}

/**
 * The file's text with `mutant` applied.
 *
 * @throws {Error} when the span no longer holds the mutant's original text (the file changed)
 */
export function applyMutant(text: string, mutant: Mutant): string {
  const found = text.slice(mutant.start, mutant.end);
  if (found !== mutant.original) {
    throw new Error(
      `Mutant "${mutant.id}": ${mutant.file}:${mutant.line}:${mutant.column} holds ` +
        `"${found}", not "${mutant.original}"`,
    );
  }
  return text.slice(0, mutant.start) + mutant.replacement + text.slice(mutant.end);
}

/** The lines a mutant touches, before and after it is applied (for reports). */
export function mutantLines(text: string, mutant: Mutant): { before: string; after: string } {
  const from = text.lastIndexOf("\n", mutant.start - 1) + 1;
  const lineEnd = text.indexOf("\n", mutant.end);
  const to = lineEnd === -1 ? text.length : lineEnd;
  return {
    before: text.slice(from, to),
    after: text.slice(from, mutant.start) + mutant.replacement + text.slice(mutant.end, to),
  };
}
