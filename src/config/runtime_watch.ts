/**
 * Local mode: the tenants folder is watched and reloaded. Events are debounced, so an editor's
 * write-rename-delete dance settles before anything is read; then the folder is read once, built,
 * and read again — a set that changed while it was being built is not offered, and the read is
 * retried — so a half-written file set never becomes a generation.
 *
 * @module
 */
import type { ConfigStore, OfferOutcome } from "./generations.ts";
import { hashTexts } from "./generations.ts";
import { formatProblem } from "./problems.ts";
import { readRuntimeTexts } from "./tenant_files.ts";

/** How often a folder that keeps changing during a read is read again before giving up. */
const STABLE_READS = 5;

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
  options: { watch: boolean; debounceMs: number; log: (line: string) => void },
): RuntimeReloader {
  const { log } = options;
  let timer: ReturnType<typeof setTimeout> | undefined;
  let watcher: Deno.FsWatcher | undefined;
  let stopped = false;

  async function reload(): Promise<OfferOutcome> {
    for (let attempt = 1;; attempt++) {
      const read = await readRuntimeTexts(dir);
      if (read.problems.length > 0) return report(await store.reject("directory", read.problems));
      const hash = await hashTexts(read.texts);
      const again = await readRuntimeTexts(dir);
      if ((await hashTexts(again.texts)) === hash) {
        return report(await store.offer({ dir, texts: read.texts, source: "directory", hash }));
      }
      if (attempt === STABLE_READS) {
        const message = `The folder kept changing while it was read (${STABLE_READS} times); ` +
          "the next change reads it again";
        return report(await store.reject("directory", [{ file: dir, path: [], message }]));
      }
      await new Promise((resolve) => setTimeout(resolve, options.debounceMs));
    }
  }

  function report(outcome: OfferOutcome): OfferOutcome {
    if (outcome.outcome === "loaded") {
      const g = outcome.generation;
      log(
        `portcullis: config generation ${g.number} loaded from ${dir} ` +
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
