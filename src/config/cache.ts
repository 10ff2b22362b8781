/**
 * Remote mode's generation cache: the last good generation received from the hub, kept on disk so
 * an edge restarted while the hub is away still serves. Each received set is written to a folder
 * of its own (`gen-<n>`) before it is validated; `current.json` names the live one and is replaced
 * by rename only once the set is live, so a crash leaves either the old or the new pointer, never a
 * torn one, and a set the edge rejected is never the cache's. The previous generation's folder is
 * kept (requests may still read its body files); older ones, and rejected sets, are removed.
 *
 * @module
 */
import { basename, join } from "node:path";
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
 * Writes a file set into a new generation folder of the cache (`gen-<n>`, one past the highest
 * there). The folder is not live until {@link commitCache} points at it.
 *
 * @returns the folder
 */
export async function stageCache(cacheDir: string, files: FileSet): Promise<string> {
  await Deno.mkdir(cacheDir, { recursive: true });
  const numbers = await generationFolders(cacheDir);
  const name = `gen-${Math.max(0, ...numbers) + 1}`;
  const staging = join(cacheDir, `.staging-${name}-${crypto.randomUUID()}`);
  await writeFileSet(staging, files);
  const folder = join(cacheDir, name);
  await Deno.rename(staging, folder);
  return folder;
}

/**
 * Makes a staged folder the cache's live generation (the pointer is replaced by rename), then
 * removes every generation folder but this one and the one before it.
 */
export async function commitCache(cacheDir: string, folder: string, hash: string): Promise<void> {
  const name = basename(folder);
  const generation = Number(/^gen-(\d+)$/.exec(name)?.[1]);
  if (!Number.isSafeInteger(generation)) throw new RangeError(`Not a cache folder: ${folder}`);
  const pointer = join(cacheDir, `.${POINTER}.${crypto.randomUUID()}`);
  await Deno.writeTextFile(pointer, JSON.stringify({ generation, hash, folder: name }) + "\n");
  await Deno.rename(pointer, join(cacheDir, POINTER));
  await prune(cacheDir, generation);
}

async function generationFolders(cacheDir: string): Promise<number[]> {
  const numbers: number[] = [];
  for await (const entry of Deno.readDir(cacheDir)) {
    const match = /^gen-(\d+)$/.exec(entry.name);
    if (match) numbers.push(Number(match[1]));
  }
  return numbers;
}

/** Removes generation folders other than `live` and the newest one before it, and stale staging. */
async function prune(cacheDir: string, live: number): Promise<void> {
  const older = (await generationFolders(cacheDir)).filter((n) => n < live);
  const keep = new Set([`gen-${live}`]);
  if (older.length > 0) keep.add(`gen-${Math.max(...older)}`);
  for await (const entry of Deno.readDir(cacheDir)) {
    const stale = (/^gen-\d+$/.test(entry.name) && !keep.has(entry.name)) ||
      entry.name.startsWith(".staging-");
    if (stale) await Deno.remove(join(cacheDir, entry.name), { recursive: true }).catch(() => {});
  }
}
