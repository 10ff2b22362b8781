/**
 * Local mode (and a hub's runtime folder): the folder is watched and reloaded, and a file set is
 * offered only once it looks finished. Three guards stand between a writer and a generation:
 *
 * - **Debounce.** Each event restarts a `debounce_ms` timer, so writes closer together than that —
 *   an editor's write-rename-delete dance — are one change.
 * - **Quiet files.** When a file may have been written in place — the watch saw a visible file
 *   created or written, or nobody knows (`POST /v1/config/reload`, a folder that came back, a hub's
 *   boot) — the folder is read only once no file read changed (`Deno.stat` mtime and size) for
 *   twice `debounce_ms`; a change seen between two looks counts from its mtime, or from when it was
 *   seen if the mtime is older (`tar` and `cp -p` set old ones). The debounce alone already joins
 *   writes less than `debounce_ms` apart, so the wait has to reach further to add anything: fault
 *   injection (issue 13) paused a writer just before a key, the prefix parsed, went live and served
 *   empty 200s. Twice the debounce covers a pause up to that; no wait covers every pause, so
 *   writers should write a temporary name and rename it into place (the README says so). Renames,
 *   removals and hidden files do not wait: a file renamed into place is whole, and making every
 *   save wait cut the generations of a stream of 16 saves on two busy cores from 16 to 3–6
 *   (config_reload_test's steady load).
 * - **Double read.** The folder is read twice and used only when both reads agree; a set that
 *   changed meanwhile is read again.
 *
 * The watch outlives its folder. `Deno.watchFs` is inotify on Linux and watches an inode: measured
 * on Deno 2.9.6, a deleted folder's watch reports nothing of a folder made again at its path, and
 * a folder moved away goes on reporting its own edits while its replacement goes unseen. So the
 * reloader also stats the folder's path every {@link FOLDER_CHECK_MS} ms and after every burst of
 * events; when the folder there is not the one watched (gone, back, replaced) it watches what is
 * there and reloads once. The read grant on the folder covers a stat of its own path even while
 * nothing is there (NotFound, not NotCapable), so no grant on the parent is needed. While the
 * folder is gone the reload is rejected (`/v1/config` says why) and the live generation serves on.
 *
 * @module
 */
import { basename, join, resolve } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import type { FileSet } from "../config/file_set.ts";
import type { ConfigStore, OfferOutcome } from "./generations.ts";
import { hashTexts } from "./generations.ts";
import { type ConfigProblem, formatProblem, problemFromError } from "../config/problems.ts";
import { readRuntimeTexts } from "../config/tenant_files.ts";

/** How many rounds a folder that keeps changing is waited for before giving up. */
const STABLE_READS = 5;

/** How many debounce periods a file written in place must have been left alone before a read. */
const QUIET_DEBOUNCES = 2;

/** How often the folder's path is checked for a folder other than the one watched (ms). */
const FOLDER_CHECK_MS = 1000;

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
 * Reads a folder once its files have been quiet for twice `pauseMs` and two reads in a row hash the
 * same (a folder being edited is waited for, up to {@link STABLE_READS} rounds); a folder that
 * never settles is a problem.
 */
export function readStableFolder(
  dir: string,
  read: (dir: string) => Promise<FolderRead>,
  pauseMs: number,
): Promise<FolderRead> {
  return readSettled(dir, { read, pauseMs });
}

/**
 * {@link readStableFolder}, stopped by `signal` (an AbortError), waiting for quiet
 * files only while `inPlace()` says a file may have been written in place.
 */
async function readSettled(
  dir: string,
  options: {
    read: (dir: string) => Promise<FolderRead>;
    pauseMs: number;
    inPlace?: () => boolean;
    signal?: AbortSignal;
  },
): Promise<FolderRead> {
  const { read, pauseMs, inPlace = () => true, signal } = options;
  const quiet = new QuietClock(dir, QUIET_DEBOUNCES * pauseMs);
  for (let round = 1;; round++) {
    signal?.throwIfAborted();
    const first = await read(dir);
    if (first.problems.length > 0) return first;
    const wait = inPlace() ? await quiet.remaining([...(first.files ?? first.texts).keys()]) : 0;
    if (wait === 0) {
      const again = await read(dir);
      if (again.problems.length === 0 && again.hash === first.hash) return first;
    }
    if (round === STABLE_READS) {
      const message = `The folder kept changing while it was read (${STABLE_READS} times); ` +
        "the next change reads it again";
      return { ...first, problems: [{ file: dir, path: [], message }] };
    }
    await sleep(wait || pauseMs, undefined, { signal });
  }
}

