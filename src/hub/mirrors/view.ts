/**
 * The door view as the hub writes it: every slug with its strategy, and every enabled mirror with
 * its verdict — nothing else, so a door's compromise reveals slugs and public mirror hostnames
 * only. Mirrors are sorted by host and slugs by slug, and the hash is SHA-256 over canonical JSON
 * (object keys sorted at every level: `src/live/view_hash.ts`, which the door uses too), so the door
 * can rebuild a view from a delta and prove it holds the same bytes the hub hashed. The door reads
 * the format in `src/door/view.ts`; the end-to-end tests hold the two programs to it.
 *
 * @module
 */
import { canonicalJson, hashView, sortedView } from "../../live/view_hash.ts";
import type { Strategy } from "./schema.ts";
import type { Verdict } from "./verdict.ts";

export { canonicalJson, hashView, sortedView };

/** One mirror as a door sees it. */
export interface DoorMirror {
  readonly host: string;
  /** Where it is hosted (ISO 3166-1 alpha-2), or null when the registry does not say. */
  readonly region: string | null;
  readonly verdict: Verdict;
  /** When its last probe result came (ISO 8601), or null when none ever did. */
  readonly checked_at: string | null;
}

/** One slug as a door sees it. */
export interface DoorSlug {
  readonly slug: string;
  readonly strategy: Strategy;
  /** The mirrors it may send to, in preference order; null for every mirror in host order. */
  readonly mirrors: readonly string[] | null;
  readonly exclude_regions: readonly string[];
}

/** Everything a door holds. */
export interface DoorView {
  readonly slugs: readonly DoorSlug[];
  readonly mirrors: readonly DoorMirror[];
}

/** One answer of `GET /v1/doors/stream`. */
export type DoorAnswer =
  | { readonly type: "snapshot"; readonly hash: string; readonly view: DoorView }
  | {
    readonly type: "delta";
    readonly from: string;
    readonly hash: string;
    /** Mirrors added or changed since `from`. */
    readonly mirrors: readonly DoorMirror[];
    /** Hosts of mirrors gone since `from`. */
    readonly removed: readonly string[];
    /** The whole slug list, present only when it changed since `from`. */
    readonly slugs?: readonly DoorSlug[];
  }
  | { readonly type: "current"; readonly hash: string };

/**
 * The delta that turns `base` into `live`: changed and added mirrors, removed hosts, and the slug
 * list when it differs.
 */
export function diffViews(
  base: DoorView,
  live: DoorView,
): Pick<Extract<DoorAnswer, { type: "delta" }>, "mirrors" | "removed" | "slugs"> {
  const before = new Map(base.mirrors.map((m) => [m.host, canonicalJson(m)]));
  const hosts = new Set(live.mirrors.map((m) => m.host));
  const mirrors = live.mirrors.filter((m) => before.get(m.host) !== canonicalJson(m));
  const removed = base.mirrors.filter((m) => !hosts.has(m.host)).map((m) => m.host);
  const slugsChanged = canonicalJson(base.slugs) !== canonicalJson(live.slugs);
  return { mirrors, removed, ...(slugsChanged ? { slugs: live.slugs } : {}) };
}
