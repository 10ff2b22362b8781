/**
 * Matching a path segment against the slugs in constant time. The slugs are a door's one secret:
 * a prober that could time the match could learn a slug's first characters, or tell a near miss
 * from a far one, or learn how many slugs sit before the one it hit. So each slug is held as an
 * HMAC-SHA-256 digest under a random key made with the matcher (it never leaves the process), the
 * candidate is hashed once under the same key, and its digest is compared with every slug's by
 * `timingSafeEqual` — all of them, with no early exit, the hit's position folded in with bitwise
 * OR. Comparing digests rather than slugs also hides the slug's length: every comparison is 32
 * bytes.
 *
 * `tests/door_timing_test.ts` holds a hit on the first slug, a hit on the last slug and a miss to a
 * signed-rank test.
 *
 * @module
 */
import type { Buffer } from "node:buffer";
import { createHmac, randomBytes, timingSafeEqual } from "node:crypto";

/** The slugs of one view, ready to be matched in constant time. */
export class SlugMatcher {
  readonly #key: Buffer = randomBytes(32);
  readonly #digests: readonly Buffer[];

  /** @param slugs the slugs, in the order {@link match} reports positions in */
  constructor(slugs: readonly string[]) {
    this.#digests = slugs.map((slug) => this.#digest(slug));
  }

  /** How many slugs it holds. */
  get size(): number {
    return this.#digests.length;
  }

  /**
   * The position of the slug equal to `candidate`, or -1; the same work whatever the answer.
   *
   * @example
   * ```ts
   * import { SlugMatcher } from "./matcher.ts";
   * const matcher = new SlugMatcher(["reading-room-1", "reading-room-2"]);
   * matcher.match("reading-room-2"); // 1
   * matcher.match("reading-room-3"); // -1
   * ```
   */
  match(candidate: string): number {
    const digest = this.#digest(candidate);
    let found = 0;
    let position = 0;
    for (let i = 0; i < this.#digests.length; i++) {
      const hit = timingSafeEqual(this.#digests[i], digest) ? 1 : 0;
      found |= hit;
      position |= -hit & i;
    }
    return found === 1 ? position : -1;
  }

  #digest(text: string): Buffer {
    return createHmac("sha256", this.#key).update(text).digest();
  }
}