/**
 * When a folder's files last changed, by their stamps (mtime and size). A stamp first seen counts
 * from its mtime; one that changed since the last look counts from its mtime if that is later than
 * the look, else from now. Wall time (`Date.now()`): it is the clock mtimes are written in.
 */
class QuietClock {
  readonly #dir: string;
  readonly #quietMs: number;
  readonly #seen = new Map<string, { stamp: string; since: number; at: number }>();

  constructor(dir: string, quietMs: number) {
    this.#dir = dir;
    this.#quietMs = quietMs;
  }

  /** Milliseconds until the files `names` (relative to the folder) are quiet; 0 when they are. */
  async remaining(names: readonly string[]): Promise<number> {
    let latest = -Infinity;
    for (const name of names) latest = Math.max(latest, await this.#changedAt(name));
    return Math.max(0, Math.ceil(latest + this.#quietMs - Date.now()));
  }

  async #changedAt(name: string): Promise<number> {
    const now = Date.now();
    let stamp = "gone";
    let mtime = now;
    try {
      const info = await Deno.stat(join(this.#dir, name));
      mtime = Math.min(info.mtime?.getTime() ?? now, now);
      stamp = `${info.mtime?.getTime()}:${info.size}`;
    } catch (error) {
      // Gone since the read is a change, seen now; a file the read got but stat cannot is left out.
      if (!(error instanceof Deno.errors.NotFound)) return -Infinity;
    }
    const before = this.#seen.get(name);
    let since = mtime;
    if (before?.stamp === stamp) since = before.since;
    else if (before && mtime <= before.at) since = now;
    this.#seen.set(name, { stamp, since, at: now });
    return since;
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
 * Reloads `dir` into `store` on demand, and on every change when `watch` is set. Reloads run one
 * at a time, in order; one asked for while another waits its turn joins it. A reload on demand
 * waits for quiet files; one the watch asked for waits only if it saw a file written in place.
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
  const { log, debounceMs } = options;
  const read = options.read ?? readFolderTexts;
  const stopping = new AbortController();
  let queue: Promise<unknown> = Promise.resolve();
  let waiting: Promise<OfferOutcome> | undefined;
  /** A file may have been written in place since the last read began (unknown at first). */
  let wrote = true;

  async function readAndOffer(): Promise<OfferOutcome> {
    waiting = undefined;
    const before = wrote;
    wrote = false;
    let got: FolderRead;
    try {
      got = await readSettled(dir, {
        read,
        pauseMs: debounceMs,
        inPlace: () => before || wrote, // a write seen while this read waits counts too
        signal: stopping.signal,
      });
    } catch (error) {
      // Stopping ends the reload; anything else is a rejected load, recorded and answered 422.
      if (stopping.signal.aborted) throw error;
      return report(await store.reject("directory", [problemFromError(dir, error)]));
    }
    if (got.problems.length > 0) return report(await store.reject("directory", got.problems));
    const { texts, hash, files } = got;
    return report(await store.offer({ dir, texts, source: "directory", hash, files }));
  }

  function enqueue(): Promise<OfferOutcome> {
    if (waiting) return waiting;
    const next = queue.then(readAndOffer);
    waiting = next;
    queue = next.catch(() => {});
    return next;
  }

  const report = (outcome: OfferOutcome) => reportOutcome(outcome, store, dir, log);
  const changed = () => {
    enqueue().catch((error) => {
      if (!stopping.signal.aborted) log(`portcullis: config reload failed: ${error}`);
    });
  };
  const writtenInPlace = () => wrote = true;
  const watch = options.watch
    ? new FolderWatch(dir, { debounceMs, log, changed, writtenInPlace })
    : undefined;
  return {
    reload() {
      wrote = true;
      return enqueue();
    },
    stop() {
      stopping.abort();
      watch?.stop();
    },
  };
}

/** What a folder's path holds: device, inode and birth time, or `""` when nothing is there. */
type Identity = string;

const identityOf = (info?: Deno.FileInfo): Identity =>
  info ? `${info.dev}:${info.ino}:${info.birthtime?.getTime()}` : "";

interface WatchOptions {
  readonly debounceMs: number;
  readonly log: (line: string) => void;
  /** Runs when the folder may have changed (once per burst of events, or once it is replaced). */
  readonly changed: () => void;
  /** Runs at once when a file may have been written in place (see {@link writesInPlace}). */
  readonly writtenInPlace: () => void;
}

/**
 * True unless an event is a rename, a removal, or touches only hidden files: what is left may be a
 * file written in place (`access` is a close after writing; reads make no events).
 */
function writesInPlace(event: Deno.FsEvent): boolean {
  if (event.kind === "rename" || event.kind === "remove") return false;
  return event.paths.some((path) => !basename(path).startsWith("."));
}

/**
 * Watches a folder by its path: events are debounced into `changed`, and the path is looked at
 * after each burst and every {@link FOLDER_CHECK_MS} ms; when the folder there is not the one
 * watched, the watch moves to it and `changed` runs.
 */
class FolderWatch {
  readonly #dir: string;
  readonly #options: WatchOptions;
  /** The folder watched; `"stale"` once its watch reported the folder itself removed. */
  #watched: Identity = "";
  #watcher?: Deno.FsWatcher;
  /** The watcher's loop, which ends once the watcher is closed. */
  #listening: Promise<void> = Promise.resolve();
  #debounce?: ReturnType<typeof setTimeout>;
  #poll?: ReturnType<typeof setTimeout>;
  #looking?: Promise<boolean>;
  #stopped = false;

  constructor(dir: string, options: WatchOptions) {
    this.#dir = dir;
    this.#options = options;
    let found: Identity = "";
    try {
      found = identityOf(Deno.statSync(dir));
    } catch { /* nothing there: the first look says so */ }
    this.#start(found);
    this.#schedule();
  }

  stop(): void {
    this.#stopped = true;
    clearTimeout(this.#debounce);
    clearTimeout(this.#poll);
    this.#close();
  }

  #start(found: Identity): void {
    this.#watched = found;
    if (found === "") return;
    try {
      const watcher = Deno.watchFs(this.#dir, { recursive: true });
      this.#watcher = watcher;
      this.#listening = this.#listen(watcher);
    } catch (error) {
      this.#options.log(
        `portcullis: warning: cannot watch ${this.#dir}: ${(error as Error).message}`,
      );
    }
  }

  #close(): void {
    try {
      this.#watcher?.close();
    } catch { /* closed */ }
    this.#watcher = undefined;
  }

  async #listen(watcher: Deno.FsWatcher): Promise<void> {
    const self = resolve(this.#dir);
    try {
      for await (const event of watcher) {
        if (watcher !== this.#watcher) break;
        if (event.kind === "remove" && event.paths.some((p) => resolve(p) === self)) {
          this.#watched = "stale"; // the folder itself went: what is there next is new
        }
        if (writesInPlace(event)) this.#options.writtenInPlace();
        clearTimeout(this.#debounce);
        this.#debounce = setTimeout(() => this.#settled(), this.#options.debounceMs);
      }
    } catch { /* closed */ }
  }

  /** A burst of events ended: the folder may have gone with it, so look before reading. */
  async #settled(): Promise<void> {
    if (!await this.#look() && !this.#stopped) this.#options.changed();
  }

  #schedule(): void {
    this.#poll = setTimeout(async () => {
      await this.#look();
      if (!this.#stopped) this.#schedule();
    }, FOLDER_CHECK_MS);
  }

  /** Moves the watch when the path holds another folder; one look at a time; true if it moved. */
  #look(): Promise<boolean> {
    this.#looking ??= this.#compare().finally(() => this.#looking = undefined);
    return this.#looking;
  }

  async #compare(): Promise<boolean> {
    // Nothing there, or nothing this process may see: either way, no folder to watch.
    const found = identityOf(await Deno.stat(this.#dir).catch(() => undefined));
    if (this.#stopped || found === this.#watched) return false;
    this.#options.log(
      found === ""
        ? `portcullis: warning: ${this.#dir} is gone; it is watched again when it is back`
        : `portcullis: ${this.#dir} is ${this.#watched ? "a new folder" : "back"}; watching it`,
    );
    // Deno 2.9.6 hands a new watch of a path the watch a live watcher of that path has (measured:
    // a watch opened before the old one's last poll ended saw nothing of a folder renamed into
    // place), so the old watcher is closed and its loop awaited first.
    this.#close();
    await this.#listening;
    if (this.#stopped) return true;
    this.#start(found);
    this.#options.writtenInPlace(); // nobody saw how the new folder was filled
    this.#options.changed();
    return true;
  }
}

/**
 * Logs what an offer did: the generation loaded, or every problem of a rejected set; after a
 * rejection, the first good set (a new one, or the live one again) also logs `config accepted,
 * generation N`, so the last line never says `config rejected` about a folder that was fixed.
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
  }
  if ((outcome.outcome === "loaded" || outcome.outcome === "unchanged") && outcome.recovered) {
    const g = outcome.generation;
    log(
      `portcullis: config accepted, generation ${g.number}: ${origin} is valid again ` +
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
