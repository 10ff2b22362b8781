/**
 * Runtime configuration generations. A generation is one immutable, fully validated tenant set —
 * `globals.yaml` plus one file per tenant — with a number and a content hash. A new set is
 * validated whole (every file, every policy, host uniqueness, backends the edge can reach) and
 * swapped in atomically only when it is valid; otherwise the live generation stays and the
 * rejection is recorded with every problem. A request reads the registry once, so it finishes on
 * the generation it started with.
 *
 * @module
 */
import type { FileSet } from "../config/file_set.ts";
import { type ConfigProblem, problemFromError } from "../config/problems.ts";
import { buildRegistry, type TenantRegistry } from "../proxy/tenants.ts";

/** One live (or once live) tenant set. */
export interface Generation {
  /** 1, 2, …: each process counts its own loads (0 is the empty set before a first one). */
  readonly number: number;
  /** SHA-256 of the file set (see {@link hashTexts}), hex. */
  readonly hash: string;
  /** Wall-clock time it went live (ms since the epoch). */
  readonly loadedAt: number;
  /** Where it came from: `directory`, `hub` or `cache`. */
  readonly source: GenerationSource;
  /** The folder its files are in (body files resolve inside it). */
  readonly dir: string;
  /** The tenants, compiled: what the dataplane routes with. */
  readonly registry: TenantRegistry;
  /** The files it was built from (name → text). */
  readonly texts: ReadonlyMap<string, string>;
  /** Every file of the set, body files included, when the reader kept them (a hub's). */
  readonly files?: FileSet;
}

/** Where a generation came from. */
export type GenerationSource = "directory" | "hub" | "cache";

/** How the stores of request workers act as one. */
export interface StoreSharing {
  /**
   * The live generation's number, shared by every worker (`Int32Array(1)` over shared memory); it
   * must hold the first generation's number before any store reads it.
   */
  readonly pointer: Int32Array;
  /**
   * The owner only: builds a validated generation in every other worker; resolves with their
   * problems (empty when all are ready), before the owner switches the pointer.
   */
  readonly prepareElsewhere?: (generation: Generation) => Promise<ConfigProblem[]>;
}

/** A set that was refused, and why. */
export interface Rejection {
  /** Wall-clock time of the refusal (ms since the epoch). */
  readonly at: number;
  /** The refused set's hash. */
  readonly hash: string;
  /** Where the refused set came from. */
  readonly source: GenerationSource;
  /** The generation number it would have had. */
  readonly number: number;
  /** Why it was refused: every problem found. */
  readonly problems: readonly ConfigProblem[];
}

/** What an offer did. */
export type OfferOutcome =
  /** `recovered`: this good set follows a rejection (the bad file was fixed or removed). */
  | { readonly outcome: "loaded"; readonly generation: Generation; readonly recovered?: boolean }
  | { readonly outcome: "unchanged"; readonly generation: Generation; readonly recovered?: boolean }
  | { readonly outcome: "rejected"; readonly rejection: Rejection }
  /**
   * `pending` (a hub follower only): the set is valid so far but could not be written to the
   * cache; `generation`, the live one, stays, and the set is tried again (followed_sets.ts).
   */
  | { readonly outcome: "pending"; readonly generation: Generation };

/**
 * A file set to offer.
 *
 * @internal
 */
export interface Offer {
  /** The folder the files belong to (body files resolve inside it). */
  readonly dir: string;
  readonly texts: ReadonlyMap<string, string>;
  readonly source: GenerationSource;
  /** The number to give it (a hub's); default: the live number plus one. */
  readonly number?: number;
  /** The hash to give it when its texts are not the whole set (a hub's, with assets). */
  readonly hash?: string;
  /** The whole file set, carried onto the generation. */
  readonly files?: FileSet;
}

/**
 * Hashes a file set: SHA-256 over the names in order, each with its length and text, so no two
 * different sets share a hash by concatenation.
 *
 * @example
 * ```ts
 * import { hashTexts } from "./generations.ts";
 * const a = await hashTexts(new Map([["a.yaml", "x"]]));
 * a.length; // 64
 * ```
 */
export async function hashTexts(texts: ReadonlyMap<string, string>): Promise<string> {
  const encoder = new TextEncoder();
  const parts: string[] = [];
  for (const name of [...texts.keys()].sort()) {
    const text = texts.get(name)!;
    parts.push(`${name}\0${encoder.encode(text).byteLength}\0${text}`);
  }
  const digest = await crypto.subtle.digest("SHA-256", encoder.encode(parts.join("\0")));
  return [...new Uint8Array(digest)].map((b) => b.toString(16).padStart(2, "0")).join("");
}

