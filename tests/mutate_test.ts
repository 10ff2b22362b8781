import assert from "node:assert/strict";
import { join } from "node:path";
import {
  checkMutations,
  copyTree,
  killedBy,
  type Mutation,
  parseMutations,
  runTests,
} from "../scripts/mutate.ts";

/** A tiny repository: one module, one test of it, and a `.git` folder. */
async function fakeRepo(): Promise<string> {
  const root = await Deno.makeTempDir({ prefix: "mutate-test-" });
  await Deno.mkdir(join(root, "src"));
  await Deno.mkdir(join(root, "tests"));
  await Deno.mkdir(join(root, ".git"));
  await Deno.writeTextFile(join(root, ".git", "HEAD"), "ref: refs/heads/main\n");
  await Deno.writeTextFile(
    join(root, "src", "limit.ts"),
    "export function over(n: number): boolean {\n  return n > 10;\n}\n// n > 10 again\n" +
      "export const MAX = 10;\n",
  );
  await Deno.writeTextFile(
    join(root, "tests", "limit_test.ts"),
    'import { over } from "../src/limit.ts";\n' +
      'Deno.test("over() refuses 11", () => {\n' +
      '  if (!over(11) || over(10)) throw new Error("wrong");\n});\n',
  );
  return root;
}

function mutation(fields: Partial<Mutation>): Mutation {
  return {
    name: "limit.flip",
    file: "src/limit.ts",
    original: "return n > 10;",
    replacement: "return n >= 10;",
    tests: ["tests/limit_test.ts"],
    ...fields,
  };
}

Deno.test("checkMutations() accepts an entry whose original text occurs exactly once", async () => {
  const root = await fakeRepo();
  try {
    assert.deepEqual(await checkMutations(root, [mutation({})]), []);
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});

Deno.test("checkMutations() refuses missing and ambiguous original text, naming the entry", async () => {
  const root = await fakeRepo();
  try {
    const problems = await checkMutations(root, [
      mutation({ name: "limit.gone", original: "return n < 10;" }),
      mutation({ name: "limit.twice", original: "n > 10", replacement: "n > 11" }),
      mutation({ name: "limit.fine" }),
    ]);
    assert.deepEqual(problems, [
      'Mutation "limit.gone": original text not found in "src/limit.ts"',
      'Mutation "limit.twice": original text is ambiguous: it occurs 2 times in "src/limit.ts"',
    ]);
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});

Deno.test("checkMutations() refuses absent files, escaping paths, no-ops and reused names", async () => {
  const root = await fakeRepo();
  try {
    const problems = await checkMutations(root, [
      mutation({ name: "a", file: "src/nothing.ts" }),
      mutation({ name: "b", file: "../limit.ts" }),
      mutation({ name: "c", tests: ["tests/none_test.ts"] }),
      mutation({ name: "d", replacement: "return n > 10;" }),
      mutation({ name: "e", original: "10;\n}" }),
      mutation({ name: "f" }),
      mutation({ name: "f" }),
    ]);
    assert.deepEqual(problems, [
      'Mutation "a": file "src/nothing.ts" not found',
      'Mutation "b": file "../limit.ts" not found',
      'Mutation "c": test file "tests/none_test.ts" not found',
      'Mutation "d": replacement equals the original',
      'Mutation "e": original text spans more than one line',
      'Mutation "f": the name is used twice',
    ]);
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});

Deno.test("parseMutations() refuses an entry without tests, naming it", () => {
  assert.throws(
    () => parseMutations([{ name: "x", file: "a.ts", original: "a", replacement: "b", tests: [] }]),
    { name: "TypeError", message: /^Mutation 0 \("x"\) needs/ },
  );
  assert.throws(() => parseMutations({}), { name: "TypeError", message: /must be an array/ });
});

Deno.test("copyTree() copies the tree without .git; runTests() tells a pass from a failure", async () => {
  const root = await fakeRepo();
  const scratch = await Deno.makeTempDir({ prefix: "mutate-copy-" });
  try {
    await copyTree(root, scratch);
    const copied = [];
    for await (const entry of Deno.readDir(scratch)) copied.push(entry.name);
    assert.deepEqual(copied.sort(), ["src", "tests"]);
    const tests = ["tests/limit_test.ts"];
    assert.deepEqual((await runTests(scratch, tests, { timeoutMs: 60_000 })).status, "pass");
    const path = join(scratch, "src", "limit.ts");
    const source = await Deno.readTextFile(path);
    await Deno.writeTextFile(path, source.replace("n > 10;", "n >= 10;"));
    const failed = await runTests(scratch, tests, { timeoutMs: 60_000 });
    assert.deepEqual(failed.status, "fail");
    assert.equal(killedBy(failed.output), '"over() refuses 11"');
    await Deno.writeTextFile(path, source.replace("n > 10;", "(() => { for (;;); })();"));
    assert.deepEqual((await runTests(scratch, tests, { timeoutMs: 1_500 })).status, "timeout");
    // The original repository was never touched.
    assert.match(await Deno.readTextFile(join(root, "src", "limit.ts")), /return n > 10;/);
  } finally {
    await Deno.remove(scratch, { recursive: true });
    await Deno.remove(root, { recursive: true });
  }
});

Deno.test("scripts/mutations.json: every entry still names text that occurs once in its file", async () => {
  // A refactor that moves or renames a mutated line must move the entry with it; otherwise
  // `deno task mutate` refuses to start, long after the change that broke it.
  const root = new URL("../", import.meta.url).pathname;
  const entries = parseMutations(
    JSON.parse(await Deno.readTextFile(`${root}scripts/mutations.json`)),
  );
  assert.ok(entries.length > 50, `${entries.length} entries`);
  assert.deepEqual(await checkMutations(root, entries), []);
});
