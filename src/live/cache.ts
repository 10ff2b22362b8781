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
 * @module
 */
import { basename, join } from "node:path";
import {
  FILE_SET_LIMITS,
  type FileSet,
  hashFileSet,
  isSafeRelativePath,
  writeFileSet,
} from "../config/file_set.ts";
import { readRooted, readRootedText, RootedReadError } from "../config/rooted_read.ts";
import { describeIoError } from "../config/yaml_file.ts";

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

/** `.manifest.json` of a generation folder. */
interface Manifest {
  readonly generation: number;
  readonly hash: string;
  readonly files: Readonly<Record<string, { readonly sha256: string; readonly bytes: number }>>;
}

const POINTER = "current.json";
const MANIFEST = ".manifest.json";
const HASH = /^[0-9a-f]{64}$/;
/** Differences named in a reason; the rest are counted. */
const NAMED = 5;
/** The largest pointer or manifest read, in bytes. */
const MAX_INDEX_BYTES = 16 * 1024 * 1024;

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
 * there), with its manifest. The folder is not live until {@link commitCache} points at it.
 *
 * @returns the folder
 */
export async function stageCache(cacheDir: string, files: FileSet): Promise<string> {
  await Deno.mkdir(cacheDir, { recursive: true });
  const numbers = await generationFolders(cacheDir);
  const generation = Math.max(0, ...numbers) + 1;
  const name = `gen-${generation}`;
  const staging = join(cacheDir, `.staging-${name}-${crypto.randomUUID()}`);
  await writeFileSet(staging, files);
  const manifest: Manifest = { generation, hash: await hashFileSet(files), files: {} };
  for (const [path, data] of files) {
    Object.assign(manifest.files, { [path]: { sha256: await sha256(data), bytes: data.length } });
  }
  await Deno.writeTextFile(join(staging, MANIFEST), JSON.stringify(manifest) + "\n");
  const folder = join(cacheDir, name);
  await Deno.rename(staging, folder);
  return folder;
}

/**
 * Makes a staged folder the cache's live generation (the pointer is replaced by rename), then
 * removes every generation folder but this one and the one before it.
 *
 * @param hash the set {@link stageCache} wrote there (its manifest's); the pointer records it
 * @throws {RangeError} when `folder` is not a generation folder
 */
export async function commitCache(cacheDir: string, folder: string, hash: string): Promise<void> {
  const name = basename(folder);
  const generation = Number(/^gen-(\d+)$/.exec(name)?.[1]);
  if (!Number.isSafeInteger(generation)) throw new RangeError(`Not a cache folder: "${folder}"`);
  const pointer = join(cacheDir, `.${POINTER}.${crypto.randomUUID()}`);
  await Deno.writeTextFile(pointer, JSON.stringify({ generation, hash, folder: name }) + "\n");
  await Deno.rename(pointer, join(cacheDir, POINTER));
  await prune(cacheDir, generation);
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

/** Why a rooted read failed, after the file's name: `cannot be read (…)`, `resolves outside …`. */
function whyNot(error: unknown): string {
  if (error instanceof RootedReadError && error.reason !== "unreadable") return error.detail;
  const cause = error instanceof RootedReadError ? error.cause : error;
  return `cannot be read (${describeIoError(cause)})`;
}

/** The manifest of generation folder `name` inside the cache, or what is wrong with it. */
async function readManifest(cacheDir: string, name: string): Promise<Manifest | string> {
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
async function readAgainst(
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

async function sha256(data: Uint8Array): Promise<string> {
  // A file set's bytes are never shared memory, which is all `BufferSource` rules out.
  const digest = await crypto.subtle.digest("SHA-256", data as Uint8Array<ArrayBuffer>);
  return [...new Uint8Array(digest)].map((b) => b.toString(16).padStart(2, "0")).join("");
}

/** A hash prefix long enough to tell sets apart in a log line. */
function short(hash: string): string {
  return hash.slice(0, 12);
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
