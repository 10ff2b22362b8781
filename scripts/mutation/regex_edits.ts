/**
 * Operator mutants inside a regular expression's pattern: an anchor (`^`, `$`) removed, and one
 * member of a character class removed (`[A-Za-z0-9]` → `[A-Za-z]`). A dropped anchor is the bug
 * that lets `evil.example/?x=good.example` pass a check meant for `good.example`; a dropped class
 * member is a token or host character that a validator forgot.
 *
 * The pattern is read by hand, not by a library: the scan needs only escapes, classes and the two
 * anchors, and the positions it returns are offsets into the same text, which the regex parsers on
 * npm (made for rewriting whole patterns) do not give back. A pattern it misreads can only yield a
 * mutant that does not compile, which the tests then "kill" — never a false survivor.
 *
 * @module
 */

/** One edit of a pattern: the whole mutated pattern, and which operator made it. */
export interface PatternEdit {
  readonly operator: "regex-anchor" | "char-class";
  readonly pattern: string;
}

/** The end of the escape or single character at `at` (a class member's atom). */
function atomEnd(pattern: string, at: number): number {
  if (pattern[at] !== "\\") return at + 1;
  const next = pattern[at + 1];
  if ((next === "u" || next === "p" || next === "P") && pattern[at + 2] === "{") {
    const close = pattern.indexOf("}", at + 3);
    return close === -1 ? pattern.length : close + 1;
  }
  if (next === "u") return Math.min(pattern.length, at + 6);
  if (next === "x") return Math.min(pattern.length, at + 4);
  if (next === "c") return Math.min(pattern.length, at + 3);
  return Math.min(pattern.length, at + 2);
}

/** The members of the class whose `[` is at `open` (ranges whole), and the index of its `]`. */
function classMembers(
  pattern: string,
  open: number,
): { members: [number, number][]; close: number } {
  let at = open + 1;
  if (pattern[at] === "^") at++;
  const members: [number, number][] = [];
  while (at < pattern.length && pattern[at] !== "]") {
    const start = at;
    at = atomEnd(pattern, at);
    if (pattern[at] === "-" && at + 1 < pattern.length && pattern[at + 1] !== "]") {
      at = atomEnd(pattern, at + 1);
    }
    members.push([start, at]);
  }
  return { members, close: at };
}

/**
 * Every anchor removal and every single class-member removal of `pattern` (a class with one
 * member is left alone: removing it empties the class).
 */
export function patternEdits(pattern: string): PatternEdit[] {
  const edits: PatternEdit[] = [];
  const without = (start: number, end: number) => pattern.slice(0, start) + pattern.slice(end);
  for (let at = 0; at < pattern.length;) {
    const char = pattern[at];
    if (char === "\\") {
      at += 2;
    } else if (char === "[") {
      const { members, close } = classMembers(pattern, at);
      if (members.length >= 2) {
        for (const [start, end] of members) {
          edits.push({ operator: "char-class", pattern: without(start, end) });
        }
      }
      at = close + 1;
    } else {
      if (char === "^" || char === "$") {
        edits.push({ operator: "regex-anchor", pattern: without(at, at + 1) });
      }
      at++;
    }
  }
  return edits;
}
