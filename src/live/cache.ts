/**
 * Remote mode's generation cache: the last good generation received from the hub, kept on disk so
 * an edge restarted while the hub is away still serves. Each received set is written to a folder
 * of its own (`gen-<n>`) before it is validated; `current.json` names the live one and is replaced
 * by rename only once the set is live, so a crash leaves either the old or the new pointer, never a
 * torn one, and a set the edge rejected is never the cache's. The previous generation's folder is
 * kept (requests may still read its body files); older ones, and rejected sets, are removed.
 *
 * Nothing on disk is taken on its word. Each folder carries a manifest (`.manifest.json`: its
 * generation, the set hash the hub sent, and every file's SHA-256 and size), written into the
 * staging folder before that is renamed into place; `current.json` names a generation, its hash and
 * its folder. {@link verifyCache} checks the pointer against the manifest and every file on disk
 * against the manifest, and refuses the whole cache on any difference — a file changed, missing,
 * extra, unreadable or not a regular file, a damaged pointer, a folder whose manifest disagrees —
 * with a reason that names the file and the expected and found hash prefixes, never contents. Fault
 * injection (issue 13) found an edge serving a rewritten tenant file under the hash the hub had
 * sent, and staying on it after the hub came back, because only the pointer was read.
 *
 * Every read is rooted in the cache folder (rooted_read.ts): a pointer, manifest or file that is,
 * or links to, something outside it — a generation folder swapped for a symlink included — is
 * refused like a changed one, by name.
 *
 * A follower writes a received set in two steps around the store's offer: {@link stageGeneration}
 * does every write that needs space (the folder, its manifest, the new pointer under a temporary
 * name), and {@link commitStaged} only renames. So a full or read-only disk refuses the set before
 * it goes live, never after (issue 32): what the edge serves is always what a restart would read.
 *
 * The manifest — its format, writing it, and reading a folder back against it — is in
 * `cache_manifest.ts`; what a failed write says and leaves is in `cache_faults.ts`; this module
 * keeps the pointer and the generations' lifecycle.
 *
 * @module
 */
import { basename, join } from "node:path";
import { type FileSet, hashFileSet, writeFileSet } from "../config/file_set.ts";
import { readRootedText, RootedReadError } from "../config/rooted_read.ts";
import {
  HASH,
  MAX_INDEX_BYTES,
  readAgainst,
  readManifest,
  short,
  whyNot,
  writeManifest,
} from "./cache_manifest.ts";
import { CacheWriteError } from "./cache_faults.ts";

/** What `current.json` records. */
export interface CachedGeneration {
  readonly generation: number;
  readonly hash: string;
  /** The generation's folder, inside the cache folder. */
  readonly folder: string;
}

/** What {@link verifyCache} found: no cache, a cache whose every byte checked out, or a refusal. */
export type CacheCheck =
  | { readonly state: "none" }
  | CachedGeneration & { readonly state: "verified"; readonly files: FileSet }
  | { readonly state: "refused"; readonly reason: string };

const POINTER = "current.json";
/** Differences named in a reason; the rest are counted. */
const NAMED = 5;

/**
 * Reads and verifies the cache's live generation: the pointer, its folder's manifest, and every
 * file in the folder (each against its SHA-256, then the set against the hub's hash).
 *
 * @param expect the hash the edge believes the cache holds (a running edge's live set); a cache
 *   that holds another set, or none, is then refused too
 * @returns the verified generation with its files, `none` when there is no pointer, or why the
 *   cache was refused
 *
 * @example
 * ```ts
 * import { commitCache, stageCache, verifyCache } from "./cache.ts";
 * import { hashFileSet } from "../config/file_set.ts";
 * const dir = await Deno.makeTempDir();
 * const files = new Map([["a.test.yaml", new TextEncoder().encode("host: a.test\n")]]);
 * await commitCache(dir, await stageCache(dir, files), await hashFileSet(files));
 * (await verifyCache(dir)).state; // "verified"
 * await Deno.writeTextFile(`${dir}/gen-1/a.test.yaml`, "host: b.test\n");
 * (await verifyCache(dir)).state; // "refused"
 * await Deno.remove(dir, { recursive: true });
 * ```
 */
