/**
 * YAML files with source positions, so a diagnostic can point at the line of a bad field.
 *
 * Every way a file can fail to be YAML the gateway will use comes back as located problems, never
 * as an exception: issue 14 found that an alias bomb (billion laughs) threw a `ReferenceError` from
 * `yaml`'s `toJS` through `check`, boot and every reload. What is refused, and why:
 *
 * - characters YAML 1.2 does not allow unescaped (C0 and C1 controls but tab, LF, CR and NEL; DEL;
 *   U+FFFE/U+FFFF; unpaired surrogates), a byte order mark after the start, and U+FFFD — what a
 *   byte sequence that is not UTF-8 decodes to;
 * - what `yaml` reports while parsing (syntax, more than one document, keys that are not strings,
 *   a stack overflow on very deep flow collections, which it catches itself);
 * - collections nested deeper than {@link MAX_DEPTH}, duplicate keys, an alias before its anchor,
 *   an alias inside its own anchor (a cycle), found in one pass over the document that recurses
 *   nowhere, so no depth overflows it;
 * - more than {@link MAX_ALIAS_COUNT} aliased nodes (`maxAliasCount`), the alias bomb.
 *
 * The schema is YAML 1.2 core whatever a `%YAML 1.1` directive says, and merge keys (`<<`) are off:
 * a `<<` is an ordinary key, which every schema refuses as unknown. Duplicate keys are found here,
 * not by `yaml`'s `uniqueKeys`, which compares each key with every other (20,000 keys: 7 s).
 *
 * @module
 */
import {
  CST,
  type Document,
  isAlias,
  isMap,
  isNode,
  isPair,
  isScalar,
  isSeq,
  Lexer,
  LineCounter,
  type Node,
  parseDocument,
} from "yaml";
import type { ConfigProblem } from "./problems.ts";

/**
 * A parsed YAML file: its plain value and a way to find where a field path sits.
 *
 * @internal
 */
export interface YamlFile {
  readonly file: string;
  readonly value: unknown;
  /** `line:column` of the deepest node on `path` that exists, or undefined. */
  locate(path: readonly (string | number)[]): string | undefined;
}

/** How many nodes aliases may stand for in one file (`yaml`'s `maxAliasCount`). */
export const MAX_ALIAS_COUNT = 50;

/** How deep collections may nest; no Portcullis file needs a tenth of it. */
export const MAX_DEPTH = 64;

const PARSE_OPTIONS = {
  prettyErrors: false,
  schema: "core",
  merge: false,
  stringKeys: true,
  uniqueKeys: false,
  logLevel: "error",
} as const;

/**
 * Characters a file may not hold: controls YAML 1.2 does not allow unescaped, non-characters,
 * unpaired surrogates, a byte order mark after the start, and U+FFFD (bytes that were not UTF-8).
 */
const UNUSABLE =
  // deno-lint-ignore no-control-regex -- finding control characters is the point
  /[\x00-\x08\x0B\x0C\x0E-\x1F\x7F-\x84\x86-\x9F\uFFFD\uFFFE\uFFFF]|[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]|(?<=[^])\uFEFF/;

/**
 * Parses YAML text; every way it can fail comes back as problems naming file, line and column.
 *
 * @param file the file name used in diagnostics
 * @param text the file's contents
 * @returns the parsed file, or the problems found
 * @example
 * ```ts
 * import { parseYaml } from "./yaml_file.ts";
 * const bomb = "a: &a [x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a]\n" +
 *   "c: [*b, *b, *b, *b, *b, *b, *b, *b]\n";
 * const problems = parseYaml("bomb.yaml", bomb);
 * Array.isArray(problems) && problems[0].at; // "2:8"
 * ```
 */
