/**
 * When `a ?? b` → `a || b` changes anything: only when `a` can be a falsy value that is not
 * nullish — `0`, `NaN`, `""`, `false`, `0n`. `headers.get(name) ?? fallback` where the value is an
 * object or a function gives the same either way, and such a mutant would only be one more
 * survivor to justify. The type checker says which it is; where it cannot (an unresolved import,
 * `any`, a Deno global whose types it has not got), the mutant is kept. Also kept out: `s ?? ""`
 * where `s` is a string (the only falsy string is `""`) and `b ?? false` where `b` is a boolean.
 *
 * @module
 */
import ts from "typescript";
import { join } from "node:path";
import type { NullishJudge } from "./operators.ts";

/** The compiler options of the typed program: Deno's module rules, the ES library, no output. */
const OPTIONS: ts.CompilerOptions = {
  target: ts.ScriptTarget.ESNext,
  module: ts.ModuleKind.ESNext,
  moduleResolution: ts.ModuleResolutionKind.Bundler,
  allowImportingTsExtensions: true,
  noEmit: true,
  strict: true,
  skipLibCheck: true,
  lib: ["lib.esnext.d.ts", "lib.dom.d.ts"],
  types: [],
};

/** A program over `files` (paths from `root`) and what they import, for {@link nullishJudge}. */
export function typedProgram(root: string, files: readonly string[]): ts.Program {
  return ts.createProgram(files.map((file) => join(root, file)), OPTIONS);
}

/** The primitive kinds among `type`'s members that have a falsy, non-nullish value. */
function falsyKinds(checker: ts.TypeChecker, type: ts.Type, kinds: Set<string>): void {
  const flags = type.flags;
  if (type.isUnion() || type.isIntersection()) {
    for (const member of type.types) falsyKinds(checker, member, kinds);
  } else if (flags & (ts.TypeFlags.Any | ts.TypeFlags.Unknown)) kinds.add("unknown");
  else if (flags & ts.TypeFlags.TypeParameter) {
    const constraint = checker.getBaseConstraintOfType(type);
    if (!constraint || constraint === type) kinds.add("unknown");
    else falsyKinds(checker, constraint, kinds);
  } else if (flags & ts.TypeFlags.StringLiteral) {
    if ((type as ts.StringLiteralType).value === "") kinds.add("string");
  } else if (flags & ts.TypeFlags.NumberLiteral) {
    if ((type as ts.NumberLiteralType).value === 0) kinds.add("number");
  } else if (flags & ts.TypeFlags.BigIntLiteral) {
    if ((type as ts.BigIntLiteralType).value.base10Value === "0") kinds.add("bigint");
  } else if (flags & ts.TypeFlags.BooleanLiteral) {
    if (checker.typeToString(type) === "false") kinds.add("boolean");
  } else if (flags & ts.TypeFlags.StringLike) kinds.add("string");
  else if (flags & ts.TypeFlags.NumberLike) kinds.add("number");
  else if (flags & ts.TypeFlags.BigIntLike) kinds.add("bigint");
  else if (flags & ts.TypeFlags.BooleanLike) kinds.add("boolean");
}

/** Judges `??` mutants with `program`'s type checker. */
export function nullishJudge(program: ts.Program): NullishJudge {
  const checker = program.getTypeChecker();
  return function mayDiffer(node: ts.BinaryExpression): boolean {
    const kinds = new Set<string>();
    falsyKinds(checker, checker.getTypeAtLocation(node.left), kinds);
    if (kinds.size !== 1) return kinds.size > 1;
    const right = node.right;
    if (kinds.has("string")) return !(ts.isStringLiteralLike(right) && right.text === "");
    if (kinds.has("boolean")) return right.kind !== ts.SyntaxKind.FalseKeyword;
    return true;
  };
}
