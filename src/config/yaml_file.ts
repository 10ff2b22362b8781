/**
 * YAML files with source positions, so a diagnostic can point at the line of a bad field.
 *
 * @module
 */
import { isNode, LineCounter, parseDocument } from "yaml";
import type { ConfigProblem } from "./problems.ts";

/** A parsed YAML file: its plain value and a way to find where a field path sits. */
export interface YamlFile {
  readonly file: string;
  readonly value: unknown;
  /** `line:column` of the deepest node on `path` that exists, or undefined. */
  locate(path: readonly (string | number)[]): string | undefined;
}

/**
 * Parses YAML text; syntax errors come back as problems naming file, line and column.
 *
 * @param file the file name used in diagnostics
 * @param text the file's contents
 * @returns the parsed file, or the syntax problems found
 */
export function parseYaml(file: string, text: string): YamlFile | ConfigProblem[] {
  const lines = new LineCounter();
  const doc = parseDocument(text, { lineCounter: lines, prettyErrors: false, uniqueKeys: true });
  if (doc.errors.length > 0) {
    return doc.errors.map((error) => {
      const pos = lines.linePos(error.pos[0]);
      return {
        file,
        path: [],
        message: `Invalid YAML: ${firstLine(error.message)}`,
        at: `${pos.line}:${pos.col}`,
      };
    });
  }
  return {
    file,
    value: doc.toJS({ maxAliasCount: 50 }),
    locate(path) {
      for (let depth = path.length; depth >= 0; depth--) {
        const node = doc.getIn(path.slice(0, depth), true);
        if (isNode(node) && node.range) {
          const pos = lines.linePos(node.range[0]);
          return `${pos.line}:${pos.col}`;
        }
      }
      return undefined;
    },
  };
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
