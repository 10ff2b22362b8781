/**
 * The import graph points one way. Every module of `main.ts`, `mod.ts`, `lanes/` and `src/` sits in
 * a layer (its folder); a module may import its own folder and the layers listed before it, never
 * one listed after. Folders listed together are peers: neither imports the other (the hub and the
 * edge are two programs; TLS, egress and policies are independent parts). Ordering the folders
 * this way also rules out folder cycles. The reason for each layer is in docs/architecture.md; a
 * new folder must be placed in {@link LAYERS} before it can be imported at all.
 *
 * Type-only imports count: a type is a dependency a reader has to follow like any other.
 *
 * @module
 */
import assert from "node:assert/strict";
import { dirname, join, normalize } from "node:path";

/** Bottom first; an inner list is a set of peers. */
export const LAYERS: readonly (string | readonly string[])[] = [
  "src/ledger",
  "src/request",
  "src/config",
  ["src/tls", "src/egress", "src/policy", "src/torpool", "src/trust"],
  "src/proxy",
  ["src/observe", "src/fleet"],
  "src/live",
  "src/server",
  "src/pipeline",
  "lanes",
  "src/boot",
  ["src/edge", "src/hub", "src/door"],
  "src/cli",
  "main.ts",
  "mod.ts",
];

const ROOT = normalize(join(dirname(new URL(import.meta.url).pathname), ".."));

/** One import: who, what, and the line it is on. */
export interface ImportEdge {
  readonly from: string;
  readonly to: string;
  readonly line: number;
}

/** The relative `.ts` imports of a module's source (static, dynamic, re-exports, `new URL`). */
export function importsOf(file: string, text: string): ImportEdge[] {
  const out: ImportEdge[] = [];
  const pattern = /(?:\bfrom\s*|\bimport\s*\(\s*|\bimport\s+|new URL\(\s*)"(\.\.?\/[^"]*)"/g;
  for (const match of text.matchAll(pattern)) {
    const spec = match[1];
    if (!spec.endsWith(".ts")) continue;
    const line = text.slice(0, match.index).split("\n").length;
    out.push({ from: file, to: normalize(join(dirname(file), spec)), line });
  }
  return out;
}

/** The folder (or top-level file) of the layer list that holds `path`, or undefined. */
export function folderOf(path: string): string | undefined {
  return LAYERS.flat().find((folder) => path === folder || path.startsWith(`${folder}/`));
}

/** The layer index of a repository path, or -1 when it sits in no layer. */
export function layerOf(path: string): number {
  const folder = folderOf(path);
  return LAYERS.findIndex((layer) =>
    layer === folder || (Array.isArray(layer) && layer.includes(folder))
  );
}

/** True when `edge` points up the layer list, or sideways to a peer folder. */
export function forbidden(edge: ImportEdge): boolean {
  const from = layerOf(edge.from);
  const to = layerOf(edge.to);
  return to > from || (to === from && folderOf(edge.to) !== folderOf(edge.from));
}

async function sources(): Promise<string[]> {
  const files = ["main.ts", "mod.ts"];
  async function walk(dir: string): Promise<void> {
    for await (const entry of Deno.readDir(join(ROOT, dir))) {
      const path = `${dir}/${entry.name}`;
      if (entry.isDirectory) await walk(path);
      else if (path.endsWith(".ts")) files.push(path);
    }
  }
  await walk("src");
  await walk("lanes");
  return files;
}

async function graph(): Promise<ImportEdge[]> {
  const edges: ImportEdge[] = [];
  for (const file of await sources()) {
    edges.push(...importsOf(file, await Deno.readTextFile(join(ROOT, file))));
  }
  return edges;
}

Deno.test("layers: every module of the gateway sits in a listed layer", async () => {
  const unplaced = (await sources()).filter((file) => layerOf(file) < 0);
  assert.deepEqual(unplaced, [], "add the folder to LAYERS and to docs/architecture.md");
});

Deno.test("layers: no module imports a layer above its own, or a peer folder", async () => {
  const upward = (await graph())
    .filter(forbidden)
    .map((edge) => `${edge.from}:${edge.line} imports ${edge.to}`);
  assert.deepEqual(upward, []);
});

Deno.test("layers: every import resolves to a file that exists", async () => {
  const missing: string[] = [];
  for (const edge of await graph()) {
    try {
      await Deno.stat(join(ROOT, edge.to));
    } catch {
      missing.push(`${edge.from}:${edge.line} imports ${edge.to}`);
    }
  }
  assert.deepEqual(missing, []);
});

Deno.test("layers: the checker sees an upward import, a type-only one and a dynamic one", () => {
  // The graph reader itself, on code it must flag: if it missed a spelling, the test above could
  // not fail for it.
  const text = [
    'import { a } from "../pipeline/runner.ts";',
    'import type { B } from "../edge/edge.ts";',
    'export { c } from "../hub/hub.ts";',
    'const d = await import("../cli/summary.ts");',
    'import "../boot/flags.ts";',
  ].join("\n");
  const edges = importsOf("src/request/example.ts", text);
  assert.deepEqual(edges.map((edge) => [edge.to, edge.line]), [
    ["src/pipeline/runner.ts", 1],
    ["src/edge/edge.ts", 2],
    ["src/hub/hub.ts", 3],
    ["src/cli/summary.ts", 4],
    ["src/boot/flags.ts", 5],
  ]);
  for (const edge of edges) assert.ok(forbidden(edge));
  assert.equal(layerOf("src/requests/x.ts"), -1, "a prefix of a folder name is not that folder");
  const sideways = { from: "src/hub/hub.ts", to: "src/edge/edge.ts", line: 1 };
  assert.ok(forbidden(sideways), "the hub may not import the edge");
  assert.ok(!forbidden({ from: "src/edge/edge.ts", to: "src/edge/plan.ts", line: 1 }));
  assert.ok(!forbidden({ from: "src/pipeline/runner.ts", to: "src/server/write.ts", line: 1 }));
});

Deno.test("layers: docs/architecture.md names every module and every layer", async () => {
  const doc = await Deno.readTextFile(join(ROOT, "docs/architecture.md"));
  const unnamed = (await sources()).filter((file) => !doc.includes(`\`${file}\``));
  assert.deepEqual(unnamed, [], "add a line for each to the file table in docs/architecture.md");
  const folders = LAYERS.flat().filter((folder) => !folder.endsWith(".ts"));
  assert.deepEqual(folders.filter((folder) => !doc.includes(`\`${folder}/\``)), []);
});
