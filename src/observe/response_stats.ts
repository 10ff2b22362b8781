/**
 * Response counters per lane: withheld responses (dropped or held connections), protocol errors
 * answered before a request was parsed, replies cut off because the client did not take them (or a
 * tunnel idled out), pipelined requests dropped unserved because their client left, and owned
 * connections that ended on a socket error (a client's reset: that connection alone ends). Fixed
 * size; no per-request records. Requests by status class are counted once, per request, in
 * `request_metrics.ts` (`portcullis_requests_total`).
 *
 * @module
 */
import { LANE_NAMES, laneIndex, type LaneName } from "../ledger/lane_names.ts";

/** Why a reply was cut off after it started. */
export const CUT_REASONS = ["send_timeout", "tunnel_idle"] as const;
/** A reason in {@link CUT_REASONS}. */
export type CutReason = typeof CUT_REASONS[number];
const WITHHELD = 0;
const PROTOCOL = 1;
const ABANDONED = 2;
const CONNECTION_ERROR = 3;
const CUT = 4;
const STRIDE = CUT + CUT_REASONS.length;
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

  /** Counts a request answered by closing or holding the connection instead of a response. */
  withheld(lane: LaneName): void {
    this.#counts[laneIndex(lane) * STRIDE + WITHHELD]++;
  }

  /**
   * Counts a protocol error answered before any request was parsed (400, 408, 431), or a request
   * refused before the request path because nothing could frame what follows it.
   */
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

  /**
   * Counts a connection the transport owned (an upgrade socket, a tunnel, a raw reply's socket)
   * that ended on a socket error — a reset, a broken pipe — which ended that connection alone.
   */
  connectionError(lane: LaneName): void {
    this.#counts[laneIndex(lane) * STRIDE + CONNECTION_ERROR]++;
  }

  /** Reads one lane's counters. */
  read(lane: LaneName): {
    withheld: number;
    protocol_errors: number;
    abandoned: number;
    connection_errors: number;
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
    const cut = {} as Record<CutReason, number>;
    CUT_REASONS.forEach((reason, i) => cut[reason] = sum(CUT + i));
    return {
      withheld: sum(WITHHELD),
      protocol_errors: sum(PROTOCOL),
      abandoned: sum(ABANDONED),
      connection_errors: sum(CONNECTION_ERROR),
      cut,
    };
  }
}
