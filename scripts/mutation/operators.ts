/**
 * The operator mutants of one TypeScript file, found on its syntax tree (the `typescript`
 * compiler's parser), so that every span is exact and nothing inside a comment, a string or a
 * doc example is mistaken for code. Left alone: comments (the tree has none), imports and
 * re-exports, type aliases, interfaces, every type annotation and type argument, `declare`d code.
 *
 * The operators, each a bug a hand-written list tends to miss:
 *
 * | operator | what changes |
 * |---|---|
 * | `boundary` | `<` ↔ `<=`, `>` ↔ `>=` |
 * | `equality` | `===` ↔ `!==`, `==` ↔ `!=` |
 * | `negate` | the condition of `if`, `while`, `do`, `?:` and of an `a && b();` guard, as `!(…)` |
 * | `logical` | `&&` ↔ `||` |
 * | `nullish` | `??` → `||` where the left side may be `0`, `""`, `false` or `NaN` (see `nullish.ts`) |
 * | `number` | a numeric literal n → n + 1 and n − 1 |
 * | `remove-call` | a statement that is a call (`f();`, `await f();`) removed |
 * | `remove-exit` | `if (c) return x;` → `if (false) return x;`; in a longer branch each `return`, `throw`, `continue`, `break` removed |
 * | `regex-anchor` | `^` or `$` removed from a regex literal or a `RegExp("…")` string |
 * | `char-class` | one member of a regex character class removed |
 * | `cidr` | the prefix length of an `"a.b.c.d/n"` (or IPv6) string → n − 1 and n + 1 |
 *
 * @module
 */
import ts from "typescript";
import { type Edit, identify, type Mutant, type Operator } from "./mutant.ts";
import { patternEdits } from "./regex_edits.ts";

/** Whether `a ?? b` → `a || b` may change what the expression gives; by default it may. */
export type NullishJudge = (node: ts.BinaryExpression) => boolean;

/** What {@link findEdits} looks for. */
export interface FindOptions {
  readonly nullish?: NullishJudge;
  /** Only these operators; all when absent. */
  readonly operators?: ReadonlySet<Operator>;
}

const SWAPS: ReadonlyMap<ts.SyntaxKind, [Operator, string]> = new Map([
  [ts.SyntaxKind.LessThanToken, ["boundary", "<="]],
  [ts.SyntaxKind.LessThanEqualsToken, ["boundary", "<"]],
  [ts.SyntaxKind.GreaterThanToken, ["boundary", ">="]],
  [ts.SyntaxKind.GreaterThanEqualsToken, ["boundary", ">"]],
  [ts.SyntaxKind.EqualsEqualsEqualsToken, ["equality", "!=="]],
  [ts.SyntaxKind.ExclamationEqualsEqualsToken, ["equality", "==="]],
  [ts.SyntaxKind.EqualsEqualsToken, ["equality", "!="]],
  [ts.SyntaxKind.ExclamationEqualsToken, ["equality", "=="]],
  [ts.SyntaxKind.AmpersandAmpersandToken, ["logical", "||"]],
  [ts.SyntaxKind.BarBarToken, ["logical", "&&"]],
]);

const CIDR = /^([0-9A-Fa-f:.]+)\/(\d{1,3})$/;

/** True for code that only types, declares or imports: nothing in it runs. */
function typeOnly(node: ts.Node): boolean {
  return ts.isImportDeclaration(node) || ts.isImportEqualsDeclaration(node) ||
    ts.isExportDeclaration(node) || ts.isTypeAliasDeclaration(node) ||
    ts.isInterfaceDeclaration(node) || ts.isTypeParameterDeclaration(node) ||
    ts.isTypeNode(node) ||
    (ts.canHaveModifiers(node) &&
      (ts.getModifiers(node)?.some((m) => m.kind === ts.SyntaxKind.DeclareKeyword) ?? false));
}

const isExit = (node: ts.Node) =>
  ts.isReturnStatement(node) || ts.isThrowStatement(node) || ts.isContinueStatement(node) ||
  ts.isBreakStatement(node);

const isNullish = (node: ts.Node) =>
  ts.isBinaryExpression(node) && node.operatorToken.kind === ts.SyntaxKind.QuestionQuestionToken;

