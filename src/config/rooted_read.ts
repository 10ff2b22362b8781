/**
 * The one way a file is read on behalf of config: tenant files, `globals.yaml`, body files,
 * certificates and keys, ACME challenges, hub tokens, the tenant-label salt and the edge cache.
 * Each read names a root folder and a file inside it, and is checked at every read, not once at
 * load: Deno checks `--allow-read` against the path it is given, never against where a symlink
 * leads, so a body file swapped for a symlink to `/etc/passwd` after load was served, and a
 * symlinked tenant file was read and echoed in a rejection (issue 14). A read
 *
 * 1. refuses a name that lies outside the root as written;
 * 2. resolves it (`Deno.realPath`) and refuses it when it resolves outside the root's real path
 *    (a symlink that stays inside is fine); stats it and refuses anything but a regular file
 *    before opening it, so a FIFO never blocks the open and a device never streams;
 * 3. opens the resolved path, and compares the device and inode of the open file (`fstat`) with
 *    an `lstat` of the resolved path taken after the open: a file swapped for a link (or back)
 *    between resolve and open is refused, and the bytes read are always the open file's;
 * 4. below the root, also watches every folder on the resolved path: each must be a folder whose
 *    inode, ctime and mtime are the same before and after the open. Without it a folder swapped
 *    for a link and back around the open (A→B→A) passed step 3: a loop doing that leaked the
 *    outside file 71 times in ~35,000 reads; with it, none in ~90,000. A folder changed within
 *    the last {@link RACY_MS} ms cannot prove it (file times come from a coarse clock): the read
 *    waits for it to settle, a few times, then refuses. Not closed: an attacker who may rename
 *    folders inside the root *and* set the folder's mtime back won 1 read in ~23,000, because
 *    Deno reports ctime in whole seconds and offers no `openat`/`O_NOFOLLOW`;
 * 5. refuses a file larger than the caller's bound, and — for a secret (key, salt, token) — a file
 *    group or others may read or write (`mode & 0o077`).
 *
 * The root itself (and the folders above it) is trusted as configured. Refusals are
 * {@link RootedReadError}s that name the file relative to its root and the reason, never a byte
 * of content. Cost, measured on a busy 2-core machine: see {@link openRooted}.
 *
 * @module
 */
import { basename, dirname, isAbsolute, join, normalize, relative, resolve, sep } from "node:path";
import { describeIoError } from "./yaml_file.ts";

/** What a read may accept beyond "a regular file inside the root". */
export interface RootedOptions {
  /** Refuse a file larger than this many bytes. */
  readonly maxBytes?: number;
  /** A secret (private key, salt, token): refuse a file that group or others may read or write. */
  readonly secret?: boolean;
}

/** Why a read was refused. */
export type RootedRefusal =
  | "missing"
  | "unreadable"
  | "outside"
  | "not_regular"
  | "changed"
  | "too_large"
  | "exposed";

/** A read refused: names the file (relative to its root) and why, never what it holds. */
export class RootedReadError extends Error {
  /** The file as named inside its root (POSIX separators). */
  readonly file: string;
  /** The root folder, as given. */
  readonly root: string;
  readonly reason: RootedRefusal;
  /** The reason in words, without the file: `resolves outside "/srv/tenants"`. */
  readonly detail: string;
  /** The file's permission bits, for `exposed`. */
  readonly mode?: number;
  /** The file's size in bytes, for `too_large`. */
  readonly size?: number;

  /**
   * @param fields the file, root and reason; the detail ends the message
   */
  constructor(
    fields: { file: string; root: string; reason: RootedRefusal; mode?: number; size?: number },
    detail: string,
    options?: ErrorOptions,
  ) {
    super(`File "${fields.file}" ${detail}`, options);
    this.name = "RootedReadError";
    this.file = fields.file;
    this.root = fields.root;
    this.reason = fields.reason;
    this.detail = detail;
    this.mode = fields.mode;
    this.size = fields.size;
  }
}

/** A file opened by {@link openRooted}: the handle, what `fstat` said, and its name in the root. */
export interface RootedFile {
  readonly handle: Deno.FsFile;
  readonly info: Deno.FileInfo;
  readonly file: string;
}

/**
 * Opens a file inside `root` after every check in the module doc. The caller owns the handle.
 *
 * Cost: three round trips to Deno's file-system threads (four below the root), six to eight
 * system calls. `deno bench` on a 2-core machine at load 4–5: a file in the root 100 µs at best,
 * 250 µs at p75; one folder down (a body file) 165 µs / 360 µs — against 37 µs / 110 µs for the
 * `stat` and `open` that served a body file before. Doing the metadata calls synchronously saved
 * about a third, and would block the event loop on a slow disk: not done.
 *
 * @param root the folder the file must stay inside
 * @param name the file: relative to `root`, or an absolute path inside it
 * @throws {RootedReadError} naming the file and the reason
 * @example
 * ```ts
 * import { openRooted } from "./rooted_read.ts";
 * const dir = await Deno.makeTempDir();
 * await Deno.writeTextFile(`${dir}/page.html`, "<p>hi</p>");
 * const opened = await openRooted(dir, "page.html");
 * opened.info.size; // 9
 * opened.handle.close();
 * await Deno.remove(dir, { recursive: true });
 * ```
 */
