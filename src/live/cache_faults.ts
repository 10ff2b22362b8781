/**
 * What a failed write to the generation cache says and leaves behind. A cache folder on a full disk
 * (ENOSPC), a read-only remount (EROFS), a quota or a permission change refuses a write part way:
 * the staging folder is made, the first file is not. Issue 32 found an edge that left two
 * `.staging-gen-*` folders behind after such a failure and, worse, took the write for the hub's
 * being away. So a failed write here is a {@link CacheWriteError}: it names the cache folder, the
 * step and the OS's reason, and carries a {@link CacheFault} — a small fixed set, so `/metrics` can
 * label it without an unbounded label value — and {@link cleanStaging} removes what writes left
 * (at start, and after every failure).
 *
 * @module
 */
import { join } from "node:path";
import { describeIoError } from "../config/yaml_file.ts";

/** Why a cache write failed, as `/metrics` labels it. */
export type CacheFault = "no_space" | "read_only" | "permission" | "quota" | "io";

/** The OS error codes each fault stands for (the rest are `io`). */
const FAULTS: Readonly<Record<string, CacheFault>> = {
  ENOSPC: "no_space",
  EROFS: "read_only",
  EACCES: "permission",
  EPERM: "permission",
  EDQUOT: "quota",
};

/**
 * A write to the cache failed: the edge keeps serving what it serves and retries (hub_client.ts).
 * Callers catch it to tell a disk fault from the hub being away.
 */
export class CacheWriteError extends Error {
  /** The cache folder. */
  readonly cacheDir: string;
  /** Why, as a fixed kind. */
  readonly fault: CacheFault;

  /**
   * @param cacheDir the cache folder
   * @param step what was being written (`stage a generation`, `replace current.json`)
   * @param cause the OS error
   */
  constructor(cacheDir: string, step: string, cause: unknown) {
    super(`Cannot ${step} in the cache "${cacheDir}": ${describeIoError(cause)}`, { cause });
    this.name = "CacheWriteError";
    this.cacheDir = cacheDir;
    this.fault = faultOf(cause);
  }
}

/**
 * The fault an OS error stands for.
 *
 * @example
 * ```ts
 * import { faultOf } from "./cache_faults.ts";
 * faultOf(Object.assign(new Error("No space left on device (os error 28)"), { code: "ENOSPC" }));
 * // "no_space"
 * ```
 */
export function faultOf(error: unknown): CacheFault {
  if (error instanceof CacheWriteError) return error.fault;
  if (error instanceof Deno.errors.PermissionDenied || error instanceof Deno.errors.NotCapable) {
    return "permission";
  }
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === "string" && Object.hasOwn(FAULTS, code) ? FAULTS[code] : "io";
}

/** Names a write leaves only while it runs: a staging folder, a pointer not yet renamed. */
const LEFTOVER = /^\.(staging-gen-\d+-|current\.json\.)[0-9a-f-]+$/;

/**
 * Removes what cache writes leave behind when they fail or the process dies mid-write: staging
 * folders (`.staging-gen-<n>-<uuid>`) and pointers not yet renamed (`.current.json.<uuid>`). Call
 * it only when no write runs (at start, after a failed write): the follower writes one at a time.
 *
 * @returns the names removed (those that could not be, on a read-only disk, are left out)
 */
export async function cleanStaging(cacheDir: string): Promise<string[]> {
  const removed: string[] = [];
  let entries: Deno.DirEntry[];
  try {
    entries = await Array.fromAsync(Deno.readDir(cacheDir));
  } catch {
    return removed; // no cache folder yet, or one that cannot be read: nothing to clean
  }
  for (const entry of entries) {
    if (!LEFTOVER.test(entry.name)) continue;
    const gone = await Deno.remove(join(cacheDir, entry.name), { recursive: true })
      .then(() => true, () => false);
    if (gone) removed.push(entry.name);
  }
  return removed.sort();
}
