/**
 * Which test files can kill a mutant of a module: those that import it, found from the import
 * graph of every `*_test.ts` file. An edge is a static `import`/`export … from`, a dynamic
 * `import("…")` with a literal path, or `new URL("….ts", import.meta.url)` (how a Worker's or a
 * subprocess's entry module is named) — read from each file's syntax tree, relative paths only
 * (`npm:` and `node:` modules are never mutated). A test that starts a program by a path it builds
 * at run time is not seen; `--full` runs those.
 *
 * Direct importers run first, most specific first: the test named after the module
 * (`cidr_test.ts` for `src/request/cidr.ts`), then names that contain it, then names sharing a
 * word with the module or its folder, then the rest; transitive importers follow, nearest first.
 *
 * @module
 */
import ts from "typescript";
import { basename, dirname, join, normalize } from "node:path";

/** Who imports whom, over every file reachable from the tests. */
export interface ImportGraph {
  /** Every test file, from the root. */
  readonly tests: readonly string[];
  /** For each file, the files that import it. */
  readonly importers: ReadonlyMap<string, ReadonlySet<string>>;
}

/** The test files to run against a module's mutants, in the order to run them. */
export interface TestSelection {
  /** Test files that import the module themselves. */
  readonly direct: readonly string[];
  /** Test files that reach it through other modules (fixtures, the program, its layers). */
  readonly transitive: readonly string[];
}

const SKIPPED = new Set([".git", "node_modules", "dist", ".deno", "coverage", ".scratch"]);

/** Every `*_test.ts` file under `root`, sorted. */
export async function findTests(root: string, folder = ""): Promise<string[]> {
  const found: string[] = [];
  for await (const entry of Deno.readDir(join(root, folder))) {
    const path = folder === "" ? entry.name : `${folder}/${entry.name}`;
    if (entry.isDirectory && !SKIPPED.has(entry.name)) found.push(...await findTests(root, path));
    else if (entry.isFile && entry.name.endsWith("_test.ts")) found.push(path);
  }
  return found.sort();
}

/** The relative module paths `text` (the file `file`) loads, as paths from the root. */
export function importsOf(file: string, text: string): string[] {
  const source = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, false, ts.ScriptKind.TS);
  const found = new Set<string>();
  const add = (specifier: ts.Node | undefined) => {
    if (!specifier || !ts.isStringLiteralLike(specifier)) return;
    const spec = specifier.text;
    if (!spec.startsWith("./") && !spec.startsWith("../")) return;
    const path = normalize(join(dirname(file), spec));
    if (!path.startsWith("../")) found.add(path);
  };
  function visit(node: ts.Node): void {
    if (ts.isImportDeclaration(node) || ts.isExportDeclaration(node)) add(node.moduleSpecifier);
    else if (ts.isCallExpression(node) && node.expression.kind === ts.SyntaxKind.ImportKeyword) {
      add(node.arguments[0]);
    } else if (
      ts.isNewExpression(node) && ts.isIdentifier(node.expression) &&
      node.expression.text === "URL" && node.arguments?.length === 2 &&
      node.arguments[1].getText(source) === "import.meta.url" &&
      ts.isStringLiteralLike(node.arguments[0]) && /\.[jt]s$/.test(node.arguments[0].text)
    ) add(node.arguments[0]);
    ts.forEachChild(node, visit);
  }
  visit(source);
  return [...found];
}

/** Reads the import graph of every test under `root` (each file read and parsed once). */
export async function importGraph(root: string): Promise<ImportGraph> {
  const tests = await findTests(root);
  const importers = new Map<string, Set<string>>();
  const seen = new Set<string>(tests);
  const queue = [...tests];
  while (queue.length > 0) {
    const file = queue.pop()!;
    let text: string;
    try {
      text = await Deno.readTextFile(join(root, file));
    } catch {
      continue; // a path named in code that is not there: nothing to follow
    }
    if (!/\.[jt]sx?$/.test(file)) continue;
    for (const imported of importsOf(file, text)) {
      let set = importers.get(imported);
      if (!set) importers.set(imported, set = new Set());
      set.add(file);
      if (!seen.has(imported)) {
        seen.add(imported);
        queue.push(imported);
      }
    }
  }
  return { tests, importers };
}

/** The words of a file name without its extension and `_test`. */
const words = (stem: string) => stem.split(/[_.-]/).filter((word) => word.length >= 3);
const stemOf = (path: string) => basename(path).replace(/(_test)?\.ts$/, "");

/** How specific a test is to `module`: 0 named after it … 3 unrelated by name. */
export function specificity(module: string, test: string): number {
  const name = stemOf(module);
  const stem = stemOf(test);
  if (stem === name) return 0;
  if (stem.includes(name) || name.includes(stem)) return 1;
  const mine = new Set([...words(name), ...words(basename(dirname(module)))]);
  return words(stem).some((word) => mine.has(word)) ? 2 : 3;
}

/** The tests that import `module`, directly and through others, each in the order to run. */
export function selectTests(graph: ImportGraph, module: string): TestSelection {
  const distance = new Map<string, number>([[module, 0]]);
  const queue = [module];
  for (let at = 0; at < queue.length; at++) {
    const file = queue[at];
    for (const importer of graph.importers.get(file) ?? []) {
      if (distance.has(importer)) continue;
      distance.set(importer, distance.get(file)! + 1);
      queue.push(importer);
    }
  }
  const tests = graph.tests.filter((test) => test !== module && distance.has(test));
  const order = (a: string, b: string) =>
    specificity(module, a) - specificity(module, b) || distance.get(a)! - distance.get(b)! ||
    a.localeCompare(b);
  return {
    direct: tests.filter((test) => distance.get(test) === 1).sort(order),
    transitive: tests.filter((test) => distance.get(test)! > 1).sort((a, b) =>
      distance.get(a)! - distance.get(b)! || order(a, b)
    ),
  };
}