/** `value` written back as a literal of the kind `literal` was (hex stays hex; negatives in parentheses). */
function numberText(literal: string, value: number): string {
  const negative = value < 0;
  const magnitude = Math.abs(value);
  const prefix = literal.slice(0, 2).toLowerCase();
  const radix = prefix === "0x" ? 16 : prefix === "0o" ? 8 : prefix === "0b" ? 2 : 10;
  const digits = radix === 10
    ? String(Number(magnitude.toPrecision(15)))
    : literal.slice(0, 2) + magnitude.toString(radix);
  return negative ? `(-${digits})` : digits;
}

/** The literal's n − 1 and n + 1 (bigints keep their `n`). */
function offByOne(node: ts.NumericLiteral | ts.BigIntLiteral, text: string): string[] {
  if (ts.isBigIntLiteral(node)) {
    const value = BigInt(text.slice(0, -1).replaceAll("_", ""));
    return [value - 1n, value + 1n].map((v) => v < 0n ? `(${v}n)` : `${v}n`);
  }
  const value = Number(text.replaceAll("_", ""));
  if (!Number.isFinite(value)) return [];
  return [numberText(text, value - 1), numberText(text, value + 1)];
}

/** True where a literal names a property or member rather than being a value. */
function isName(node: ts.Node): boolean {
  const parent = node.parent;
  return (ts.isPropertyAssignment(parent) || ts.isPropertyDeclaration(parent) ||
    ts.isMethodDeclaration(parent) || ts.isEnumMember(parent) ||
    ts.isPropertySignature(parent) || ts.isGetAccessor(parent) || ts.isSetAccessor(parent)) &&
    parent.name === node;
}

/** The pattern of `RegExp("…")` / `new RegExp("…")`, when it is one plain string. */
function regExpArgument(node: ts.Node): ts.StringLiteralLike | undefined {
  if (!ts.isCallExpression(node) && !ts.isNewExpression(node)) return undefined;
  const callee = node.expression;
  if (!ts.isIdentifier(callee) || callee.text !== "RegExp") return undefined;
  const first = node.arguments?.[0];
  return first && ts.isStringLiteralLike(first) ? first : undefined;
}

/** `a ?? b` rewritten as `a || b`, in parentheses wherever `??` and `||` would otherwise mix. */
function nullishAsOr(node: ts.BinaryExpression, source: ts.SourceFile): {
  start: number;
  end: number;
  replacement: string;
} {
  const mixes = isNullish(node.left) || isNullish(node.right) || isNullish(node.parent);
  const token = node.operatorToken;
  if (!mixes) return { start: token.getStart(source), end: token.getEnd(), replacement: "||" };
  const side = (operand: ts.Expression) =>
    ts.isParenthesizedExpression(operand) || !ts.isBinaryExpression(operand)
      ? operand.getText(source)
      : `(${operand.getText(source)})`;
  return {
    start: node.getStart(source),
    end: node.getEnd(),
    replacement: `(${side(node.left)} || ${side(node.right)})`,
  };
}

/** Where the operators put what they find: edits of one file, each once. */
interface Collector {
  readonly source: ts.SourceFile;
  readonly nullish?: NullishJudge;
  add(operator: Operator, start: number, end: number, replacement: string): void;
}

const replaceNode = (c: Collector, operator: Operator, node: ts.Node, replacement: string) =>
  c.add(operator, node.getStart(c.source), node.getEnd(), replacement);

const negate = (c: Collector, condition: ts.Expression) =>
  replaceNode(c, "negate", condition, `!(${condition.getText(c.source)})`);

/** `boundary`, `equality`, `logical`, `nullish`, and `negate` of an `a && b();` guard. */
function binary(c: Collector, node: ts.BinaryExpression): void {
  const token = node.operatorToken;
  const swap = SWAPS.get(token.kind);
  if (swap) c.add(swap[0], token.getStart(c.source), token.getEnd(), swap[1]);
  if (
    token.kind === ts.SyntaxKind.AmpersandAmpersandToken && ts.isExpressionStatement(node.parent)
  ) negate(c, node.left);
  if (token.kind === ts.SyntaxKind.QuestionQuestionToken && (c.nullish?.(node) ?? true)) {
    const { start, end, replacement } = nullishAsOr(node, c.source);
    c.add("nullish", start, end, replacement);
  }
}

/** `remove-exit`: `if (false)` for a branch that exits, each exit of a longer branch removed. */
function branchExits(c: Collector, node: ts.IfStatement): void {
  const exits = (branch: ts.Statement) =>
    ts.isBlock(branch) ? branch.statements.filter(isExit) : isExit(branch) ? [branch] : [];
  const long = (branch: ts.Statement) => ts.isBlock(branch) && branch.statements.length > 1;
  const thenExits = exits(node.thenStatement);
  if (thenExits.length > 0) replaceNode(c, "remove-exit", node.expression, "false");
  if (long(node.thenStatement)) {
    for (const exit of thenExits) replaceNode(c, "remove-exit", exit, ";");
  }
  const other = node.elseStatement;
  if (other && !ts.isIfStatement(other)) {
    for (const exit of exits(other)) replaceNode(c, "remove-exit", exit, ";");
  }
}

