/**
 * The operator mutation runner (`scripts/mutate_ops.ts`): which tests a module's mutants run
 * against, `--changed` on a real git repository, stale justifications, the default module list,
 * and a whole run on a tiny repository where one mutant is killed by its direct test, one by a
 * test that reaches the module through a fixture, and one survives.
 *
 * @module
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { main } from "../scripts/mutate_ops.ts";
import { parseEquivalents, staleEquivalents } from "../scripts/mutation/equivalents.ts";
import { generate, onChangedLines } from "../scripts/mutation/generate.ts";
import { readResults } from "../scripts/mutation/results.ts";
import { changedLines, DEFAULT_MODULES, resolveModules } from "../scripts/mutation/scope.ts";
import { importGraph, importsOf, selectTests } from "../scripts/mutation/test_graph.ts";

const ROOT = new URL("../", import.meta.url).pathname;

/** Writes `files` (path → text) under a new temporary folder. */
async function tree(files: Record<string, string>): Promise<string> {
  const root = await Deno.makeTempDir({ prefix: "mutate-ops-test-" });
  for (const [path, text] of Object.entries(files)) {
    await Deno.mkdir(join(root, path, ".."), { recursive: true });
    await Deno.writeTextFile(join(root, path), text);
  }
  return root;
}

Deno.test("importsOf() follows imports, re-exports, import() and worker URLs, not packages", () => {
  const text = [
    'import { a } from "./a.ts";',
    'import type { B } from "../src/b.ts";',
    'export * from "./c.ts";',
    'import ts from "typescript";',
    'import { join } from "node:path";',
    'const m = await import("../main.ts");',
    'new Worker(new URL("./worker.ts", import.meta.url), { type: "module" });',
    'new URL("./data.yaml", import.meta.url);',
    '// import { z } from "./z.ts";',
    "",
  ].join("\n");
  assert.deepEqual(importsOf("tests/x_test.ts", text).sort(), [
    "main.ts",
    "src/b.ts",
    "tests/a.ts",
    "tests/c.ts",
    "tests/worker.ts",
  ]);
});

