/**
 * Reloading certificates when their files change: the certificate folders are watched, and a
 * burst of events (an editor's write-rename-delete, an ACME client replacing two files) becomes
 * one reload after it settles.
 *
 * Two things the watch does not take for granted:
 *
 * - **The working directory.** `Deno.watchFs` reports absolute paths, while a config given as
 *   `serve config.yaml` resolves its certificate paths against a relative folder; every path is
 *   made absolute (against the working directory at start) before events are compared with it.
 * - **The folders.** inotify watches an inode: a folder missing at start cannot be watched, and a
 *   folder deleted and made again is a new inode the old watch never reports. So every
 *   {@link WatchOptions.checkMs} the folders' paths are looked at (`Deno.stat`, which the read
 *   grant on each folder allows even while nothing is there); when what is there differs from what
 *   is watched (created, gone, replaced), the watch is made again over the folders present and the
 *   certificates are reloaded once. The parent folder is never watched: no grant covers it.
 *
 * @module
 */
import { dirname, resolve } from "node:path";
import type { CertStore } from "./certificates.ts";

/** Stops a watch. */
export type StopWatching = () => void;

/** Timing and reporting of a certificate watch. */
export interface WatchOptions {
  /** Where problems go (a folder that cannot be watched). */
  readonly log: (line: string) => void;
  /** Quiet time after the last event before the reload (ms). */
  readonly settleMs?: number;
  /** How often the folders' paths are checked for a folder created, gone or replaced (ms). */
  readonly checkMs?: number;
}

/** The store's reload, as the watch uses it. */
type Reloadable = Pick<CertStore, "reload">;

/**
 * Watches the folders of `files` and reloads `store` after changes settle; a folder missing now
 * is picked up once it exists.
 *
 * @param store the certificates to reload
 * @param files certificate and key files (relative paths against the working directory)
 * @returns a function that stops watching
 */
export function watchCertificates(
  store: Reloadable,
  files: readonly string[],
  options: WatchOptions,
): StopWatching {
  const { log, settleMs = 250, checkMs = 1000 } = options;
  const watched = new Set(files.map((file) => resolve(file)));
  const folders = [...new Set([...watched].map((file) => dirname(file)))];
  let stopped = false;
  let watcher: Deno.FsWatcher | undefined;
  let seen: string | undefined;
  let settle: ReturnType<typeof setTimeout> | undefined;
  /** The last watch failure logged (said once, not every check). */
  let complaint: string | undefined;
  const reloadSoon = () => {
    clearTimeout(settle);
    settle = setTimeout(() => {
      store.reload().catch((error) => log(`portcullis: tls: reload failed: ${error}`));
    }, settleMs);
  };
  const follow = async (current: Deno.FsWatcher) => {
    try {
      for await (const event of current) {
        if (event.paths.some((path) => watched.has(path))) reloadSoon();
      }
    } catch { /* closed */ }
  };
  /** Watches the folders present now, unless they are the ones watched; true when it changed. */
  const rewatch = (): boolean => {
    const present = presentFolders(folders);
    const identity = present.map((folder) => `${folder.path}@${folder.inode}`).join("\n");
    if (stopped || identity === seen) return false;
    seen = identity;
    closeQuietly(watcher);
    watcher = undefined;
    const paths = present.map((folder) => folder.path);
    if (paths.length === 0) return true;
    try {
      watcher = Deno.watchFs(paths, { recursive: false });
      void follow(watcher);
    } catch (error) {
      const line = `portcullis: tls: cannot watch certificate folders ` +
        `(${(error as Error).message}); looking again every ${checkMs} ms; POST /v1/tls/reload ` +
        "reloads now";
      if (line !== complaint) log(line);
      complaint = line;
      seen = undefined;
    }
    return true;
  };
  rewatch();
  for (const [folder, reason] of absentFolders(folders)) {
    log(`portcullis: tls: certificate folder "${folder}" ${reason}; it is watched once it exists`);
  }
  // A folder that appeared, went or was replaced: its files may have changed unseen.
  const check = setInterval(() => rewatch() && reloadSoon(), checkMs);
  return () => {
    stopped = true;
    clearInterval(check);
    clearTimeout(settle);
    closeQuietly(watcher);
  };
}

/** The folders of `paths` that exist now, with their inode (a folder made again is a new one). */
function presentFolders(paths: readonly string[]): { path: string; inode: number | null }[] {
  const present: { path: string; inode: number | null }[] = [];
  for (const path of paths) {
    try {
      const info = Deno.statSync(path);
      if (info.isDirectory) present.push({ path, inode: info.ino });
    } catch { /* not there (yet), or not readable: looked at again later */ }
  }
  return present;
}

/** The folders of `paths` that cannot be watched now, each with why. */
function absentFolders(paths: readonly string[]): Map<string, string> {
  const absent = new Map<string, string>();
  for (const path of paths) {
    try {
      if (!Deno.statSync(path).isDirectory) absent.set(path, "is not a folder");
    } catch (error) {
      absent.set(
        path,
        error instanceof Deno.errors.NotFound
          ? "does not exist yet"
          : `cannot be read (${(error as Error).message})`,
      );
    }
  }
  return absent;
}

function closeQuietly(watcher: Deno.FsWatcher | undefined): void {
  try {
    watcher?.close();
  } catch { /* already closed */ }
}