/**
 * The live generation of one process, and the last rejected set. Offers are applied one at a time
 * in arrival order.
 */
export class ConfigStore {
  #current: Generation;
  #rejected?: Rejection;
  #queue: Promise<unknown> = Promise.resolve();
  readonly #check: (registry: TenantRegistry) => ConfigProblem[] | Promise<ConfigProblem[]>;
  readonly #listeners = new Set<(generation: Generation) => void>();
  readonly #statusListeners = new Set<() => void>();
  /** Counts decisions, so "a good load after the last rejection" needs no clock. */
  #decisions = 0;
  #rejectedAt = -1;
  #goodAt = -1;

  readonly #sharing?: StoreSharing;
  /** Mirrors: generations built ahead of the owner's switch, by number. */
  readonly #prepared = new Map<number, Generation>();

  /**
   * Creates a store whose live generation is `first`.
   *
   * @param first the generation to start with
   * @param check further rules a set must pass on this process (e.g. every backend reachable)
   * @param sharing request workers: the shared live-generation number, and (owner) how to prepare
   *   a generation in every other worker before switching
   */
  constructor(
    first: Generation,
    check: (registry: TenantRegistry) => ConfigProblem[] | Promise<ConfigProblem[]> = () => [],
    sharing?: StoreSharing,
  ) {
    this.#current = first;
    this.#check = check;
    this.#sharing = sharing;
  }

  /** The live generation (with request workers: the one the shared pointer names). */
  get current(): Generation {
    const pointer = this.#sharing?.pointer;
    if (pointer) {
      const live = Atomics.load(pointer, 0);
      if (live !== this.#current.number) this.#follow(live);
    }
    return this.#current;
  }

  /** A mirror moves to the generation the owner switched the shared pointer to. */
  #follow(live: number): void {
    const next = this.#prepared.get(live);
    if (!next) return;
    for (const number of this.#prepared.keys()) if (number <= live) this.#prepared.delete(number);
    this.#current = next;
    this.#goodAt = ++this.#decisions;
    for (const listener of this.#listeners) listener(next);
  }

  /**
   * A mirror builds a generation the owner validated, ready for the owner's switch; nothing
   * changes until the shared pointer names it.
   *
   * @returns the problems if it could not be built here (then the owner does not switch)
   */
  prepare(offer: Offer & { readonly number: number; readonly hash: string }): Promise<
    ConfigProblem[]
  > {
    const next = this.#queue.then(async () => {
      const built = await buildSafely(offer.dir, offer.texts, this.current.registry);
      const problems = built.registry ? await this.#check(built.registry) : built.problems;
      if (problems.length > 0 || !built.registry) return problems;
      this.#prepared.set(offer.number, {
        number: offer.number,
        hash: offer.hash,
        loadedAt: Date.now(),
        source: offer.source,
        dir: offer.dir,
        registry: built.registry,
        texts: offer.texts,
      });
      return [];
    });
    this.#queue = next.catch(() => {});
    return next;
  }

  /** The last set refused since start, if any. */
  get lastRejected(): Rejection | undefined {
    return this.#rejected;
  }

  /** The live registry: read it once per request. */
  registry(): TenantRegistry {
    return this.current.registry;
  }

  /** Calls `listener` after each swap; returns a function that unregisters it. */
  onSwap(listener: (generation: Generation) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /**
   * Calls `listener` after anything `/v1/config` shows changes: a swap, a rejection, or a
   * rejection superseded by a good load. Returns a function that unregisters it.
   */
  onStatus(listener: () => void): () => void {
    this.#statusListeners.add(listener);
    return () => this.#statusListeners.delete(listener);
  }

  /**
   * True when a load after the last rejection succeeded or matched the live set: the rejection no
   * longer describes the source (the bad file was fixed or removed).
   */
  get rejectionSuperseded(): boolean {
    return this.#rejected !== undefined && this.#goodAt > this.#rejectedAt;
  }

  /**
   * Copies another store's rejection record (a request worker mirroring the worker that owns the
   * runtime source).
   */
  mirrorRejection(rejection: Rejection | undefined, superseded: boolean): void {
    if (rejection === undefined) return;
    this.#rejected = rejection;
    this.#rejectedAt = ++this.#decisions;
    if (superseded) this.#goodAt = ++this.#decisions;
    this.#notify();
  }

  #recordRejection(rejection: Rejection): OfferOutcome {
    this.#rejected = rejection;
    this.#rejectedAt = ++this.#decisions;
    this.#notify();
    return { outcome: "rejected", rejection };
  }

  #recordGood(): void {
    const superseded = this.rejectionSuperseded;
    this.#goodAt = ++this.#decisions;
    if (this.#rejected && !superseded) this.#notify();
  }

  #notify(): void {
    for (const listener of this.#statusListeners) listener();
  }

  /**
   * Validates a file set and makes it live, or records why not. A set identical to the live one
   * changes nothing.
   */
  offer(offer: Offer): Promise<OfferOutcome> {
    const next = this.#queue.then(() => this.#apply(offer));
    this.#queue = next.catch(() => {});
    return next;
  }

  /**
   * Records a set that could not even be read (an unreadable folder or file) as rejected; the live
   * generation stays.
   */
  reject(source: GenerationSource, problems: readonly ConfigProblem[]): Promise<OfferOutcome> {
    const next = this.#queue.then((): OfferOutcome => {
      const rejection = {
        at: Date.now(),
        hash: "",
        source,
        number: this.#current.number + 1,
        problems,
      };
      return this.#recordRejection(rejection);
    });
    this.#queue = next.catch(() => {});
    return next;
  }

  async #apply(offer: Offer): Promise<OfferOutcome> {
    const hash = offer.hash ?? await hashTexts(offer.texts);
    const live = this.current;
    const recovered = this.#rejected !== undefined && !this.rejectionSuperseded;
    if (hash === live.hash) {
      this.#recordGood();
      return { outcome: "unchanged", generation: live, recovered };
    }
    const number = offer.number ?? live.number + 1;
    const built = await buildSafely(offer.dir, offer.texts, live.registry);
    const problems = built.registry ? await this.#check(built.registry) : built.problems;
    if (!built.registry || problems.length > 0) {
      return this.#recordRejection({
        at: Date.now(),
        hash,
        source: offer.source,
        number,
        problems,
      });
    }
    const generation: Generation = {
      number,
      hash,
      loadedAt: Date.now(),
      source: offer.source,
      dir: offer.dir,
      registry: built.registry,
      texts: offer.texts,
      files: offer.files,
    };
    const elsewhere = await this.#sharing?.prepareElsewhere?.(generation) ?? [];
    if (elsewhere.length > 0) {
      return this.#recordRejection({
        at: Date.now(),
        hash,
        source: offer.source,
        number,
        problems: elsewhere,
      });
    }
    this.#current = generation;
    if (this.#sharing) Atomics.store(this.#sharing.pointer, 0, number);
    this.#goodAt = ++this.#decisions;
    for (const listener of this.#listeners) listener(generation);
    this.#notify();
    return { outcome: "loaded", generation, recovered };
  }
}