export function parseYaml(file: string, text: string): YamlFile | ConfigProblem[] {
  const bad = UNUSABLE.exec(text);
  if (bad) {
    return [{
      file,
      path: [],
      message: describeCharacter(bad[0]),
      at: positionIn(text, bad.index),
    }];
  }
  const deep = tooDeep(text);
  if (deep !== undefined) {
    const message = `Invalid YAML: nested more than ${MAX_DEPTH} levels deep`;
    return [{ file, path: [], message, at: positionIn(text, deep) }];
  }
  const lines = new LineCounter();
  const at = (offset: number) => {
    const pos = lines.linePos(offset);
    return `${pos.line}:${pos.col}`;
  };
  let doc: Document.Parsed;
  try {
    doc = parseDocument(text, { ...PARSE_OPTIONS, lineCounter: lines });
  } catch (error) {
    return [{ file, path: [], message: `Invalid YAML: ${describeThrown(error)}`, at: "1:1" }];
  }
  if (doc.errors.length > 0) {
    return doc.errors.map((error) => ({
      file,
      path: [],
      message: `Invalid YAML: ${REWORDED[error.code] ?? describeThrown(error)}`,
      at: at(error.pos[0]),
    }));
  }
  const shape = inspect(doc);
  if (shape.problems.length > 0) {
    return shape.problems.map(({ offset, message }) => ({
      file,
      path: [],
      message,
      at: at(offset),
    }));
  }
  let value: unknown;
  try {
    value = doc.toJS({ maxAliasCount: MAX_ALIAS_COUNT });
  } catch (error) {
    const bomb = /excessive alias count/i.test(String((error as Error)?.message));
    const message = bomb
      ? `Invalid YAML: aliases stand for more than ${MAX_ALIAS_COUNT} nodes (an alias bomb?)`
      : `Invalid YAML: ${describeThrown(error)}`;
    return [{ file, path: [], message, at: at(bomb ? shape.firstAlias : 0) }];
  }
  return {
    file,
    value,
    locate(path) {
      for (let depth = path.length; depth >= 0; depth--) {
        const offset = shape.offsets.get(JSON.stringify(path.slice(0, depth)));
        if (offset !== undefined) return at(offset);
      }
      return undefined;
    },
  };
}

/** `yaml`'s messages that name its own options or API, said for the operator instead. */
const REWORDED: Partial<Record<string, string>> = {
  NON_STRING_KEY: "a key must be text, not a list, a mapping or an alias",
  MULTIPLE_DOCS: "a file holds one document (this one has another after `---`)",
};

/**
 * Where a file nests deeper than {@link MAX_DEPTH} — in flow collections, or block indicators on
 * one line (`- - - …`) — found from lexer tokens alone, before `yaml`'s parser runs: it takes ~2 s
 * on `[` × 100,000 and ~10 s on `- &a ` × 20,000 before it reports anything (two busy cores).
 * Files that cannot nest that deep by their characters alone are not lexed twice.
 *
 * @returns the offset where the limit is passed, or undefined
 */
function tooDeep(text: string): number | undefined {
  if (!mayNestDeep(text)) return undefined;
  let offset = 0;
  let flow = 0;
  let onLine = 0;
  for (const token of new Lexer().lex(text)) {
    if (token === "[" || token === "{") flow++;
    else if (token === "]" || token === "}") flow = Math.max(0, flow - 1);
    else if (token === "-" || token === "?") onLine++;
    else if (token === "\n" || token === "\r\n") onLine = 0;
    if (flow > MAX_DEPTH || onLine > MAX_DEPTH) return offset;
    if (token !== CST.DOCUMENT && token !== CST.FLOW_END && token !== CST.SCALAR) {
      offset += token.length;
    }
  }
  return undefined;
}

/** True when a file has more than {@link MAX_DEPTH} `[`/`{` in all, or `-`/`?` on one line. */
function mayNestDeep(text: string): boolean {
  let openers = 0;
  let marks = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x5b || c === 0x7b) openers++;
    else if (c === 0x2d || c === 0x3f) marks++;
    else if (c === 0x0a) marks = 0;
    if (openers > MAX_DEPTH || marks > MAX_DEPTH) return true;
  }
  return false;
}

/** What one pass over a parsed document found. */
interface Shape {
  readonly problems: { offset: number; message: string }[];
  /** Where each node starts, by its field path as JSON (`["routes",0]`); aliases not followed. */
  readonly offsets: Map<string, number>;
  /** Where the first alias starts (0 when there is none). */
  readonly firstAlias: number;
}

interface Visit {
  readonly node: Node;
  readonly path: readonly (string | number)[];
  readonly depth: number;
  readonly parent?: Visit;
}

/**
 * Walks the document in source order with an explicit stack (so no nesting overflows it): records
 * every node's position, and finds nesting past {@link MAX_DEPTH}, duplicate keys, aliases before
 * their anchor and aliases inside their own anchor.
 */
