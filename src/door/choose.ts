/**
 * Which mirror a slug sends a reader to. The rule, in order:
 *
 * 1. **Eligible**: the slug's mirrors (in the order the slug lists them; every mirror of the view
 *    in host order when it lists none) that are in the view — the hub leaves disabled mirrors out
 *    — minus those hosted in a region the slug excludes. A mirror whose region is not written is
 *    not chosen for a slug that excludes any region: nobody can say it is not hosted there.
 * 2. **Preferred tier**: the eligible `live` mirrors; if none, the `degraded` ones; `blocked` never.
 *    `unknown` ones only when no mirror of the whole view has ever had a probe result
 *    (`checked_at` is null for all: the hub is not probing, or has not finished its first round) —
 *    so a door works without a prober, but once verdicts exist a mirror nobody has checked, or
 *    whose results went stale, is not where a reader is sent.
 * 3. **Strategy** within the tier: `first` (the first in eligible order), `random`, or
 *    `least_recent` (the mirror this slug sent to least recently; one never used first, ties in
 *    eligible order) — a round-robin that survives mirrors coming and going.
 *
 * None left: no mirror, and the door answers its cover, exactly as for a path that is no slug.
 *
 * @module
 */
import type { DoorMirror, DoorSlug, DoorView } from "./view.ts";

/** The eligible mirrors of a slug, in its order (step 1 of the module doc). */
export function eligibleMirrors(slug: DoorSlug, view: DoorView): DoorMirror[] {
  const byHost = new Map(view.mirrors.map((m) => [m.host, m]));
  const listed = slug.mirrors === null
    ? view.mirrors
    : slug.mirrors.flatMap((host) => byHost.get(host) ?? []);
  if (slug.exclude_regions.length === 0) return [...listed];
  const excluded = new Set(slug.exclude_regions);
  return listed.filter((m) => m.region !== null && !excluded.has(m.region));
}

/** True when some mirror of the view has had a probe result (step 2 of the module doc). */
export function hasVerdicts(view: DoorView): boolean {
  return view.mirrors.some((m) => m.checked_at !== null);
}

/** The preferred tier among eligible mirrors (step 2 of the module doc). */
export function preferredTier(eligible: readonly DoorMirror[], judged: boolean): DoorMirror[] {
  for (const verdict of ["live", "degraded"] as const) {
    const tier = eligible.filter((m) => m.verdict === verdict);
    if (tier.length > 0) return tier;
  }
  return judged ? [] : eligible.filter((m) => m.verdict === "unknown");
}

/** Picks mirrors for slugs, remembering what `least_recent` needs. */
export class MirrorChooser {
  /** For each slug, the sequence number of each host's last use. */
  readonly #used = new Map<string, Map<string, number>>();
  readonly #random: () => number;
  #sequence = 0;

  /** @param options the random source for `random` (tests inject one) */
  constructor(options: { readonly random?: () => number } = {}) {
    this.#random = options.random ?? Math.random;
  }

  /**
   * The host to send a reader of `slug` to, or undefined when no mirror is eligible.
   *
   * @param judged {@link hasVerdicts} of the view (computed once per view)
   */
  choose(slug: DoorSlug, view: DoorView, judged: boolean): string | undefined {
    const tier = preferredTier(eligibleMirrors(slug, view), judged);
    if (tier.length === 0) return undefined;
    if (slug.strategy === "first") return tier[0].host;
    if (slug.strategy === "random") {
      return tier[Math.min(tier.length - 1, Math.floor(this.#random() * tier.length))].host;
    }
    const used = this.#used.get(slug.slug) ?? new Map<string, number>();
    this.#used.set(slug.slug, used);
    let pick = tier[0];
    for (const m of tier) {
      if ((used.get(m.host) ?? -1) < (used.get(pick.host) ?? -1)) pick = m;
    }
    used.set(pick.host, this.#sequence++);
    return pick.host;
  }

  /** Forgets slugs no longer in the view (their rotation starts afresh if they return). */
  keepOnly(slugs: ReadonlySet<string>): void {
    for (const slug of [...this.#used.keys()]) if (!slugs.has(slug)) this.#used.delete(slug);
  }
}
