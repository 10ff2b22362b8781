/**
 * The lane registry: every lane Portcullis serves, in ledger order. Lanes never import each other;
 * this list is the one place that names them all.
 *
 * @module
 */
import type { EdgeServices } from "../src/pipeline/services.ts";
import type { LaneDescriptor } from "../src/pipeline/lane_table.ts";
import { localHealthLane } from "./local_health.ts";
import { providerHealthLane } from "./provider_health.ts";
import { publicLane } from "./public.ts";

/** Every lane, in ledger order. */
export const LANES: readonly LaneDescriptor<EdgeServices>[] = [
  publicLane,
  localHealthLane,
  providerHealthLane,
];

export { localHealthLane, providerHealthLane, publicLane };