function inspect(doc: Document.Parsed): Shape {
  const problems: Shape["problems"] = [];
  const offsets = new Map<string, number>();
  const anchors = new Set<string>();
  let firstAlias = -1;
  const stack: Visit[] = doc.contents ? [{ node: doc.contents, path: [], depth: 0 }] : [];
  while (stack.length > 0 && problems.length < 20) {
    const visit = stack.pop()!;
    const { node, path, depth } = visit;
    const offset = node.range?.[0] ?? 0;
    offsets.set(JSON.stringify(path), offset);
    if (isAlias(node)) {
      if (firstAlias < 0) firstAlias = offset;
      if (!anchors.has(node.source)) {
        problems.push({
          offset,
          message: `Invalid YAML: alias *${node.source} comes before its anchor`,
        });
      } else if (insideOwnAnchor(visit, node.source)) {
        problems.push({
          offset,
          message: `Invalid YAML: alias *${node.source} is inside its own anchor (a cycle)`,
        });
      }
      continue;
    }
    if (node.anchor) anchors.add(node.anchor);
    if (!isMap(node) && !isSeq(node)) continue;
    if (depth >= MAX_DEPTH) {
      problems.push({ offset, message: `Invalid YAML: nested more than ${MAX_DEPTH} levels deep` });
      continue;
    }
    const children: Visit[] = [];
    const keys = new Set<string>();
    for (const [index, item] of node.items.entries()) {
      if (isSeq(node) && isNode(item)) {
        children.push({ node: item, path: [...path, index], depth: depth + 1, parent: visit });
        continue;
      }
      if (!isPair(item)) continue;
      const key = isScalar(item.key) ? String(item.key.value ?? "") : "";
      const keyOffset = isNode(item.key) ? item.key.range?.[0] ?? offset : offset;
      if (keys.has(key)) {
        problems.push({ offset: keyOffset, message: "Invalid YAML: Map keys must be unique" });
      }
      keys.add(key);
      if (isNode(item.value)) {
        children.push({ node: item.value, path: [...path, key], depth: depth + 1, parent: visit });
      }
    }
    for (let i = children.length - 1; i >= 0; i--) stack.push(children[i]);
  }
  return { problems, offsets, firstAlias: Math.max(firstAlias, 0) };
}

function insideOwnAnchor(visit: Visit, anchor: string): boolean {
  for (let up = visit.parent; up; up = up.parent) if (up.node.anchor === anchor) return true;
  return false;
}

function describeCharacter(character: string): string {
  const code = `U+${character.codePointAt(0)!.toString(16).toUpperCase().padStart(4, "0")}`;
  if (character === "\uFFFD") {
    return `Invalid YAML: not UTF-8 (bytes that do not decode, read as ${code})`;
  }
  if (character === "\uFEFF") return `Invalid YAML: a byte order mark (${code}) after the start`;
  return `Invalid YAML: character ${code} is not allowed unescaped (write it as "\\u${
    code.slice(2)
  }" inside double quotes)`;
}

/** `line:column` (1-based) of a character offset. */
function positionIn(text: string, offset: number): string {
  let line = 1;
  let start = 0;
  for (let i = text.indexOf("\n"); i !== -1 && i < offset; i = text.indexOf("\n", i + 1)) {
    line++;
    start = i + 1;
  }
  return `${line}:${offset - start + 1}`;
}

/** One line about anything thrown or reported, never a stack trace. */
function describeThrown(error: unknown): string {
  const message = error instanceof Error ? error.message : String(error);
  if (error instanceof RangeError || /call stack/i.test(message)) {
    return `nested too deeply to parse (${firstLine(message)})`;
  }
  return firstLine(message);
}

/**
 * Reads and parses one YAML file.
 *
 * @param file path to read; also the name used in diagnostics
 * @returns the parsed file, or problems (unreadable file, syntax errors)
 */
export async function readYaml(file: string): Promise<YamlFile | ConfigProblem[]> {
  let text: string;
  try {
    text = await Deno.readTextFile(file);
  } catch (error) {
    return [{ file, path: [], message: `Cannot read file: ${describeIoError(error)}` }];
  }
  return parseYaml(file, text);
}

/** Names an I/O failure without a stack trace. */
export function describeIoError(error: unknown): string {
  if (error instanceof Deno.errors.NotFound) return "no such file or directory";
  if (error instanceof Deno.errors.PermissionDenied) return "permission denied by the OS";
  if (error instanceof Deno.errors.NotCapable) return "not granted by --allow-read";
  return error instanceof Error ? firstLine(error.message) : String(error);
}

function firstLine(message: string): string {
  return message.split("\n")[0].replace(/\.$/, "");
}
