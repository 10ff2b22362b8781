/**
 * Local mode: the tenants folder is watched and reloaded. Events are debounced, so an editor's
 * write-rename-delete dance settles before anything is read; then the folder is read once, built,
 * and read again — a set that changed while it was being built is not offered, and the read is
 * retried — so a half-written file set never becomes a generation.
 *
 * @module
 */
import type { FileSet } from "./file_set.ts";
import type { ConfigStore, OfferOutcome } from "./generations.ts";
import { hashTexts } from "./generations.ts";
import { type ConfigProblem, formatProblem } from "./problems.ts";
import { readRuntimeTexts } from "./tenant_files.ts";

/** How often a folder that keeps changing during a read is read again before giving up. */
const STABLE_READS = 5;

/** One read of a runtime folder: its YAML texts, the set's hash, and what made it unreadable. */
export interface FolderRead {
  readonly texts: ReadonlyMap<string, string>;
  readonly hash: string;
  readonly problems: readonly ConfigProblem[];
  /** Every file read, when the reader keeps them (a hub's). */
  readonly files?: FileSet;
}

/** Reads the folder's YAML files and hashes them (an edge's local mode). */
export async function readFolderTexts(dir: string): Promise<FolderRead> {
  const read = await readRuntimeTexts(dir);
  return { texts: read.texts, hash: await hashTexts(read.texts), problems: read.problems };
}

/**
 * Reads a folder until two reads in a row hash the same (a folder being edited is read again after
 * `pauseMs`, up to {@link STABLE_READS} times); a folder that never settles is a problem.
 */
export async function readStableFolder(
  dir: string,
  read: (dir: string) => Promise<FolderRead>,
  pauseMs: number,
): Promise<FolderRead> {
  for (let attempt = 1;; attempt++) {
    const first = await read(dir);
    if (first.problems.length > 0) return first;
    const again = await read(dir);
    if (again.problems.length === 0 && again.hash === first.hash) return first;
    if (attempt === STABLE_READS) {
      const message = `The folder kept changing while it was read (${STABLE_READS} times); ` +
        "the next change reads it again";
      return { ...first, problems: [{ file: dir, path: [], message }] };
    }
    await new Promise((resolve) => setTimeout(resolve, pauseMs));
  }
}

/** A folder reloader: `reload()` on demand, and the watch when started. */
export interface RuntimeReloader {
  /** Reads the folder and offers it; resolves with what the store did. */
  reload(): Promise<OfferOutcome>;
  /** Stops the watch (idempotent). */
  stop(): void;
}

/**
 * Reloads `dir` into `store` on demand, and on every change when `watch` is set.
 *
 * @param dir the tenants folder
 * @param store the live generations
 * @param options watch or not, the debounce, the log
 */
export function runtimeReloader(
  dir: string,
  store: ConfigStore,
  options: {
    watch: boolean;
    debounceMs: number;
    log: (line: string) => void;
    /** How to read the folder (default: {@link readFolderTexts}). */
    read?: (dir: string) => Promise<FolderRead>;
  },
): RuntimeReloader {
  const { log } = options;
  const readFolder = options.read ?? readFolderTexts;
  let timer: ReturnType<typeof setTimeout> | undefined;
  let watcher: Deno.FsWatcher | undefined;
  let stopped = false;

  async function reload(): Promise<OfferOutcome> {
    const read = await readStableFolder(dir, readFolder, options.debounceMs);
    if (read.problems.length > 0) return report(await store.reject("directory", read.problems));
    const { texts, hash, files } = read;
    return report(await store.offer({ dir, texts, source: "directory", hash, files }));
  }

  const report = (outcome: OfferOutcome) => reportOutcome(outcome, store, dir, log);

  if (options.watch) {
    try {
      watcher = Deno.watchFs(dir, { recursive: true });
    } catch (error) {
      log(`portcullis: warning: cannot watch ${dir}: ${(error as Error).message}`);
    }
    (async () => {
      if (!watcher) return;
      try {
        for await (const _event of watcher) {
          if (stopped) break;
          clearTimeout(timer);
          timer = setTimeout(() => {
            reload().catch((error) => log(`portcullis: config reload failed: ${error}`));
          }, options.debounceMs);
        }
      } catch { /* closed */ }
    })();
  }

  return {
    reload,
    stop() {
      stopped = true;
      clearTimeout(timer);
      try {
        watcher?.close();
      } catch { /* closed */ }
    },
  };
}

/**
 * Logs what an offer did: the generation loaded, or every problem of a rejected set.
 *
 * @param origin where the set came from, for the log line (a folder, or the hub's URL)
 */
export function reportOutcome(
  outcome: OfferOutcome,
  store: ConfigStore,
  origin: string,
  log: (line: string) => void,
): OfferOutcome {
  if (outcome.outcome === "loaded") {
    const g = outcome.generation;
    log(
      `portcullis: config generation ${g.number} loaded from ${origin} ` +
        `(${g.registry.tenants.length} tenants, ${g.hash.slice(0, 12)})`,
    );
  } else if (outcome.outcome === "rejected") {
    for (const problem of outcome.rejection.problems) {
      log(`portcullis: config rejected: ${formatProblem(problem)}`);
    }
    log(`portcullis: config rejected; generation ${store.current.number} stays live`);
  }
  return outcome;
}
