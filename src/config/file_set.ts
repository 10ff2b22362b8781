/**
 * A runtime folder as one value: every regular file below it (YAML and the body files routes
 * serve), by relative POSIX path. The hub reads its folder into a file set, ships it (whole or as
 * the difference to an earlier set), and an edge writes it back into a folder of its own.
 *
 * @module
 */
import { dirname, join, relative, sep } from "node:path";
import type { ConfigProblem } from "./problems.ts";
import { readRooted, RootedReadError } from "./rooted_read.ts";
import { describeIoError } from "./yaml_file.ts";

/**
 * Relative path → contents.
 *
 * @internal
 */
export type FileSet = ReadonlyMap<string, Uint8Array>;

/** Bounds on what a folder may hold, so a stray large file cannot stall a hub or its edges. */
export interface FileSetLimits {
  readonly maxFiles: number;
  readonly maxBytes: number;
}

/** The default bounds: 10,000 files and 64 MiB in all. */
export const FILE_SET_LIMITS: FileSetLimits = { maxFiles: 10_000, maxBytes: 64 * 1024 * 1024 };

/**
 * Reads every regular file below `dir` (hidden files and folders skipped, symlinks not followed),
 * each rooted in `dir` (rooted_read.ts): a file swapped for a link after the listing is refused.
 *
 * @returns the files, and the problems that make the set unusable
 */
export async function readFileSet(
  dir: string,
  limits: FileSetLimits = FILE_SET_LIMITS,
): Promise<{ files: Map<string, Uint8Array>; problems: ConfigProblem[] }> {
  const files = new Map<string, Uint8Array>();
  const problems: ConfigProblem[] = [];
  let bytes = 0;
  const walk = async (folder: string): Promise<void> => {
    const entries: Deno.DirEntry[] = [];
    for await (const entry of Deno.readDir(folder)) entries.push(entry);
    entries.sort((a, b) => a.name < b.name ? -1 : a.name > b.name ? 1 : 0);
    for (const entry of entries) {
      if (entry.name.startsWith(".")) continue;
      const path = join(folder, entry.name);
      if (entry.isDirectory) {
        await walk(path);
        continue;
      }
      if (!entry.isFile) continue;
      const name = relative(dir, path).split(sep).join("/");
      if (files.size + 1 > limits.maxFiles) throw tooMuch(limits);
      const data = await readRooted(dir, name, { maxBytes: limits.maxBytes - bytes })
        .catch((error) => {
          throw error instanceof RootedReadError && error.reason === "too_large"
            ? tooMuch(limits)
            : error;
        });
      bytes += data.byteLength;
      files.set(name, data);
    }
  };
  try {
    await walk(dir);
  } catch (error) {
    const message = error instanceof RangeError || error instanceof RootedReadError
      ? error.message
      : `Cannot read the runtime folder: ${describeIoError(error)}`;
    problems.push({ file: dir, path: [], message });
  }
  return { files, problems };
}

function tooMuch(limits: FileSetLimits): RangeError {
  return new RangeError(
    `The folder holds more than ${limits.maxFiles} files or ${limits.maxBytes} bytes`,
  );
}

/**
 * Hashes a file set: SHA-256 over the paths in order, each with its length and contents.
 *
 * @example
 * ```ts
 * import { hashFileSet } from "./file_set.ts";
 * const hash = await hashFileSet(new Map([["a.yaml", new TextEncoder().encode("x")]]));
 * hash.length; // 64
 * ```
 */
export async function hashFileSet(files: FileSet): Promise<string> {
  const encoder = new TextEncoder();
  const chunks: Uint8Array[] = [];
  for (const name of [...files.keys()].sort()) {
    const data = files.get(name)!;
    chunks.push(encoder.encode(`${name}\0${data.byteLength}\0`), data, encoder.encode("\0"));
  }
  const all = new Uint8Array(chunks.reduce((n, c) => n + c.byteLength, 0));
  let offset = 0;
  for (const chunk of chunks) {
    all.set(chunk, offset);
    offset += chunk.byteLength;
  }
  const digest = await crypto.subtle.digest("SHA-256", all);
  return [...new Uint8Array(digest)].map((b) => b.toString(16).padStart(2, "0")).join("");
}

/** The runtime YAML of a file set: top-level `.yaml`/`.yml` files, decoded as UTF-8. */
export function runtimeTextsOf(files: FileSet): Map<string, string> {
  const decoder = new TextDecoder();
  const texts = new Map<string, string>();
  for (const [name, data] of files) {
    if (!name.includes("/") && /\.ya?ml$/.test(name)) texts.set(name, decoder.decode(data));
  }
  return texts;
}

/**
 * True for a relative path a file set may carry: POSIX segments, none empty, hidden, `.` or `..`.
 *
 * @example
 * ```ts
 * import { isSafeRelativePath } from "./file_set.ts";
 * isSafeRelativePath("pages/home.html"); // true
 * isSafeRelativePath("../etc/passwd"); // false
 * ```
 */
export function isSafeRelativePath(name: string): boolean {
  if (name.length === 0 || name.length > 1024 || name.includes("\\") || name.includes("\0")) {
    return false;
  }
  return name.split("/").every((segment) => segment.length > 0 && !segment.startsWith("."));
}

/** Writes a file set into `dir` (which must not exist yet). */
export async function writeFileSet(dir: string, files: FileSet): Promise<void> {
  await Deno.mkdir(dir, { recursive: true });
  for (const [name, data] of files) {
    if (!isSafeRelativePath(name)) throw new RangeError(`Unsafe path in a file set: ${name}`);
    const target = join(dir, ...name.split("/"));
    await Deno.mkdir(dirname(target), { recursive: true });
    await Deno.writeFile(target, data);
  }
}
