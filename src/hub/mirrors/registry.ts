/**
 * The hub's mirror registry: the mirrors folder and the slugs file, loaded at start (a bad set
 * refuses the hub) and again on change. A reload reads both whole and swaps only a fully valid
 * set; an invalid change is rejected, logged with every problem, shown in status, and the last
 * good set keeps being served — the same rule as the tenants folder.
 *
 * Change is seen by `Deno.watchFs` on the folder and on the slugs file itself (watching the file's
 * folder would need read on it, a wider grant), debounced. An editor that replaces the slugs file
 * leaves a watch on the old inode, so the watcher is reopened after every reload; `reload()` is
 * the way to force one.
 *
 * @module
 */
import { ConfigError, type ConfigProblem, formatProblem } from "../../config/problems.ts";
import { describeError } from "../../request/errors.ts";
import type { DoorsConfig } from "./config.ts";
import { readRegistry, type RegistrySet } from "./registry_files.ts";
import { canonicalJson } from "./view.ts";
import { sleep } from "../../live/backoff.ts";

export type { Mirror, RegistrySet, Slug } from "./registry_files.ts";

/** What a reload did. */
export type ReloadOutcome = "loaded" | "unchanged" | "rejected";

/** The mirror registry, from first load to stop. */
export class MirrorRegistry {
  readonly #config: DoorsConfig;
  readonly #log: (line: string) => void;
  readonly #listeners = new Set<(set: RegistrySet) => void>();
  readonly #stop = new AbortController();
  #set: RegistrySet | undefined;
  #key = "";
  #loadedAt = 0;
  #rejected: { at: string; problems: string[] } | undefined;
  #queue: Promise<unknown> = Promise.resolve();
  #timer: ReturnType<typeof setTimeout> | undefined;
  #watcher: Deno.FsWatcher | undefined;

  /**
   * @param config the resolved `doors:` fragment (folder, file, watch and debounce)
   * @param options where reloads and rejections are logged
   */
  constructor(config: DoorsConfig, options: { readonly log: (line: string) => void }) {
    this.#config = config;
    this.#log = options.log;
  }

  /** The live set. */
  get current(): RegistrySet {
    if (!this.#set) throw new RangeError("The mirror registry is not loaded yet");
    return this.#set;
  }

  /**
   * Reads the registry for the first time, then watches it when the config says so.
   *
   * @throws {ConfigError} naming file, field and value of every problem found
   */
  async load(): Promise<RegistrySet> {
    const read = await readRegistry(this.#config);
    if (!read.set) throw new ConfigError(read.problems);
    this.#swap(read.set);
    if (this.#config.watch) void this.#watchLoop();
    return read.set;
  }

  /** Calls `listener` with every set a reload swaps in. */
  onChange(listener: (set: RegistrySet) => void): void {
    this.#listeners.add(listener);
  }

  /** Reads the registry now; reloads run one at a time. */
  reload(): Promise<ReloadOutcome> {
    const next = this.#queue.then(() => this.#reloadNow());
    this.#queue = next.catch(() => {});
    return next;
  }

  /** The registry's state for the hub's `/v1/config`. */
  status(): Record<string, unknown> {
    return {
      mirrors_dir: this.#config.mirrorsDir,
      slugs_file: this.#config.slugsFile,
      loaded_at: this.#loadedAt ? new Date(this.#loadedAt).toISOString() : null,
      mirrors: this.#set?.mirrors.length ?? 0,
      slugs: this.#set?.slugs.length ?? 0,
      last_rejected: this.#rejected ?? null,
    };
  }

  /** Stops watching (idempotent). */
  stop(): void {
    this.#stop.abort();
    clearTimeout(this.#timer);
    this.#closeWatcher();
  }

  /** Closes the watcher, if one is open (closing a closed one is no error here). */
  #closeWatcher(): void {
    try {
      this.#watcher?.close();
    } catch { /* already closed */ }
  }

  async #reloadNow(): Promise<ReloadOutcome> {
    const read = await readRegistry(this.#config);
    if (!read.set) {
      this.#reject(read.problems);
      return "rejected";
    }
    if (canonicalJson(read.set) === this.#key) return "unchanged";
    this.#swap(read.set);
    this.#log(
      `portcullis: hub doors: registry reloaded (${read.set.mirrors.length} mirrors, ` +
        `${read.set.slugs.length} slugs)`,
    );
    for (const listener of this.#listeners) listener(read.set);
    return "loaded";
  }

  #swap(set: RegistrySet): void {
    this.#set = set;
    this.#key = canonicalJson(set);
    this.#loadedAt = Date.now();
  }

  #reject(problems: readonly ConfigProblem[]): void {
    const lines = problems.map(formatProblem);
    this.#rejected = { at: new Date().toISOString(), problems: lines };
    this.#log(
      `portcullis: hub doors: registry change rejected (${lines.length} problem(s)); ` +
        "the last good registry stays",
    );
    for (const line of lines) this.#log(`portcullis: hub doors: ${line}`);
  }

  /** Watches until stopped; the watcher is reopened after each reload, and after a failure. */
  async #watchLoop(): Promise<void> {
    let failures = 0;
    while (!this.#stop.signal.aborted) {
      try {
        this.#watcher = Deno.watchFs([this.#config.mirrorsDir, this.#config.slugsFile]);
        for await (const _event of this.#watcher) this.#schedule();
        failures = 0;
      } catch (error) {
        if (failures++ === 0) {
          this.#log(`portcullis: hub doors: cannot watch the registry: ${describeError(error)}`);
        }
        await sleep(Math.min(30_000, 1000 * failures), this.#stop.signal);
      }
    }
  }

  /** A reload after the debounce; then the watcher is reopened (see the module doc). */
  #schedule(): void {
    clearTimeout(this.#timer);
    this.#timer = setTimeout(async () => {
      await this.reload().catch((error) => {
        this.#log(`portcullis: hub doors: reload failed: ${describeError(error)}`);
      });
      this.#closeWatcher();
    }, this.#config.debounceMs);
  }
}