/** `remove-call`: a statement that is only a call (awaited or voided). */
function statementCall(c: Collector, node: ts.ExpressionStatement): void {
  let expression: ts.Expression = node.expression;
  if (ts.isAwaitExpression(expression) || ts.isVoidExpression(expression)) {
    expression = expression.expression;
  }
  if (
    ts.isCallExpression(expression) &&
    expression.expression.kind !== ts.SyntaxKind.SuperKeyword &&
    expression.expression.kind !== ts.SyntaxKind.ImportKeyword
  ) replaceNode(c, "remove-call", node, ";");
}

/** `cidr`: the prefix length of a CIDR string, by one either way within the family. */
function cidrString(c: Collector, node: ts.StringLiteralLike): void {
  const match = CIDR.exec(node.text);
  const raw = node.getText(c.source);
  if (!match || raw.slice(1, -1) !== node.text) return; // escapes: offsets would not map
  const max = match[1].includes(":") ? 128 : 32;
  const prefix = Number(match[2]);
  const start = node.getStart(c.source) + 1 + match[1].length + 1;
  for (const next of [prefix - 1, prefix + 1]) {
    if (next >= 0 && next <= max && prefix <= max) {
      c.add("cidr", start, start + match[2].length, String(next));
    }
  }
}

/** `number`, the regex operators on a literal, `cidr`. */
function literal(c: Collector, node: ts.Node): void {
  if ((ts.isNumericLiteral(node) || ts.isBigIntLiteral(node)) && !isName(node)) {
    for (const text of offByOne(node, node.getText(c.source))) {
      replaceNode(c, "number", node, text);
    }
  } else if (ts.isRegularExpressionLiteral(node)) {
    const text = node.getText(c.source);
    const close = text.lastIndexOf("/");
    for (const edit of patternEdits(text.slice(1, close))) {
      const pattern = edit.pattern === "" ? "(?:)" : edit.pattern;
      replaceNode(c, edit.operator, node, `/${pattern}/${text.slice(close + 1)}`);
    }
  } else if (ts.isStringLiteralLike(node)) cidrString(c, node);
}

/** Every operator edit of `source` (a file parsed with parent pointers set). */
export function findEdits(source: ts.SourceFile, options: FindOptions = {}): Edit[] {
  const edits: Edit[] = [];
  const seen = new Set<string>();
  const collector: Collector = {
    source,
    nullish: options.nullish,
    add(operator, start, end, replacement) {
      const key = `${start}:${end}:${replacement}`;
      if ((options.operators?.has(operator) ?? true) && !seen.has(key)) {
        seen.add(key);
        edits.push({ operator, start, end, replacement });
      }
    },
  };
  function visit(node: ts.Node): void {
    if (typeOnly(node)) return;
    if (ts.isBinaryExpression(node)) binary(collector, node);
    else if (ts.isIfStatement(node)) {
      negate(collector, node.expression);
      branchExits(collector, node);
    } else if (ts.isWhileStatement(node) || ts.isDoStatement(node)) {
      negate(collector, node.expression);
    } else if (ts.isConditionalExpression(node)) negate(collector, node.condition);
    else if (ts.isExpressionStatement(node)) statementCall(collector, node);
    else literal(collector, node);
    const pattern = regExpArgument(node);
    for (const edit of pattern ? patternEdits(pattern.text) : []) {
      replaceNode(collector, edit.operator, pattern!, JSON.stringify(edit.pattern));
    }
    ts.forEachChild(node, visit);
  }
  visit(source);
  return edits;
}

/** Parses `text` as the TypeScript file `file`. */
export function parse(file: string, text: string): ts.SourceFile {
  return ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true, ts.ScriptKind.TS);
}

/**
 * The mutants of one file, with stable ids, in file order.
 *
 * @param file the path from the repository root (it names the mutants)
 * @param source the file parsed (by {@link parse}, or taken from a typed program)
 */
export function mutantsOf(
  file: string,
  source: ts.SourceFile,
  options: FindOptions = {},
): Mutant[] {
  return identify(file, source.text, findEdits(source, options));
}
