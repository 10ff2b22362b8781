/**
 * A cache generation folder's manifest (`.manifest.json`): what it records — the generation, the
 * set hash the hub sent, every file's SHA-256 and size — how it is written beside the files, and
 * how a folder is read back against it, every difference named by path with hash prefixes, never
 * contents.
 *
 * Apart from the cache's lifecycle (stage, commit, prune, the pointer) in `cache.ts`, so the walk
 * over a folder's files — most of the code, and the reads of the least trusted bytes — can be read
 * on its own: every read is rooted in the cache folder (rooted_read.ts), bounded by
 * {@link FILE_SET_LIMITS}, and reported in name order so a refusal reads the same every time.
 *
 * @module
 */
import { join } from "node:path";
import {
  FILE_SET_LIMITS,
  type FileSet,
  hashFileSet,
  isSafeRelativePath,
} from "../config/file_set.ts";
import { readRooted, readRootedText, RootedReadError } from "../config/rooted_read.ts";
import { describeIoError } from "../config/yaml_file.ts";

/** `.manifest.json` of a generation folder. */
export interface Manifest {
  readonly generation: number;
  readonly hash: string;
  readonly files: Readonly<Record<string, { readonly sha256: string; readonly bytes: number }>>;
}

/** The manifest's name inside a generation folder. */
export const MANIFEST = ".manifest.json";
/** A SHA-256 in lower-case hex. */
export const HASH = /^[0-9a-f]{64}$/;
/** The largest pointer or manifest read, in bytes. */
export const MAX_INDEX_BYTES = 16 * 1024 * 1024;

/**
 * Writes the manifest of `files`, as generation `generation`, into `folder` (not yet live).
 *
 * @param folder the staging folder the files were written to
 * @param generation the generation the folder will be
 * @param files the set written there
 */
export async function writeManifest(
  folder: string,
  generation: number,
  files: FileSet,
): Promise<void> {
  const manifest: Manifest = { generation, hash: await hashFileSet(files), files: {} };
  for (const [path, data] of files) {
    Object.assign(manifest.files, { [path]: { sha256: await sha256(data), bytes: data.length } });
  }
  await Deno.writeTextFile(join(folder, MANIFEST), JSON.stringify(manifest) + "\n");
}

/** The manifest of generation folder `name` inside the cache, or what is wrong with it. */
export async function readManifest(cacheDir: string, name: string): Promise<Manifest | string> {
  let text: string;
  try {
    text = await readRootedText(cacheDir, `${name}/${MANIFEST}`, { maxBytes: MAX_INDEX_BYTES });
  } catch (error) {
    if (!(error instanceof RootedReadError && error.reason === "missing")) {
      return `${MANIFEST} ${whyNot(error)}`;
    }
    const exists = await Deno.stat(join(cacheDir, name)).then(() => true, () => false);
    return exists ? `no ${MANIFEST}` : "the folder is missing";
  }
  try {
    const value = JSON.parse(text);
    const entries = Object.entries(value.files ?? {}) as [string, Record<string, unknown>][];
    const ok = Number.isSafeInteger(value.generation) && HASH.test(value.hash) &&
      typeof value.files === "object" && !Array.isArray(value.files) &&
      entries.every(([path, entry]) =>
        isSafeRelativePath(path) && typeof entry?.sha256 === "string" && HASH.test(entry.sha256) &&
        Number.isSafeInteger(entry.bytes)
      );
    if (ok) return value as Manifest;
  } catch { /* reported below */ }
  return `${MANIFEST} is damaged`;
}

/**
 * Reads every entry below generation folder `name` of the cache (rooted in the cache folder) and
 * compares it with the manifest.
 *
 * @returns the files read, and one line per difference (`gen-<n>/<path>: …`)
 */
export async function readAgainst(
  cacheDir: string,
  name: string,
  manifest: Manifest,
): Promise<{ files: Map<string, Uint8Array>; differences: string[] }> {
  const walk: FolderWalk = {
    cacheDir,
    name,
    folder: join(cacheDir, name),
    manifest,
    files: new Map(),
    differences: [],
    reported: new Set(),
    budget: FILE_SET_LIMITS.maxBytes,
    entries: 0,
  };
  try {
    await walkFolder(walk, "");
  } catch (error) {
    walk.differences.push(`${name}: cannot be read (${describeIoError(error)})`);
    return { files: walk.files, differences: walk.differences };
  }
  reportMissing(walk);
  return { files: walk.files, differences: walk.differences };
}

