/**
 * The hub follower's hold on its generation cache: verifying it before its hash is sent to the
 * hub, writing the sets the edge accepted, and remembering what it last found or wrote (and the
 * last refusal), which `status().cache` shows. How the cache is laid out on disk and what
 * "verified" means is `cache.ts`; when to check and what a refusal makes the follower do is
 * `hub_client.ts`.
 *
 * Kept apart from the follower because this is the one part of its state about the disk rather
 * than the hub: a refused cache must not be trusted for a delta, and the note of it must outlive
 * the poll that found it until a set from the hub rewrites the cache.
 *
 * @module
 */
import {
  type CacheCheck,
  commitCache,
  commitStaged,
  stageCache,
  type StagedGeneration,
  verifyCache,
} from "./cache.ts";
import type { FileSet } from "../config/file_set.ts";
import { short } from "./cache_manifest.ts";
import { type Base, describeHubFailure } from "./hub_answer.ts";

/** What the edge last found in, or wrote to, its cache. */
interface CacheNote {
  readonly state: "none" | "verified" | "written" | "refused";
  readonly at: string;
  readonly hash?: string;
  readonly reason?: string;
}

/** One follower's cache folder, and what it last found there. */
export class FollowedCache {
  readonly #dir: string;
  readonly #log: (line: string) => void;
  #note: CacheNote | undefined;
  #lastRefused: { at: string; reason: string } | undefined;

  /**
   * @param dir the cache folder
   * @param log where a refusal is logged
   */
  constructor(dir: string, log: (line: string) => void) {
    this.#dir = dir;
    this.#log = log;
  }

  /** The last check refused the cache, and no set has been written to it since. */
  get refused(): boolean {
    return this.#note?.state === "refused";
  }

  /**
   * Verifies the cache before its hash is sent. At start the cached set is the base when it is
   * the live one; later (after a failure) `held` stays the base when the cache still holds the
   * live set. A refusal is logged and leaves no base: the next poll asks for a snapshot.
   *
   * @param live the hash of the store's live set ("" for none)
   * @param start whether this is the check at start (any cached set is read, not only `live`)
   * @param held the base the follower holds (checks after start)
   */
  async check(live: string, start: boolean, held?: Base): Promise<Base | undefined> {
    const check = await verifyCache(this.#dir, start ? undefined : live)
      .catch((error): CacheCheck => ({
        state: "refused",
        reason: `unchecked (${describeHubFailure(error)})`,
      }));
    const at = new Date().toISOString();
    if (check.state === "refused") {
      this.#lastRefused = { at, reason: check.reason };
      this.#note = { state: "refused", ...this.#lastRefused };
      this.#log(
        `portcullis: cache ${this.#dir} refused: ${check.reason}; asking the hub for a snapshot`,
      );
      return undefined;
    }
    this.#note = check.state === "none"
      ? { state: "none", at }
      : { state: "verified", at, hash: check.hash };
    if (!start) return held;
    return check.state === "verified" && check.hash === live && live !== ""
      ? { hash: check.hash, files: check.files }
      : undefined;
  }

  /**
   * Writes a set to a new cache folder and points the cache at it.
   *
   * @throws {CacheWriteError} when the folder or the pointer cannot be written
   */
  async write(files: FileSet, hash: string): Promise<void> {
    await commitCache(this.#dir, await stageCache(this.#dir, files), hash);
    this.#note = { state: "written", at: new Date().toISOString(), hash };
  }

  /**
   * Makes a staged generation (a set the store has taken) the cache's.
   *
   * @throws {CacheWriteError} when the pointer cannot be renamed; the note then says the cache is
   *   refused (it names another set than the live one), so the follower rewrites it
   */
  async commit(staged: StagedGeneration, hash: string): Promise<void> {
    const at = new Date().toISOString();
    try {
      await commitStaged(this.#dir, staged);
    } catch (error) {
      const why = describeHubFailure(error);
      this.#lastRefused = { at, reason: `set ${short(hash)} is live, but: ${why}` };
      this.#note = { state: "refused", ...this.#lastRefused };
      throw error;
    }
    this.#note = { state: "written", at, hash };
  }

  /** What the cache last held, and the last refusal, for `status().cache`; null before a check. */
  status(): Record<string, unknown> | null {
    return this.#note ? { ...this.#note, last_refused: this.#lastRefused ?? null } : null;
  }
}