Deno.test("selectTests() puts direct importers first, the test named after the module leading", async () => {
  const root = await tree({
    "src/ledger/budget.ts": "export const b = 1;\n",
    "src/ledger/user.ts": 'import { b } from "./budget.ts";\nexport const u = b;\n',
    "src/other.ts": "export const o = 1;\n",
    "tests/aaa_test.ts": 'import "../src/ledger/budget.ts";\n',
    "tests/budget_test.ts": 'import "../src/ledger/budget.ts";\n',
    "tests/ledger_misc_test.ts": 'import "../src/ledger/budget.ts";\n',
    "tests/rate_budget_more_test.ts": 'import "../src/ledger/budget.ts";\n',
    "tests/user_test.ts": 'import "../src/ledger/user.ts";\n',
    "tests/fixtures/helper.ts": 'import "../../src/ledger/user.ts";\n',
    "tests/deep_test.ts": 'import "./fixtures/helper.ts";\n',
    "tests/other_test.ts": 'import "../src/other.ts";\n',
  });
  try {
    const graph = await importGraph(root);
    assert.deepEqual(selectTests(graph, "src/ledger/budget.ts"), {
      direct: [
        "tests/budget_test.ts",
        "tests/rate_budget_more_test.ts",
        "tests/ledger_misc_test.ts",
        "tests/aaa_test.ts",
      ],
      transitive: ["tests/user_test.ts", "tests/deep_test.ts"],
    });
    assert.deepEqual(selectTests(graph, "src/other.ts"), {
      direct: ["tests/other_test.ts"],
      transitive: [],
    });
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});

/** Runs git in `root`, failing the test when it fails. */
async function git(root: string, ...args: string[]): Promise<void> {
  const output = await new Deno.Command("git", {
    args: ["-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false", ...args],
    cwd: root,
  }).output();
  assert.ok(output.success, new TextDecoder().decode(output.stderr));
}

Deno.test("--changed keeps only mutants on lines changed since the commit, and untracked files whole", async () => {
  const root = await tree({
    "src/a.ts": "export const a = 1;\nexport const b = 2;\nexport const c = 3;\n",
  });
  try {
    await git(root, "init", "-q");
    await git(root, "add", ".");
    await git(root, "commit", "-q", "-m", "one");
    await Deno.writeTextFile(
      join(root, "src/a.ts"),
      "export const a = 1;\nexport const b = 5;\nexport const c = 3;\n",
    );
    await Deno.writeTextFile(join(root, "src/new.ts"), "export const n = 7;\n");
    const changed = await changedLines(root, "HEAD", ["src/a.ts", "src/new.ts"]);
    assert.deepEqual(
      changed,
      new Map<string, unknown>([["src/a.ts", new Set([2])], [
        "src/new.ts",
        "all",
      ]]),
    );
    const all = await generate(root, ["src/a.ts", "src/new.ts"]);
    const kept = onChangedLines([...all.values()].flat(), changed);
    assert.deepEqual(kept.map((m) => `${m.file}:${m.line} ${m.replacement}`), [
      "src/a.ts:2 4",
      "src/a.ts:2 6",
      "src/new.ts:1 6",
      "src/new.ts:1 8",
    ]);
    // The same through the command line; an unknown commit is refused with git's reason.
    const lines: string[] = [];
    const status = await main(["--list", "--changed", "HEAD", "--modules", "src"], {
      root,
      log: (line) => lines.push(line),
    });
    assert.equal(status, 0);
    assert.equal(lines.at(-1), "4 mutants, 0 justified equivalent, 0 stale");
    await assert.rejects(changedLines(root, "no-such-commit", ["src/a.ts"]), /git diff/);
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});

Deno.test("staleEquivalents() names a justification whose mutant is gone, changed or in a missing file", async () => {
  const root = await tree({ "src/a.ts": "export const f = (x: number) => x > 1 ? x : 1;\n" });
  try {
    const before = await generate(root, ["src/a.ts"]);
    const boundary = before.get("src/a.ts")!.find((m) => m.operator === "boundary")!;
    const entry = {
      id: boundary.id,
      file: "src/a.ts",
      original: ">",
      mutated: ">=",
      reason: "x and 1 are equal there",
    };
    const entries = parseEquivalents([entry, { ...entry, id: "x", file: "src/gone.ts" }], "eq");
    const files = await generate(root, ["src/a.ts", "src/gone.ts"]);
    assert.deepEqual(staleEquivalents(entries, files).map((s) => s.why), [
      'file "src/gone.ts" not found',
    ]);
    assert.deepEqual(staleEquivalents([{ ...entry, mutated: ">==" }], files).map((s) => s.why), [
      'the mutant now reads ">" → ">="',
    ]);
    await Deno.writeTextFile(
      join(root, "src/a.ts"),
      "export const f = (x: number) => x > 2 ? x : 2;\n",
    );
    const after = await generate(root, ["src/a.ts"]);
    assert.deepEqual(staleEquivalents(entries.slice(0, 1), after).map((s) => s.why), [
      "no mutant has this id any more",
    ]);
    assert.throws(() => parseEquivalents([{ ...entry, reason: "" }], "eq.json"), {
      message: 'eq.json: entry 0 needs a non-empty string "reason"',
    });
    assert.throws(() => parseEquivalents([entry, entry], "eq.json"), { message: /repeats/ });
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});

Deno.test("the default module list names only files that exist; the justifications are not stale", async () => {
  for (const [area, patterns] of Object.entries(DEFAULT_MODULES)) {
    for (const pattern of patterns) {
      const found = await resolveModules(ROOT, [pattern]);
      assert.ok(found.length > 0, `${area}: ${pattern}`);
    }
  }
  await assert.rejects(resolveModules(ROOT, ["src/nowhere/*.ts"]), {
    message: 'Module pattern "src/nowhere/*.ts" matches no module',
  });
  const path = join(ROOT, "scripts/mutation_equivalents.json");
  const entries = parseEquivalents(JSON.parse(await Deno.readTextFile(path)), path);
  const mutants = await generate(ROOT, entries.map((e) => e.file));
  assert.deepEqual(staleEquivalents(entries, mutants), []);
});

/**
 * A tiny repository: a module, its direct test, a test that reaches it through a fixture, and a
 * test of it that fails unmutated.
 */
function fakeRepo(): Promise<string> {
  return tree({
    "src/limit.ts": [
      "export const seen: number[] = [];",
      "export function over(n: number): boolean {",
      "  return n > 10;",
      "}",
      "export function note(n: number): void {",
      "  seen.push(n);",
      "  console.debug(n);",
      "}",
      "",
    ].join("\n"),
    "tests/limit_test.ts": [
      'import { note, over } from "../src/limit.ts";',
      'Deno.test("over() refuses 10, takes 11", () => {',
      '  if (!over(11) || over(10)) throw new Error("wrong");',
      "  note(1);",
      "});",
      "",
    ].join("\n"),
    "tests/fixtures/notes.ts": 'export { note, seen } from "../../src/limit.ts";\n',
    "tests/limit_broken_test.ts": [
      'import { over } from "../src/limit.ts";',
      'Deno.test("fails unmutated", () => {',
      '  if (over(11)) throw new Error("always");',
      "});",
      "",
    ].join("\n"),
    "tests/notes_test.ts": [
      'import { note, seen } from "./fixtures/notes.ts";',
      'Deno.test("note() remembers", () => {',
      "  note(5);",
      '  if (seen.at(-1) !== 5) throw new Error("forgot");',
      "});",
      "",
    ].join("\n"),
  });
}

/** The fake repository's run: two operators over its one module. */
const RUN_ARGS = ["--modules", "src", "--operators", "boundary,remove-call"];
/** Where that run writes its results and report. */
const RUN_FILES = ["--results", "out/results.jsonl", "--report", "out/survivors.md"];

Deno.test("mutate_ops: one mutant killed directly, one through a fixture, one survivor; a failing test left out", async () => {
  const root = await fakeRepo();
  const lines: string[] = [];
  const log = (line: string) => lines.push(line);
  try {
    assert.equal(await main([...RUN_ARGS, ...RUN_FILES], { root, log }), 1);
    const results = await readResults(join(root, "out/results.jsonl"));
    const verdicts = [...results.mutants.values()].map((r) =>
      `${r.line} ${r.operator} ${r.outcome} ${r.stage ?? "-"} ${r.tests.join(",")}`
    );
    assert.deepEqual(verdicts, [
      "3 boundary killed direct tests/limit_test.ts",
      "6 remove-call killed transitive tests/limit_test.ts,tests/notes_test.ts",
      "7 remove-call survived - tests/limit_test.ts,tests/notes_test.ts",
    ]);
    assert.deepEqual([...results.baselines.values()].map((b) => `${b.file} ${b.status}`).sort(), [
      "tests/limit_broken_test.ts fail",
      "tests/limit_test.ts pass",
      "tests/notes_test.ts pass",
    ]);
    assert.deepEqual([...results.mutants.values()][0].skipped, ["tests/limit_broken_test.ts"]);
    assert.match(
      lines.at(-2)!,
      /^mutate:ops: 3 mutants, 2 killed, 1 survived, 0 equivalent; score 66\.7 %/,
    );
    const report = await Deno.readTextFile(join(root, "out/survivors.md"));
    assert.match(report, /\| src \| 3 \| 0 \| 2 \| 1 \| 0 \| 66\.7 % \|/);
    assert.match(report, /## Survivors \(1\)\n\n### src\/limit\.ts:7:3 — remove-call\n/);
    assert.match(report, /- {3}console\.debug\(n\);\n\+ {3};\n/);
    assert.match(report, /Tests run \(2\): tests\/limit_test\.ts, tests\/notes_test\.ts/);
    assert.match(
      report,
      /## Test files left out \(they fail on the unmutated tree\)\n\n- tests\/limit_broken_test\.ts\n/,
    );
    // The original repository was never mutated.
    assert.match(await Deno.readTextFile(join(root, "src/limit.ts")), /n > 10;\n[^]*seen\.push/);

    // An existing results file is refused unless the run resumes it.
    assert.equal(await main([...RUN_ARGS, ...RUN_FILES], { root, log }), 2);
    assert.match(lines.at(-1)!, /exists: --resume continues it, --fresh starts over/);

    // Resumed with the survivor justified (and one stale justification): nothing runs again.
    const survivor = [...results.mutants.values()].find((r) => r.outcome === "survived")!;
    const justified = {
      id: survivor.id,
      file: "src/limit.ts",
      original: "console.debug(n);",
      mutated: ";",
      reason: "debug output only",
    };
    const stale = { ...justified, id: "src/limit.ts:remove-call:0000000000" };
    await Deno.writeTextFile(join(root, "eq.json"), JSON.stringify([justified, stale]));
    const resumed = [...RUN_ARGS, ...RUN_FILES, "--resume", "--equivalents", "eq.json"];
    lines.length = 0;
    assert.equal(await main(resumed, { root, log }), 1); // the stale entry
    assert.ok(!lines.some((line) => line.startsWith("[")), lines.join("\n"));
    assert.match(lines.at(-2)!, /3 mutants, 2 killed, 0 survived, 1 equivalent, 1 stale/);
    assert.match(lines.at(-2)!, /score 100\.0 %/);
    const second = await Deno.readTextFile(join(root, "out/survivors.md"));
    assert.match(
      second,
      /## Equivalent \(1\)\n\n- src\/limit\.ts:7 remove-call .*debug output only/,
    );
    assert.match(
      second,
      /## Stale justifications \(1\)\n\n- `src\/limit\.ts:remove-call:0+`: no mutant/,
    );
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});

Deno.test("mutate_ops: --resume --survivors judges only the survivors again, once a test kills them", async () => {
  const root = await fakeRepo();
  const lines: string[] = [];
  const log = (line: string) => lines.push(line);
  try {
    assert.equal(await main([...RUN_ARGS, ...RUN_FILES], { root, log }), 1);
    // --survivors alone is refused: it has no verdicts to go back to.
    assert.equal(await main([...RUN_ARGS, ...RUN_FILES, "--survivors"], { root, log }), 2);
    assert.match(lines.at(-1)!, /^--survivors .* needs --resume/);
    // A test that watches console.debug kills the survivor.
    await Deno.writeTextFile(
      join(root, "tests/debug_test.ts"),
      [
        'import { note } from "../src/limit.ts";',
        'Deno.test("note() writes its number to the debug console", () => {',
        "  const said: unknown[] = [];",
        "  const original = console.debug;",
        "  console.debug = (...values: unknown[]) => void said.push(...values);",
        "  try { note(3); } finally { console.debug = original; }",
        '  if (said[0] !== 3) throw new Error("silent");',
        "});",
        "",
      ].join("\n"),
    );
    lines.length = 0;
    assert.equal(
      await main([...RUN_ARGS, ...RUN_FILES, "--resume", "--survivors"], { root, log }),
      0,
    );
    const judged = lines.filter((line) => line.startsWith("["));
    assert.equal(judged.length, 1, lines.join("\n"));
    assert.match(judged[0], /^\[3\/3\] killed +src\/limit\.ts:7:3 {2}remove-call/);
    assert.match(lines.at(-2)!, /3 mutants, 3 killed, 0 survived, 0 equivalent; score 100\.0 %/);
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});

Deno.test("mutate_ops: failures that do not repeat against the mutant do not kill it", async () => {
  // The test fails on its 2nd and 4th runs: the baseline passes, the first mutated run fails and
  // its confirmation passes, the repeated stage fails again and its confirmation passes, the third
  // attempt passes — the mutant survives, the flake is named once. The steady test before it in
  // the stage ran and passed on the first attempt, and is not run again.
  const steady = await Deno.makeTempFile({ prefix: "mutate-ops-steady-" });
  const root = await tree({
    "src/quiet.ts":
      "export function hush(n: number): number {\n  console.debug(n);\n  return n;\n}\n",
    "tests/quiet_test.ts": [
      'import { hush } from "../src/quiet.ts";',
      'Deno.test("hush() is steady", () => {',
      "  let runs = 0;",
      "  try {",
      `    runs = Number(Deno.readTextFileSync(${JSON.stringify(steady)}));`,
      "  } catch { /* the first run */ }",
      `  Deno.writeTextFileSync(${JSON.stringify(steady)}, String(runs + 1));`,
      '  if (hush(2) !== 2) throw new Error("wrong");',
      "});",
      "",
    ].join("\n"),
    "tests/quiet_flaky_test.ts": [
      'import { hush } from "../src/quiet.ts";',
      'Deno.test("hush() gives its argument back", () => {',
      "  let runs = 0;",
      "  try {",
      '    runs = Number(Deno.readTextFileSync("runs"));',
      "  } catch { /* the first run */ }",
      '  Deno.writeTextFileSync("runs", String(runs + 1));',
      '  if (runs + 1 === 2 || runs + 1 === 4 || hush(3) !== 3) throw new Error("flake");',
      "});",
      "",
    ].join("\n"),
  });
  const lines: string[] = [];
  try {
    const args = ["--modules", "src", "--operators", "remove-call", "--results", "r.jsonl"];
    assert.equal(await main([...args, "--report", "r.md"], { root, log: (l) => lines.push(l) }), 1);
    const [record] = (await readResults(join(root, "r.jsonl"))).mutants.values();
    assert.equal(record.outcome, "survived");
    assert.deepEqual(record.flaky, ["tests/quiet_flaky_test.ts"]);
    assert.deepEqual(record.tests, ["tests/quiet_test.ts", "tests/quiet_flaky_test.ts"]);
    assert.equal(await Deno.readTextFile(steady), "2"); // its baseline and the first attempt
    assert.ok(
      lines.some((line) => line.startsWith("flaky     tests/quiet_flaky_test.ts")),
      lines.join("\n"),
    );
    assert.match(
      await Deno.readTextFile(join(root, "r.md")),
      /## Flaky test files \(failed once against a mutant, passed again\)\n\n- tests\/quiet_flaky_test\.ts \(1 mutants\)/,
    );
  } finally {
    await Deno.remove(root, { recursive: true });
    await Deno.remove(steady);
  }
});

Deno.test("mutate_ops: a test that passed its baseline but now fails without the mutant is left out", async () => {
  // Its baseline passes (run 1); from then on it fails whatever the code: against the mutant
  // (runs 2, 3) and without it (run 4). It must not kill the mutant; it is recorded as failing
  // and left out, so the mutant has no test left.
  const root = await tree({
    "src/quiet.ts":
      "export function hush(n: number): number {\n  console.debug(n);\n  return n;\n}\n",
    "tests/quiet_test.ts": [
      'import { hush } from "../src/quiet.ts";',
      'Deno.test("hush() gives its argument back", () => {',
      "  let runs = 0;",
      "  try {",
      '    runs = Number(Deno.readTextFileSync("runs"));',
      "  } catch { /* the first run */ }",
      '  Deno.writeTextFileSync("runs", String(runs + 1));',
      '  if (runs + 1 >= 2 || hush(3) !== 3) throw new Error("broken since");',
      "});",
      "",
    ].join("\n"),
  });
  const lines: string[] = [];
  try {
    const args = ["--modules", "src", "--operators", "remove-call", "--results", "r.jsonl"];
    assert.equal(await main([...args, "--report", "r.md"], { root, log: (l) => lines.push(l) }), 1);
    const results = await readResults(join(root, "r.jsonl"));
    const [record] = results.mutants.values();
    assert.equal(record.outcome, "no tests");
    assert.deepEqual(record.skipped, ["tests/quiet_test.ts"]);
    assert.equal(results.baselines.get("tests/quiet_test.ts")?.status, "fail");
    assert.ok(
      lines.includes(
        "baseline  tests/quiet_test.ts  now fails unmutated — left out of every stage",
      ),
      lines.join("\n"),
    );
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});