/** One generation folder being checked: what was read, what differed, and what is left to read. */
interface FolderWalk {
  readonly cacheDir: string;
  /** `gen-<n>`, the prefix of every difference. */
  readonly name: string;
  readonly folder: string;
  readonly manifest: Manifest;
  readonly files: Map<string, Uint8Array>;
  readonly differences: string[];
  /** Paths already named in a difference, so they are not reported missing as well. */
  readonly reported: Set<string>;
  /** Bytes the files not yet read may still hold, of {@link FILE_SET_LIMITS}' total. */
  budget: number;
  /** Entries seen so far, against {@link FILE_SET_LIMITS}' count. */
  entries: number;
}

/** Records one difference as `gen-<n>/<path>: <what>`. */
function differ(walk: FolderWalk, path: string, what: string): void {
  walk.reported.add(path);
  // A name on disk may hold anything, a line break included: quote it unless it is plain.
  const shown = /^[\w./-]+$/.test(path) ? path : JSON.stringify(path);
  walk.differences.push(`${walk.name}/${shown}: ${what}`);
}

/** Visits one folder's entries in name order, descending into folders; the manifest is skipped. */
async function walkFolder(walk: FolderWalk, relative: string): Promise<void> {
  for (const entry of await sortedListing(join(walk.folder, relative))) {
    const path = relative ? `${relative}/${entry.name}` : entry.name;
    if (path === MANIFEST) continue;
    if (++walk.entries > FILE_SET_LIMITS.maxFiles) throw new RangeError("Too many entries");
    if (entry.isDirectory) await walkFolder(walk, path);
    else if (!entry.isFile) differ(walk, path, "not a regular file");
    else await checkFile(walk, path);
  }
}

/** A folder's entries sorted by name, so differences are reported in the same order every time. */
async function sortedListing(dir: string): Promise<Deno.DirEntry[]> {
  const listing: Deno.DirEntry[] = [];
  for await (const entry of Deno.readDir(dir)) listing.push(entry);
  listing.sort((a, b) => a.name < b.name ? -1 : a.name > b.name ? 1 : 0);
  return listing;
}

/** Reads one file within the byte budget and compares its SHA-256 with the manifest's entry. */
async function checkFile(walk: FolderWalk, path: string): Promise<void> {
  const { manifest } = walk;
  const expected = Object.hasOwn(manifest.files, path) ? manifest.files[path] : undefined;
  const data = await readWithinBudget(walk, path);
  if (data === undefined) return;
  walk.budget -= data.length;
  const found = await sha256(data);
  walk.files.set(path, data);
  if (expected?.sha256 === found) return;
  const seen = `found sha256 ${short(found)} (${data.length} bytes)`;
  differ(
    walk,
    path,
    expected
      ? `expected sha256 ${short(expected.sha256)} (${expected.bytes} bytes), ${seen}`
      : `not in the manifest, ${seen}`,
  );
}

/** One file's bytes (rooted in the cache, within the budget), or undefined once reported. */
async function readWithinBudget(walk: FolderWalk, path: string): Promise<Uint8Array | undefined> {
  try {
    return await readRooted(walk.cacheDir, `${walk.name}/${path}`, { maxBytes: walk.budget });
  } catch (error) {
    const tooLarge = error instanceof RootedReadError && error.reason === "too_large";
    differ(
      walk,
      path,
      tooLarge ? `${error.size} bytes, more than the cache may hold` : whyNot(error),
    );
    return undefined;
  }
}

/** Names every manifest entry that was neither read nor already reported: it is missing. */
function reportMissing(walk: FolderWalk): void {
  for (const [path, expected] of Object.entries(walk.manifest.files)) {
    if (!walk.files.has(path) && !walk.reported.has(path)) {
      differ(walk, path, `expected sha256 ${short(expected.sha256)}, missing`);
    }
  }
}

/** Why a rooted read failed, after the file's name: `cannot be read (…)`, `resolves outside …`. */
export function whyNot(error: unknown): string {
  if (error instanceof RootedReadError && error.reason !== "unreadable") return error.detail;
  const cause = error instanceof RootedReadError ? error.cause : error;
  return `cannot be read (${describeIoError(cause)})`;
}

/** A hash prefix long enough to tell sets apart in a log line. */
export function short(hash: string): string {
  return hash.slice(0, 12);
}

async function sha256(data: Uint8Array): Promise<string> {
  // A file set's bytes are never shared memory, which is all `BufferSource` rules out.
  const digest = await crypto.subtle.digest("SHA-256", data as Uint8Array<ArrayBuffer>);
  return [...new Uint8Array(digest)].map((b) => b.toString(16).padStart(2, "0")).join("");
}
