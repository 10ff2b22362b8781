/**
 * The operator mutant generator (`scripts/mutation/operators.ts`): the exact mutants each operator
 * makes of small snippets, nothing from comments, imports, types or doc examples, `??` judged by
 * type, and ids that stay the same under an unrelated edit above.
 *
 * @module
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { applyMutant, type Mutant, type Operator } from "../scripts/mutation/mutant.ts";
import { mutantsOf, parse } from "../scripts/mutation/operators.ts";
import { nullishJudge, typedProgram } from "../scripts/mutation/nullish.ts";
import { patternEdits } from "../scripts/mutation/regex_edits.ts";

/** The mutants of `text` as `line:column operator original → replacement`. */
function mutants(text: string, ...operators: Operator[]): string[] {
  const only = operators.length > 0 ? { operators: new Set(operators) } : {};
  return mutantsOf("src/x.ts", parse("src/x.ts", text), only).map(describe);
}

const describe = (m: Mutant) =>
  `${m.line}:${m.column} ${m.operator} ${m.original} → ${m.replacement}`;

Deno.test("operators: boundary swaps each comparison for its neighbour, equality flips", () => {
  assert.deepEqual(mutants("if (a < b) x(a <= b, c > d, c >= d);\n", "boundary"), [
    "1:7 boundary < → <=",
    "1:16 boundary <= → <",
    "1:24 boundary > → >=",
    "1:31 boundary >= → >",
  ]);
  assert.deepEqual(mutants("f(a === b, a !== b, a == b, a != b);\n", "equality"), [
    "1:5 equality === → !==",
    "1:14 equality !== → ===",
    "1:23 equality == → !=",
    "1:31 equality != → ==",
  ]);
});

Deno.test("operators: negate wraps if, while, do, ternary and && guard conditions", () => {
  const source = [
    "if (ok) x();",
    "while (i < n) i++;",
    "do i--; while (i > 0);",
    "const v = s ? 1 : 2;",
    "ready && start();",
    "const w = p && q;",
    "for (let j = 0; j < 3; j++) y();",
    "",
  ].join("\n");
  assert.deepEqual(mutants(source, "negate"), [
    "1:5 negate ok → !(ok)",
    "2:8 negate i < n → !(i < n)",
    "3:16 negate i > 0 → !(i > 0)",
    "4:11 negate s → !(s)",
    "5:1 negate ready → !(ready)",
  ]);
  assert.deepEqual(mutants("const w = p && q || r;\n", "logical"), [
    "1:13 logical && → ||",
    "1:18 logical || → &&",
  ]);
});

Deno.test("operators: nullish turns ?? into ||, in parentheses where the two would mix", () => {
  assert.deepEqual(mutants("const a = b ?? 1;\nconst c = d ?? e ?? f;\n", "nullish"), [
    "1:13 nullish ?? → ||",
    "2:11 nullish d ?? e → (d || e)",
    "2:11 nullish d ?? e ?? f → ((d ?? e) || f)",
  ]);
});

