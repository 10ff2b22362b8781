/**
 * Response counters per lane: status classes, withheld responses (dropped or held connections),
 * and protocol errors answered before a request was parsed. Fixed size; no per-request records.
 *
 * @module
 */
import { LANE_NAMES, laneIndex, type LaneName } from "../ledger/lane.ts";

/** Status classes counted, in order. */
export const STATUS_CLASSES = ["1xx", "2xx", "3xx", "4xx", "5xx"] as const;
const STRIDE = STATUS_CLASSES.length + 2;
const WITHHELD = STATUS_CLASSES.length;
const PROTOCOL = STATUS_CLASSES.length + 1;

/** Per-lane response counters. */
export class ResponseStats {
  readonly #counts = new Float64Array(LANE_NAMES.length * STRIDE);

  /** Counts a response with `status` on `lane`. */
  response(lane: LaneName, status: number): void {
    const cls = Math.min(Math.max(Math.floor(status / 100), 1), 5) - 1;
    this.#counts[laneIndex(lane) * STRIDE + cls]++;
  }

  /** Counts a request answered by closing or holding the connection instead of a response. */
  withheld(lane: LaneName): void {
    this.#counts[laneIndex(lane) * STRIDE + WITHHELD]++;
  }

  /** Counts a protocol error answered before any request was parsed (400, 408, 431). */
  protocolError(lane: LaneName): void {
    this.#counts[laneIndex(lane) * STRIDE + PROTOCOL]++;
  }

  /** Reads one lane's counters. */
  read(lane: LaneName): {
    responses: Record<typeof STATUS_CLASSES[number], number>;
    withheld: number;
    protocol_errors: number;
  } {
    const base = laneIndex(lane) * STRIDE;
    const responses = {} as Record<typeof STATUS_CLASSES[number], number>;
    STATUS_CLASSES.forEach((cls, i) => responses[cls] = this.#counts[base + i]);
    return {
      responses,
      withheld: this.#counts[base + WITHHELD],
      protocol_errors: this.#counts[base + PROTOCOL],
    };
  }
}