/**
 * {@link buildRegistry}, with anything it throws turned into a problem: a set that cannot be
 * built is a rejection, never a failed reload (issue 14: an alias bomb threw through every reload).
 */
async function buildSafely(
  dir: string,
  texts: ReadonlyMap<string, string>,
  previous: TenantRegistry,
): Promise<{ registry?: TenantRegistry; problems: ConfigProblem[] }> {
  try {
    return await buildRegistry(dir, texts, previous);
  } catch (error) {
    return { problems: [problemFromError(dir, error)] };
  }
}

/** `/v1/config`'s view of a store. */
export interface ConfigStatus {
  readonly generation: number;
  readonly hash: string;
  readonly loaded_at: string;
  readonly source: GenerationSource;
  readonly tenants: number;
  readonly files: number;
  readonly last_rejected: {
    readonly at: string;
    readonly generation: number;
    readonly hash: string;
    readonly source: GenerationSource;
    /** A later load succeeded or matched the live set: the problem is gone from the source. */
    readonly superseded: boolean;
    readonly problems: readonly {
      file: string;
      path: string;
      value?: unknown;
      message: string;
      at?: string;
    }[];
  } | null;
}

/** Renders a store's state for `/v1/config`. */
export function configStatus(
  store: ConfigStore,
  formatPath: (p: ConfigProblem) => string,
): ConfigStatus {
  const live = store.current;
  const rejected = store.lastRejected;
  return {
    generation: live.number,
    hash: live.hash,
    loaded_at: new Date(live.loadedAt).toISOString(),
    source: live.source,
    tenants: live.registry.tenants.length,
    files: live.texts.size,
    last_rejected: rejected
      ? {
        at: new Date(rejected.at).toISOString(),
        generation: rejected.number,
        hash: rejected.hash,
        source: rejected.source,
        superseded: store.rejectionSuperseded,
        problems: rejected.problems.map((p) => ({
          file: p.file,
          path: formatPath(p),
          ...(p.value === undefined ? {} : { value: p.value }),
          message: p.message,
          ...(p.at ? { at: p.at } : {}),
        })),
      }
      : null,
  };
}
