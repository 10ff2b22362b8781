/**
 * Remote mode's generation cache: the last good generation received from the hub, kept on disk so
 * an edge restarted while the hub is away still serves. Each generation is a folder
 * (`gen-<number>`); `current.json` names the live one and is replaced by rename, so a crash leaves
 * either the old or the new pointer, never a torn one. The previous generation's folder is kept
 * (requests may still read its body files); older ones are removed.
 *
 * @module
 */
import { join } from "node:path";
import { type FileSet, writeFileSet } from "./file_set.ts";

/** What `current.json` records. */
export interface CachedGeneration {
  readonly generation: number;
  readonly hash: string;
  /** The generation's folder, inside the cache folder. */
  readonly folder: string;
}

const POINTER = "current.json";

/**
 * Reads the cache's live generation, if there is a usable one.
 *
 * @returns the pointer with `folder` resolved, or undefined (no cache yet, or a damaged pointer)
 */
export async function readCache(cacheDir: string): Promise<CachedGeneration | undefined> {
  let text: string;
  try {
    text = await Deno.readTextFile(join(cacheDir, POINTER));
  } catch {
    return undefined;
  }
  try {
    const value = JSON.parse(text);
    const ok = Number.isSafeInteger(value.generation) && typeof value.hash === "string" &&
      typeof value.folder === "string" && /^gen-\d+$/.test(value.folder);
    if (!ok) return undefined;
    return { generation: value.generation, hash: value.hash, folder: join(cacheDir, value.folder) };
  } catch {
    return undefined;
  }
}

/**
 * Writes a generation into the cache and makes it the live one.
 *
 * @returns the generation's folder
 */
export async function writeCache(
  cacheDir: string,
  generation: number,
  hash: string,
  files: FileSet,
): Promise<string> {
  await Deno.mkdir(cacheDir, { recursive: true });
  const name = `gen-${generation}`;
  const folder = join(cacheDir, name);
  const staging = join(cacheDir, `.staging-${name}-${crypto.randomUUID()}`);
  await writeFileSet(staging, files);
  await Deno.remove(folder, { recursive: true }).catch(() => {});
  await Deno.rename(staging, folder);
  const pointer = join(cacheDir, `.${POINTER}.${crypto.randomUUID()}`);
  await Deno.writeTextFile(pointer, JSON.stringify({ generation, hash, folder: name }) + "\n");
  await Deno.rename(pointer, join(cacheDir, POINTER));
  await prune(cacheDir, generation);
  return folder;
}

/** Removes generation folders older than the one before `live`, and stale staging folders. */
async function prune(cacheDir: string, live: number): Promise<void> {
  const keep = new Set([`gen-${live}`]);
  const numbers: number[] = [];
  for await (const entry of Deno.readDir(cacheDir)) {
    const match = /^gen-(\d+)$/.exec(entry.name);
    if (match && Number(match[1]) < live) numbers.push(Number(match[1]));
  }
  if (numbers.length > 0) keep.add(`gen-${Math.max(...numbers)}`);
  for await (const entry of Deno.readDir(cacheDir)) {
    const stale = (/^gen-\d+$/.test(entry.name) && !keep.has(entry.name)) ||
      entry.name.startsWith(".staging-");
    if (stale) await Deno.remove(join(cacheDir, entry.name), { recursive: true }).catch(() => {});
  }
}
