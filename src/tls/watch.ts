/**
 * Reloading certificates when their files change: the certificate folders are watched, and a
 * burst of events (an editor's write-rename-delete, an ACME client replacing two files) becomes
 * one reload after it settles.
 *
 * @module
 */
import { dirname } from "node:path";
import type { CertStore } from "./certificates.ts";

/** Stops a watch. */
export type StopWatching = () => void;

/**
 * Watches the folders of `files` and reloads `store` after changes settle for `settleMs`.
 *
 * @returns a function that stops watching
 */
export function watchCertificates(
  store: CertStore,
  files: readonly string[],
  log: (line: string) => void,
  settleMs = 250,
): StopWatching {
  const folders = [...new Set(files.map((file) => dirname(file)))];
  let watcher: Deno.FsWatcher;
  try {
    watcher = Deno.watchFs(folders, { recursive: false });
  } catch (error) {
    log(
      `portcullis: tls: cannot watch certificate folders (${(error as Error).message}); ` +
        "use POST /v1/tls/reload",
    );
    return () => {};
  }
  const watched = new Set(files);
  let timer: number | undefined;
  (async () => {
    try {
      for await (const event of watcher) {
        if (!event.paths.some((path) => watched.has(path))) continue;
        clearTimeout(timer);
        timer = setTimeout(() => store.reload(), settleMs) as unknown as number;
      }
    } catch { /* closed */ }
  })();
  return () => {
    clearTimeout(timer);
    try {
      watcher.close();
    } catch { /* already closed */ }
  };
}
