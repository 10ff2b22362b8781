/**
 * How a hub and a door agree on the door view they hold (`/v1/doors/stream`): the view in one
 * canonical order (mirrors by host, slugs by slug, in code-unit order, the same on every machine),
 * written as JSON with every object's keys sorted, hashed with SHA-256. The hub sends the hash with
 * every answer; the door rebuilds the view, hashes it the same way and refuses a view whose hash
 * differs. One implementation for both sides, so the two cannot drift.
 *
 * @module
 */
import { createHash } from "node:crypto";

/** What the canonical order reads of a view. */
export interface OrderedView {
  readonly slugs: readonly { readonly slug: string }[];
  readonly mirrors: readonly { readonly host: string }[];
}

/**
 * JSON with every object's keys sorted, so equal values always give equal text.
 *
 * @example
 * ```ts
 * import { canonicalJson } from "./view_hash.ts";
 * canonicalJson({ b: [2, { d: 1, c: null }], a: "x" }); // '{"a":"x","b":[2,{"c":null,"d":1}]}'
 * ```
 */
export function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(",")}]`;
  if (value !== null && typeof value === "object") {
    const record = value as Record<string, unknown>;
    const keys = Object.keys(record).filter((key) => record[key] !== undefined).sort();
    return `{${
      keys.map((key) => `${JSON.stringify(key)}:${canonicalJson(record[key])}`).join(",")
    }}`;
  }
  return JSON.stringify(value);
}

/** The view's hash: SHA-256 of its canonical JSON, in hex. */
export function hashView(view: OrderedView): string {
  return createHash("sha256").update(canonicalJson(view)).digest("hex");
}

/** A view in canonical order: mirrors by host, slugs by slug. */
export function sortedView<T extends OrderedView>(view: T): T {
  return {
    ...view,
    slugs: [...view.slugs].sort((a, b) => compare(a.slug, b.slug)),
    mirrors: [...view.mirrors].sort((a, b) => compare(a.host, b.host)),
  };
}

/** Code-unit order, the same on every machine (no locale). */
function compare(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}