Deno.test("operators: nullish keeps ?? only where the left side can be 0, NaN, '' or false", async () => {
  const root = await Deno.makeTempDir({ prefix: "mutate-ops-types-" });
  try {
    const lines = [
      "declare const n: number | undefined;",
      "declare const o: { a: 1 } | undefined;",
      "declare const s: string | undefined;",
      "declare const b: boolean | undefined;",
      "declare const u: unknown;",
      "declare const one: 1 | null;",
      "export const kept = [n ?? 1, s ?? 'x', b ?? true, u ?? 0];",
      "export const dropped = [o ?? {}, s ?? '', b ?? false, one ?? 2];",
      "",
    ];
    await Deno.writeTextFile(join(root, "t.ts"), lines.join("\n"));
    const program = typedProgram(root, ["t.ts"]);
    const found = mutantsOf("t.ts", program.getSourceFile(join(root, "t.ts"))!, {
      nullish: nullishJudge(program),
      operators: new Set(["nullish"]),
    });
    assert.deepEqual(found.map((m) => `${m.line}:${m.column}`), ["7:24", "7:32", "7:42", "7:53"]);
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});

Deno.test("operators: number moves each value literal by one, never a type, a key or a name", () => {
  const source = [
    "const a = 10, h = 0x1f, g = 2n, z = 0, f = 1.5, big = 1_000;",
    "let t: 3 = 3 as 3;",
    "enum E { A = 4 }",
    "const o = { 7: 'x', p: 8 };",
    "",
  ].join("\n");
  assert.deepEqual(mutants(source, "number"), [
    "1:11 number 10 → 11",
    "1:11 number 10 → 9",
    "1:19 number 0x1f → 0x1e",
    "1:19 number 0x1f → 0x20",
    "1:29 number 2n → 1n",
    "1:29 number 2n → 3n",
    "1:37 number 0 → (-1)",
    "1:37 number 0 → 1",
    "1:44 number 1.5 → 0.5",
    "1:44 number 1.5 → 2.5",
    "1:55 number 1_000 → 1001",
    "1:55 number 1_000 → 999",
    "2:12 number 3 → 2",
    "2:12 number 3 → 4",
    "3:14 number 4 → 3",
    "3:14 number 4 → 5",
    "4:24 number 8 → 7",
    "4:24 number 8 → 9",
  ]);
});

Deno.test("operators: remove-call drops call statements, not super(), assignments or new", () => {
  const source = [
    "class K extends B { constructor() { super(); this.go(); } }",
    "async function f() { await g(); void h(); x = i(); new J(); a?.b(); }",
    "",
  ].join("\n");
  assert.deepEqual(mutants(source, "remove-call"), [
    "1:46 remove-call this.go(); → ;",
    "2:22 remove-call await g(); → ;",
    "2:33 remove-call void h(); → ;",
    "2:61 remove-call a?.b(); → ;",
  ]);
});

Deno.test("operators: remove-exit makes a one-line exit unreachable and drops exits of longer branches", () => {
  const source = [
    "function f(c: boolean, d: boolean) {",
    "  if (c) return 1;",
    "  if (d) {",
    "    log();",
    "    throw new Error('x');",
    "  } else return 2;",
    "  for (;;) { if (c) continue; if (d) { break; } }",
    "}",
    "",
  ].join("\n");
  assert.deepEqual(mutants(source, "remove-exit"), [
    "2:7 remove-exit c → false",
    "3:7 remove-exit d → false",
    "5:5 remove-exit throw new Error('x'); → ;",
    "6:10 remove-exit return 2; → ;",
    "7:18 remove-exit c → false",
    "7:35 remove-exit d → false",
  ]);
});

Deno.test("operators: regex anchors and class members come out of literals and RegExp strings", () => {
  const source =
    'const r = /^a[bc]$/i;\nconst s = new RegExp("^x\\\\$");\nconst t = RegExp(`[^ab]`);\n';
  assert.deepEqual(mutants(source, "regex-anchor", "char-class"), [
    "1:11 char-class /^a[bc]$/i → /^a[b]$/i",
    "1:11 char-class /^a[bc]$/i → /^a[c]$/i",
    "1:11 regex-anchor /^a[bc]$/i → /^a[bc]/i",
    "1:11 regex-anchor /^a[bc]$/i → /a[bc]$/i",
    '2:22 regex-anchor "^x\\\\$" → "x\\\\$"',
    '3:18 char-class `[^ab]` → "[^a]"',
    '3:18 char-class `[^ab]` → "[^b]"',
  ]);
  // Escapes, ranges and \u escapes are one member each; a one-member class is left alone.
  assert.deepEqual(patternEdits("[\\d\\-a-f\\u0041][x]\\^"), [
    { operator: "char-class", pattern: "[\\-a-f\\u0041][x]\\^" },
    { operator: "char-class", pattern: "[\\da-f\\u0041][x]\\^" },
    { operator: "char-class", pattern: "[\\d\\-\\u0041][x]\\^" },
    { operator: "char-class", pattern: "[\\d\\-a-f][x]\\^" },
  ]);
});

Deno.test("operators: cidr moves a prefix length by one within its family's range", () => {
  const source =
    'const r = ["172.16.0.0/12", "::1/128", "0.0.0.0/0", "1.2.3.4", "a/b", "10.0.0.0/33"];\n';
  assert.deepEqual(mutants(source, "cidr"), [
    "1:24 cidr 12 → 11",
    "1:24 cidr 12 → 13",
    "1:34 cidr 128 → 127",
    "1:49 cidr 0 → 1",
  ]);
});

Deno.test("operators: nothing comes from comments, imports, types, declarations or doc examples", () => {
  const source = [
    'import { a } from "./a.ts";',
    'export { b } from "./b.ts";',
    'import type { C } from "./c.ts";',
    "/**",
    " * @example",
    " * ```ts",
    " * if (a < 1) return a === 2 && f();",
    " * ```",
    " */",
    "// if (x > 1) g();",
    "type T = A extends B ? 1 : 2;",
    "interface I { n: 3; m(x: 4): void }",
    "declare const k: number;",
    "declare function d(x: 5): 6;",
    "function f<P extends 7>(x: 8 | 9 = 10): x is 11 { return x satisfies 12; }",
    "",
  ].join("\n");
  assert.deepEqual(mutants(source), ["15:36 number 10 → 11", "15:36 number 10 → 9"]);
});

Deno.test("mutant ids: an unrelated edit above keeps every id; editing the line itself changes it", () => {
  const source = "export function f(n: number) {\n  if (n > 1) g();\n  return n === 2;\n}\n";
  const before = mutantsOf("src/x.ts", parse("src/x.ts", source));
  const edited = '// a new comment\nimport { g } from "./g.ts";\n\n' +
    source.replace("  return", "    return"); // re-indented too
  const after = mutantsOf("src/x.ts", parse("src/x.ts", edited));
  assert.ok(before.length >= 8, `${before.length} mutants`);
  assert.deepEqual(after.map((m) => m.id), before.map((m) => m.id));
  assert.deepEqual(after.map((m) => m.line), before.map((m) => m.line + 3));
  assert.match(before[0].id, /^src\/x\.ts:[a-z-]+:[0-9a-f]{10}$/);
  // Editing the mutated line gives its mutants new ids, and the others keep theirs.
  const changed = mutantsOf("src/x.ts", parse("src/x.ts", source.replace("n > 1", "n > 2")));
  const kept = changed.filter((m) => before.some((b) => b.id === m.id));
  assert.deepEqual(new Set(kept.map((m) => m.line)), new Set([3]));
  // Two identical lines: the second's mutants are told apart by order.
  const twice = mutantsOf("src/x.ts", parse("src/x.ts", "if (a) b();\nif (a) b();\n"));
  assert.deepEqual(twice.map((m) => m.id.replace(/:[0-9a-f]+/, "")), [
    "src/x.ts:negate",
    "src/x.ts:remove-call",
    "src/x.ts:negate~2",
    "src/x.ts:remove-call~2",
  ]);
});

Deno.test("applyMutant() replaces exactly the span and refuses a file that changed under it", () => {
  const source = "const ok = a < b;\n";
  const [mutant] = mutantsOf("src/x.ts", parse("src/x.ts", source), {
    operators: new Set(["boundary"]),
  });
  assert.equal(applyMutant(source, mutant), "const ok = a <= b;\n");
  assert.throws(() => applyMutant("const ok = a > b;\n", mutant), {
    message: /src\/x\.ts:1:14 holds ">", not "<"/,
  });
});

Deno.test("--sample: a hash of the id picks about the fraction asked, the same ones every time, nested", async () => {
  const { inSample } = await import("../scripts/mutation/generate.ts");
  const { parseOpsArgs } = await import("../scripts/mutate_ops.ts");
  const ids = Array.from({ length: 4000 }, (_, i) => `src/x_${i % 37}.ts:number:${i.toString(16)}`);
  const quarter = ids.filter((id) => inSample(id, 0.25));
  assert.ok(quarter.length > 850 && quarter.length < 1150, `${quarter.length} of 4000`);
  assert.deepEqual(ids.filter((id) => inSample(id, 0.25)), quarter, "the same ones again");
  const half = new Set(ids.filter((id) => inSample(id, 0.5)));
  assert.ok(quarter.every((id) => half.has(id)), "a larger sample holds the smaller one");
  assert.equal(ids.every((id) => inSample(id, 1)), true);
  for (const bad of ["0", "-0.5", "1.5", "half"]) {
    assert.match(String(parseOpsArgs(["--sample", bad])), /^--sample takes a fraction above 0/);
  }
  const options = parseOpsArgs(["--sample", "0.2"]);
  assert.equal(typeof options === "object" && options.sample, 0.2);
});
