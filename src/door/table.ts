/**
 * What the door serves from: the view held, with its slug matcher and whether it carries verdicts,
 * swapped whole when a new view arrives (a request sees one view, never half of two). Resolving a
 * path segment always runs the matcher, even with no view and for `/`, so the work a request
 * costs does not depend on what it asked.
 *
 * @module
 */
import { hasVerdicts, MirrorChooser } from "./choose.ts";
import { SlugMatcher } from "./matcher.ts";
import type { HeldView, Verdict } from "./view.ts";

/** Where the view held came from. */
export type ViewSource = "hub" | "cache";

interface Live {
  readonly held: HeldView;
  readonly matcher: SlugMatcher;
  readonly judged: boolean;
  readonly source: ViewSource;
  readonly at: number;
}

/** The door's live view and what answers from it. */
export class DoorTable {
  readonly #chooser: MirrorChooser;
  #live: Live | undefined;
  #empty = new SlugMatcher([]);

  /** @param options the random source of the `random` strategy */
  constructor(options: { readonly random?: () => number } = {}) {
    this.#chooser = new MirrorChooser(options);
  }

  /** The view held, if any. */
  get held(): HeldView | undefined {
    return this.#live?.held;
  }

  /** Makes `held` the view served. */
  swap(held: HeldView, source: ViewSource): void {
    const slugs = held.view.slugs.map((s) => s.slug);
    this.#live = {
      held,
      matcher: new SlugMatcher(slugs),
      judged: hasVerdicts(held.view),
      source,
      at: Date.now(),
    };
    this.#chooser.keepOnly(new Set(slugs));
  }

  /** Drops the view: every path answers the cover. */
  clear(): void {
    this.#live = undefined;
    this.#empty = new SlugMatcher([]);
  }

  /**
   * The mirror host a path segment sends to: undefined for a segment that is no slug, and for a
   * slug with no eligible mirror (see `choose.ts`).
   */
  resolve(segment: string): string | undefined {
    const live = this.#live;
    if (!live) {
      this.#empty.match(segment);
      return undefined;
    }
    const index = live.matcher.match(segment);
    if (index < 0) return undefined;
    return this.#chooser.choose(live.held.view.slugs[index], live.held.view, live.judged);
  }

  /** The view's state for `/v1/status`: counts only, never a slug. */
  status(): Record<string, unknown> {
    const live = this.#live;
    const verdicts: Record<Verdict, number> = { live: 0, degraded: 0, blocked: 0, unknown: 0 };
    for (const m of live?.held.view.mirrors ?? []) verdicts[m.verdict]++;
    return {
      hash: live?.held.hash ?? null,
      source: live?.source ?? null,
      since: live ? new Date(live.at).toISOString() : null,
      slugs: live?.held.view.slugs.length ?? 0,
      mirrors: live?.held.view.mirrors.length ?? 0,
      verdicts,
    };
  }
}