export async function verifyCache(cacheDir: string, expect?: string): Promise<CacheCheck> {
  const checked = await verifyPointed(cacheDir);
  if (!expect || checked.state === "refused") return checked;
  if (checked.state === "none") {
    return refused(`${POINTER} is missing, but the edge serves set ${short(expect)}`);
  }
  if (checked.hash === expect) return checked;
  return refused(
    `${POINTER} names set ${short(checked.hash)}, but the edge serves set ${short(expect)}`,
  );
}

/**
 * The cache's live generation when it verifies (see {@link verifyCache}).
 *
 * @returns the pointer with `folder` resolved, or undefined (no cache, or a refused one)
 */
export async function readCache(cacheDir: string): Promise<CachedGeneration | undefined> {
  const checked = await verifyCache(cacheDir);
  if (checked.state !== "verified") return undefined;
  return { generation: checked.generation, hash: checked.hash, folder: checked.folder };
}

async function verifyPointed(cacheDir: string): Promise<CacheCheck> {
  let text: string;
  try {
    text = await readRootedText(cacheDir, POINTER, { maxBytes: MAX_INDEX_BYTES });
  } catch (error) {
    if (error instanceof RootedReadError && error.reason === "missing") return { state: "none" };
    return refused(`${POINTER} ${whyNot(error)}`);
  }
  const pointer = parsePointer(text);
  if (typeof pointer === "string") return refused(`${POINTER} is damaged (${pointer})`);
  const name = `gen-${pointer.generation}`;
  const folder = join(cacheDir, name);
  const manifest = await readManifest(cacheDir, name);
  if (typeof manifest === "string") return refused(`${name}: ${manifest}`);
  if (manifest.generation !== pointer.generation || manifest.hash !== pointer.hash) {
    return refused(
      `${POINTER} names generation ${pointer.generation}, set ${short(pointer.hash)}; ` +
        `the manifest of ${name} is generation ${manifest.generation}, set ${short(manifest.hash)}`,
    );
  }
  const { files, differences } = await readAgainst(cacheDir, name, manifest);
  if (differences.length > 0) {
    const more = differences.length > NAMED ? `; and ${differences.length - NAMED} more` : "";
    return refused(`${differences.slice(0, NAMED).join("; ")}${more}`);
  }
  const hash = await hashFileSet(files);
  if (hash !== pointer.hash) {
    return refused(`the files of ${name} hash to ${short(hash)}, not ${short(pointer.hash)}`);
  }
  return { state: "verified", generation: pointer.generation, hash, folder, files };
}

/**
 * Writes a file set into a new generation folder of the cache (`gen-<n>`, one past the highest
 * there), with its manifest. The folder is not live until {@link commitCache} points at it. A
 * write that fails removes its staging folder.
 *
 * @returns the folder
 * @throws {CacheWriteError} when the folder cannot be written (a full or read-only disk)
 */
export async function stageCache(cacheDir: string, files: FileSet): Promise<string> {
  let staging: string | undefined;
  try {
    await Deno.mkdir(cacheDir, { recursive: true });
    const numbers = await generationFolders(cacheDir);
    const generation = Math.max(0, ...numbers) + 1;
    const name = `gen-${generation}`;
    staging = join(cacheDir, `.staging-${name}-${crypto.randomUUID()}`);
    await writeFileSet(staging, files);
    await writeManifest(staging, generation, files);
    const folder = join(cacheDir, name);
    await Deno.rename(staging, folder);
    return folder;
  } catch (error) {
    if (staging) await removeQuietly(staging);
    throw new CacheWriteError(cacheDir, "stage a generation", error);
  }
}

