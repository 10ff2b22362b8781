/**
 * The door's side of the door stream's format: an answer is checked for shape, the view it
 * describes is rebuilt (a snapshot whole, a delta on top of the view held), and the rebuilt view
 * is hashed as the hub hashed it — SHA-256 of canonical JSON, mirrors sorted by host and slugs by
 * slug — and must equal the hash the hub sent. A view that hashes otherwise is dropped and the next
 * poll asks for a snapshot.
 *
 * The hub writes this format in `src/hub/mirrors/view.ts`; the two programs are peers and share
 * no module, so each side states it, and the end-to-end tests (`tests/door_*_test.ts`) hold them
 * to one. Items are read as loose objects: a field a newer hub adds is kept, so the hash still
 * covers every byte the hub hashed.
 *
 * @module
 */
import * as v from "valibot";
import { hashView, sortedView } from "../live/view_hash.ts";

export { hashView, sortedView };

/** How a mirror fared in the hub's last probes. */
export type Verdict = "live" | "degraded" | "blocked" | "unknown";

const DoorMirrorSchema = v.looseObject({
  host: v.string(),
  region: v.nullable(v.string()),
  verdict: v.picklist(["live", "degraded", "blocked", "unknown"]),
  checked_at: v.nullable(v.string()),
});

const DoorSlugSchema = v.looseObject({
  slug: v.string(),
  strategy: v.picklist(["first", "random", "least_recent"]),
  mirrors: v.nullable(v.array(v.string())),
  exclude_regions: v.array(v.string()),
});

const ViewSchema = v.looseObject({
  slugs: v.array(DoorSlugSchema),
  mirrors: v.array(DoorMirrorSchema),
});

const Hash = v.pipe(v.string(), v.regex(/^[0-9a-f]{64}$/));

const AnswerSchema = v.variant("type", [
  v.looseObject({ type: v.literal("snapshot"), hash: Hash, view: ViewSchema }),
  v.looseObject({
    type: v.literal("delta"),
    from: Hash,
    hash: Hash,
    mirrors: v.array(DoorMirrorSchema),
    removed: v.array(v.string()),
    slugs: v.optional(v.array(DoorSlugSchema)),
  }),
  v.looseObject({ type: v.literal("current"), hash: Hash }),
]);

/** One mirror as the door holds it. */
export type DoorMirror = v.InferOutput<typeof DoorMirrorSchema>;
/** One slug as the door holds it. */
export type DoorSlug = v.InferOutput<typeof DoorSlugSchema>;
/** The whole view. */
export type DoorView = v.InferOutput<typeof ViewSchema>;
/** One answer of the hub's door stream. */
export type DoorAnswer = v.InferOutput<typeof AnswerSchema>;

/** A view and its hash: what the door serves, caches, and polls with. */
export interface HeldView {
  readonly hash: string;
  readonly view: DoorView;
}

/**
 * Reads one answer's JSON.
 *
 * @throws {Error} when it is not JSON or not an answer's shape
 */
export function parseAnswer(text: string): DoorAnswer {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    throw new Error(`the hub's answer is not JSON (${text.length} bytes)`);
  }
  const parsed = v.safeParse(AnswerSchema, value);
  if (!parsed.success) throw new Error("the hub's answer is not a door stream answer");
  return parsed.output;
}

/** Checks a cached view's shape (the cache is read back from disk). */
export function isView(value: unknown): value is DoorView {
  return v.is(ViewSchema, value);
}

/**
 * Rebuilds the view a snapshot or delta describes and checks it against the hash the hub sent.
 *
 * @param base the view held, which a delta must be against
 * @throws {Error} when a delta is against another view, or the view hashes to another value
 */
export function rebuildView(answer: DoorAnswer, base: HeldView | undefined): HeldView {
  if (answer.type === "current") throw new Error("the hub's current view is not the one held");
  let view: DoorView;
  if (answer.type === "snapshot") view = answer.view;
  else {
    if (answer.from !== base?.hash) {
      throw new Error("the hub sent a delta against a view this door does not hold");
    }
    const mirrors = new Map(base.view.mirrors.map((m) => [m.host, m]));
    for (const host of answer.removed) mirrors.delete(host);
    for (const mirror of answer.mirrors) mirrors.set(mirror.host, mirror);
    view = { slugs: answer.slugs ?? base.view.slugs, mirrors: [...mirrors.values()] };
  }
  const sorted = sortedView(view);
  const hash = hashView(sorted);
  if (hash !== answer.hash) {
    throw new Error(
      `the received view hashes to ${hash.slice(0, 12)}, not ${answer.hash.slice(0, 12)}`,
    );
  }
  return { hash, view: sorted };
}