export async function openRooted(
  root: string,
  name: string,
  options: RootedOptions = {},
): Promise<RootedFile> {
  const base = resolve(root);
  const path = isAbsolute(name) ? normalize(name) : join(base, name);
  const file = inside(base, path) ? relative(base, path).split(sep).join("/") : name;
  const refuse: Refuse = (reason, detail, cause, more = {}) =>
    new RootedReadError({ file, root, reason, ...more }, detail, cause ? { cause } : undefined);
  if (!inside(base, path)) throw refuse("outside", `lies outside "${root}"`);
  for (let attempt = 1;; attempt++) {
    const found = await resolveInside(base, path, refuse);
    const before = await watch(found.folders, refuse);
    if (before === "racy") {
      if (attempt === SETTLE_TRIES) throw refuse("changed", "is in a folder that keeps changing");
      await new Promise((settle) => setTimeout(settle, RACY_MS));
      continue;
    }
    return { ...await openResolved(found, before, options, refuse), file };
  }
}

/** Folders below the root changed this recently cannot prove they did not change again. */
export const RACY_MS = 20;
/** Attempts at a read whose folders keep changing. */
const SETTLE_TRIES = 4;

interface Resolved {
  /** The resolved path, inside the root. */
  readonly real: string;
  /** The folders from the root to the file's folder, when that is below the root. */
  readonly folders: readonly string[];
}

/** Step 2: the resolved path, inside the root, naming a regular file. */
async function resolveInside(base: string, path: string, refuse: Refuse): Promise<Resolved> {
  const [realRoot, real, target] = await Promise.all([
    realRootOf(base),
    Deno.realPath(path).catch((error: Error) => error),
    Deno.stat(path).catch((error: Error) => error),
  ]);
  if (real instanceof Error) throw ioRefusal(refuse, real);
  if (!inside(realRoot, real)) throw refuse("outside", `resolves outside "${base}"`);
  if (target instanceof Error) throw ioRefusal(refuse, target);
  if (!target.isFile) throw refuse("not_regular", "is not a regular file");
  const folders: string[] = [];
  const below = relative(realRoot, dirname(real));
  if (below !== "") {
    let folder = realRoot;
    folders.push(folder);
    for (const part of below.split(sep)) folders.push(folder = join(folder, part));
  }
  return { real, folders };
}

/** Step 3 and 4: opens the resolved path and proves the open file is the one it names. */
async function openResolved(
  found: Resolved,
  before: readonly Deno.FileInfo[],
  options: RootedOptions,
  refuse: Refuse,
): Promise<{ handle: Deno.FsFile; info: Deno.FileInfo }> {
  const handle = await Deno.open(found.real, { read: true }).catch((error) => {
    throw ioRefusal(refuse, error);
  });
  try {
    const [info, now, after] = await Promise.all([
      handle.stat(),
      Deno.lstat(found.real).catch(() => undefined),
      watch(found.folders, refuse),
    ]);
    const settled = after !== "racy" && after.every((folder, i) => sameFolder(before[i], folder));
    if (!now || !sameFile(info, now) || !settled) {
      throw refuse("changed", "changed while it was opened");
    }
    admit(info, options, refuse);
    return { handle, info };
  } catch (error) {
    handle.close();
    throw error instanceof RootedReadError ? error : ioRefusal(refuse, error);
  }
}

/** `lstat` of each folder; "racy" when one changed within {@link RACY_MS} ms. */
async function watch(
  folders: readonly string[],
  refuse: Refuse,
): Promise<Deno.FileInfo[] | "racy"> {
  if (folders.length === 0) return [];
  const infos = await Promise.all(folders.map((folder) => Deno.lstat(folder))).catch((error) => {
    throw error instanceof Deno.errors.NotFound
      ? refuse("changed", "changed while it was opened", error)
      : ioRefusal(refuse, error);
  });
  if (!infos.every((info) => info.isDirectory)) {
    throw refuse("changed", "changed while it was opened");
  }
  const recent = Date.now() - RACY_MS;
  return infos.some((info) => (info.mtime?.getTime() ?? 0) >= recent) ? "racy" : infos;
}

type Refuse = (
  reason: RootedRefusal,
  detail: string,
  cause?: unknown,
  more?: { mode?: number; size?: number },
) => RootedReadError;