/** A generation written and its pointer ready: only a rename is left to make it the cache's. */
export interface StagedGeneration {
  readonly folder: string;
  /** The new `current.json`, under a temporary name beside it. */
  readonly pointer: string;
  readonly generation: number;
}

/**
 * Stages a set and writes the pointer that will name it, so every write that needs space is done
 * before the set is offered: once the store has taken it, making it the cache's is one rename
 * ({@link commitStaged}), which needs none. Discard it with {@link discardStaged} when the store
 * refuses the set.
 *
 * @param hash the set's hash, which the pointer records
 * @throws {CacheWriteError} when the folder or the pointer cannot be written (both are removed)
 */
export async function stageGeneration(
  cacheDir: string,
  files: FileSet,
  hash: string,
): Promise<StagedGeneration> {
  const folder = await stageCache(cacheDir, files);
  try {
    return { folder, ...await writePointer(cacheDir, folder, hash) };
  } catch (error) {
    await removeQuietly(folder);
    throw error;
  }
}

/**
 * Makes a staged generation the cache's (the pointer is renamed over `current.json`), then removes
 * every generation folder but this one and the one before it.
 *
 * @throws {CacheWriteError} when the rename fails (the disk went read-only meanwhile)
 */
export async function commitStaged(cacheDir: string, staged: StagedGeneration): Promise<void> {
  try {
    await Deno.rename(staged.pointer, join(cacheDir, POINTER));
  } catch (error) {
    await removeQuietly(staged.pointer);
    throw new CacheWriteError(cacheDir, `replace ${POINTER}`, error);
  }
  await prune(cacheDir, staged.generation);
}

/** Removes a staged generation the store refused: its folder and its pointer. */
export async function discardStaged(staged: StagedGeneration): Promise<void> {
  await removeQuietly(staged.pointer);
  await removeQuietly(staged.folder);
}

/**
 * Makes a staged folder the cache's live generation (the pointer is replaced by rename), then
 * removes every generation folder but this one and the one before it.
 *
 * @param hash the set {@link stageCache} wrote there (its manifest's); the pointer records it
 * @throws {RangeError} when `folder` is not a generation folder
 * @throws {CacheWriteError} when the pointer cannot be written or renamed
 */
export async function commitCache(cacheDir: string, folder: string, hash: string): Promise<void> {
  await commitStaged(cacheDir, { folder, ...await writePointer(cacheDir, folder, hash) });
}

/** Writes the pointer that names `folder` under a temporary name; removed again on failure. */
async function writePointer(
  cacheDir: string,
  folder: string,
  hash: string,
): Promise<{ pointer: string; generation: number }> {
  const name = basename(folder);
  const generation = Number(/^gen-(\d+)$/.exec(name)?.[1]);
  if (!Number.isSafeInteger(generation)) throw new RangeError(`Not a cache folder: "${folder}"`);
  const pointer = join(cacheDir, `.${POINTER}.${crypto.randomUUID()}`);
  try {
    await Deno.writeTextFile(pointer, JSON.stringify({ generation, hash, folder: name }) + "\n");
  } catch (error) {
    await removeQuietly(pointer);
    throw new CacheWriteError(cacheDir, `write ${POINTER}`, error);
  }
  return { pointer, generation };
}

function removeQuietly(path: string): Promise<void> {
  return Deno.remove(path, { recursive: true }).catch(() => {});
}

/** The pointer, or what is wrong with it (never its text). */
function parsePointer(text: string): CachedGeneration | string {
  let value;
  try {
    value = JSON.parse(text);
  } catch {
    return `not JSON, ${text.length} bytes`;
  }
  if (!Number.isSafeInteger(value?.generation) || value.generation < 1) return "no generation";
  if (typeof value.hash !== "string" || !HASH.test(value.hash)) return "no set hash";
  if (value.folder !== `gen-${value.generation}`) {
    return `its folder is not gen-${value.generation}, the folder of its generation`;
  }
  return { generation: value.generation, hash: value.hash, folder: value.folder };
}

function refused(reason: string): CacheCheck {
  return { state: "refused", reason };
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
