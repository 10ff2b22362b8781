/**
 * Response counters per lane: status classes, withheld responses (dropped or held connections),
 * protocol errors answered before a request was parsed, replies cut off because the client did not
 * take them (or a tunnel idled out), and pipelined requests dropped unserved because their client
 * left. Fixed size; no per-request records.
 *
 * @module
 */
import { LANE_NAMES, laneIndex, type LaneName } from "../ledger/lane_names.ts";

/** Status classes counted, in order. */
export const STATUS_CLASSES = ["1xx", "2xx", "3xx", "4xx", "5xx"] as const;
/** Why a reply was cut off after it started. */
export const CUT_REASONS = ["send_timeout", "tunnel_idle"] as const;
/** A reason in {@link CUT_REASONS}. */
export type CutReason = typeof CUT_REASONS[number];
const STRIDE = STATUS_CLASSES.length + 3 + CUT_REASONS.length;
const WITHHELD = STATUS_CLASSES.length;
const PROTOCOL = STATUS_CLASSES.length + 1;
const ABANDONED = STATUS_CLASSES.length + 2;
const CUT = STATUS_CLASSES.length + 3;
const STRIPE_LENGTH = LANE_NAMES.length * STRIDE;
const STRIPE_BYTES = STRIPE_LENGTH * 8;

/**
 * Per-lane response counters. With request workers, every worker writes its own stripe of one
 * shared buffer and a reading sums the stripes, so any worker reports the whole process.
 *
 * @internal
 */
export class ResponseStats {
  readonly #all: Float64Array;
  readonly #counts: Float64Array;

  /**
   * @param shared the buffer from {@link ResponseStats.allocate} (default: a private one)
   * @param stripe this worker's stripe in it
   */
  constructor(shared?: SharedArrayBuffer | ArrayBuffer, stripe = 0) {
    this.#all = new Float64Array(shared ?? new ArrayBuffer(STRIPE_BYTES));
    const stripes = this.#all.length / STRIPE_LENGTH;
    if (!Number.isInteger(stripe) || stripe < 0 || stripe >= stripes) {
      throw new RangeError(`Stats stripe ${stripe} is outside 0..${stripes - 1}`);
    }
    this.#counts = this.#all.subarray(stripe * STRIPE_LENGTH, (stripe + 1) * STRIPE_LENGTH);
  }

  /** A shared buffer for `stripes` workers. */
  static allocate(stripes: number): SharedArrayBuffer {
    return new SharedArrayBuffer(STRIPE_BYTES * stripes);
  }

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

  /** Counts a reply cut off after it started (a slow reader, an idle tunnel). */
  cut(lane: LaneName, reason: CutReason): void {
    this.#counts[laneIndex(lane) * STRIDE + CUT + CUT_REASONS.indexOf(reason)]++;
  }

  /** Counts pipelined requests dropped unserved because their client left. */
  abandoned(lane: LaneName, count: number): void {
    this.#counts[laneIndex(lane) * STRIDE + ABANDONED] += count;
  }

  /** Reads one lane's counters. */
  read(lane: LaneName): {
    responses: Record<typeof STATUS_CLASSES[number], number>;
    withheld: number;
    protocol_errors: number;
    abandoned: number;
    cut: Record<CutReason, number>;
  } {
    const base = laneIndex(lane) * STRIDE;
    const sum = (offset: number) => {
      let total = 0;
      for (let at = base + offset; at < this.#all.length; at += STRIPE_LENGTH) {
        total += this.#all[at];
      }
      return total;
    };
    const responses = {} as Record<typeof STATUS_CLASSES[number], number>;
    STATUS_CLASSES.forEach((cls, i) => responses[cls] = sum(i));
    const cut = {} as Record<CutReason, number>;
    CUT_REASONS.forEach((reason, i) => cut[reason] = sum(CUT + i));
    return {
      responses,
      withheld: sum(WITHHELD),
      protocol_errors: sum(PROTOCOL),
      abandoned: sum(ABANDONED),
      cut,
    };
  }
}