/** The checks on the open file itself: its type, its size, and a secret's mode. */
function admit(info: Deno.FileInfo, options: RootedOptions, refuse: Refuse): void {
  if (!info.isFile) throw refuse("not_regular", "is not a regular file");
  if (options.maxBytes !== undefined && info.size > options.maxBytes) {
    const detail = `is ${info.size} bytes, more than ${options.maxBytes}`;
    throw refuse("too_large", detail, undefined, { size: info.size });
  }
  const mode = (info.mode ?? 0) & 0o777;
  if (options.secret && (mode & 0o077) !== 0) {
    const shown = mode.toString(8).padStart(4, "0");
    const detail = `is open to group or others (mode ${shown}; make it 0600)`;
    throw refuse("exposed", detail, undefined, { mode });
  }
}

/**
 * Reads a whole file inside `root` (see {@link openRooted}); never more than the size `fstat`
 * gave, nor more than `maxBytes`.
 *
 * @throws {RootedReadError} naming the file and the reason
 */
export async function readRooted(
  root: string,
  name: string,
  options: RootedOptions = {},
): Promise<Uint8Array> {
  const opened = await openRooted(root, name, options);
  try {
    const size = opened.info.size;
    const data = new Uint8Array(size);
    let filled = 0;
    while (filled < size) {
      const read = await opened.handle.read(data.subarray(filled));
      if (read === null) break;
      filled += read;
    }
    return filled === size ? data : data.subarray(0, filled);
  } catch (error) {
    throw new RootedReadError(
      { file: opened.file, root, reason: "unreadable" },
      `cannot be read: ${describeIoError(error)}`,
      { cause: error },
    );
  } finally {
    opened.handle.close();
  }
}

/**
 * Reads a whole file inside `root` as UTF-8 text (see {@link readRooted}).
 *
 * @throws {RootedReadError} naming the file and the reason
 */
export async function readRootedText(
  root: string,
  name: string,
  options: RootedOptions = {},
): Promise<string> {
  return new TextDecoder().decode(await readRooted(root, name, options));
}

/**
 * Reads one file the config names by path (a key, a certificate, a token): its folder is its root,
 * so a symlink leading out of that folder is refused like any other. Errors name `what` and the
 * file, never a byte of it.
 *
 * @param file the file's path as configured (absolute)
 * @param what what the file is, for the message: `admin.token_file`, `key file`, …
 * @throws {Error} `<what> <file> does not exist`, `… is not granted by --allow-read`, or the
 *   rooted read's refusal (`… is open to group or others (mode 0640; make it 0600)`)
 */
export async function readNamedFile(
  file: string,
  what: string,
  options: RootedOptions = {},
): Promise<string> {
  try {
    return await readRootedText(dirname(file), basename(file), options);
  } catch (error) {
    const cause = error instanceof RootedReadError ? error.cause : error;
    if (cause instanceof Deno.errors.NotFound) throw new Error(`${what} ${file} does not exist`);
    if (cause instanceof Deno.errors.NotCapable) {
      throw new Error(`${what} ${file} is not granted by --allow-read`);
    }
    if (error instanceof RootedReadError && error.reason !== "unreadable") {
      throw new Error(`${what} ${file} ${error.detail}`);
    }
    throw new Error(`cannot read ${what} ${file}`);
  }
}

/**
 * Checks a file inside `root` as a read would, without reading it (a load-time check whose
 * serving reads again).
 *
 * @returns what `fstat` said about it
 * @throws {RootedReadError} naming the file and the reason
 */
export async function checkRooted(
  root: string,
  name: string,
  options: RootedOptions = {},
): Promise<Deno.FileInfo> {
  const opened = await openRooted(root, name, options);
  opened.handle.close();
  return opened.info;
}

/** True when `path` is `dir` or lies below it (both absolute and normalised). */
function inside(dir: string, path: string): boolean {
  const rest = relative(dir, path);
  return !(rest === ".." || rest.startsWith(`..${sep}`) || isAbsolute(rest));
}

/**
 * The root's real path. A root the process may not read as a folder (a salt granted as one file)
 * cannot be resolved: it is taken as written, so a file whose real path leaves it is still refused.
 */
async function realRootOf(root: string): Promise<string> {
  try {
    return await Deno.realPath(root);
  } catch {
    return root;
  }
}

function sameFile(a: Deno.FileInfo, b: Deno.FileInfo): boolean {
  return a.dev === b.dev && a.ino !== null && a.ino === b.ino;
}

/**
 * Same inode, same ctime and same mtime. Deno gives ctime in whole seconds only (measured: a
 * folder changed 2,000 times in 263 ms showed one ctime); mtime has milliseconds but its owner can
 * set it back — which moves ctime, at whole seconds.
 */
function sameFolder(a: Deno.FileInfo, b: Deno.FileInfo): boolean {
  return sameFile(a, b) && a.ctime?.getTime() === b.ctime?.getTime() &&
    a.mtime?.getTime() === b.mtime?.getTime();
}

function ioRefusal(refuse: Refuse, error: unknown): RootedReadError {
  if (error instanceof Deno.errors.NotFound) {
    return refuse("missing", "does not exist", error);
  }
  return refuse("unreadable", `cannot be read: ${describeIoError(error)}`, error);
}
