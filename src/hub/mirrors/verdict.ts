/**
 * A mirror's verdict from its last probe result: what the regions that answered said, and how old
 * the answer is. Kept a pure function of (result, now, interval) so every combination is a test
 * case, and so the hub can recompute every verdict after each round without remembering more than
 * the last result of each mirror.
 *
 * A region that did not answer (check-host.net's node was busy, or the check timed out) is left
 * out rather than counted as failed: a missing answer says nothing about whether readers in that
 * region can reach the mirror.
 *
 * @module
 */

/** How a mirror fared: reached from every region that answered, some, none, or no recent word. */
export type Verdict = "live" | "degraded" | "blocked" | "unknown";

/** Every verdict, in the order doors prefer them. */
export const VERDICTS: readonly Verdict[] = ["live", "degraded", "blocked", "unknown"];

/** What one region said about a mirror. */
export type RegionAnswer = "ok" | "failed";

/** One probe of one mirror: when it finished, and each answering region's word. */
export interface ProbeResult {
  /** Epoch milliseconds. */
  readonly at: number;
  readonly regions: ReadonlyMap<string, RegionAnswer>;
}

/** A result older than this many intervals no longer says anything. */
export const STALE_INTERVALS = 3;

/**
 * The verdict of one mirror.
 *
 * - `unknown`: no result, no region answered, or the result is older than 3 intervals;
 * - `live`: every region that answered says ok;
 * - `blocked`: regions answered and none says ok;
 * - `degraded`: otherwise (some ok, some failed).
 *
 * @param result the mirror's last probe result, if any
 * @param clock the time now (epoch ms) and the prober's interval
 * @example
 * ```ts
 * import { verdictOf } from "./verdict.ts";
 * const regions = new Map([["de1", "ok" as const], ["ir1", "failed" as const]]);
 * verdictOf({ at: 0, regions }, { now: 1000, intervalMs: 60000 }); // "degraded"
 * verdictOf({ at: 0, regions }, { now: 180001, intervalMs: 60000 }); // "unknown"
 * ```
 */
export function verdictOf(
  result: ProbeResult | undefined,
  clock: { readonly now: number; readonly intervalMs: number },
): Verdict {
  if (!result || result.regions.size === 0) return "unknown";
  if (clock.now - result.at > STALE_INTERVALS * clock.intervalMs) return "unknown";
  let ok = 0;
  for (const answer of result.regions.values()) if (answer === "ok") ok++;
  if (ok === result.regions.size) return "live";
  return ok === 0 ? "blocked" : "degraded";
}
