/**
 * The three ingress lanes, by name and by fixed index into the ledger's counters.
 *
 * @module
 */

/** Every lane Portcullis knows, in ledger index order. */
export const LANE_NAMES = ["public", "local_health", "provider_health"] as const;

/** One of the three ingress lanes. */
export type LaneName = typeof LANE_NAMES[number];

/** The lanes that may hold a private reserve. */
export const PROTECTED_LANES: readonly LaneName[] = ["local_health", "provider_health"];

/** The fixed ledger index of a lane. */
export function laneIndex(name: LaneName): number {
  return LANE_NAMES.indexOf(name);
}

/** True when `name` is a lane Portcullis knows. */
export function isLaneName(name: string): name is LaneName {
  return (LANE_NAMES as readonly string[]).includes(name);
}
