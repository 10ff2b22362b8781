/**
 * How one end of a WebSocket stream (`ws_stream.ts`) paces what it owes its peer. Issue 31: after
 * the dial op a node sent 101 MB of 125-byte pings from a socket with a 4 KiB receive buffer that
 * never read, and the hub queued a pong for every one — its RSS went from 88 to 617 MB in 1.5 s and
 * stayed there. Data never did that: a data write completes only when the transport has taken it,
 * and a full readable side pauses the transport. Control frames answer the peer, so the peer's own
 * reading must pace them:
 *
 * - While the transport holds more than `controlBoundBytes` unsent, a ping is not answered at
 *   once: the latest one is answered when the transport drains (RFC 6455 §5.5.3 lets an endpoint
 *   answer only the most recent ping), and until then the transport is not read. A peer that pings
 *   and never reads stops being read from once its pongs fill the kernel's buffers (measured: about
 *   9.5 MB of pings taken, against 101 MB before), and its own send buffer fills. Every other ping
 *   is answered at once, so that it is the peer's reading that paces them: answering only the
 *   latest ping of each read would keep a peer that never reads being read for gigabytes.
 * - A pong owed longer than `pongDeadlineMs` gives the peer up (the stream closes it with 1008):
 *   a peer that has not read for that long is gone or hostile, and holds a socket and its kernel
 *   buffers.
 * - Control frames written are counted until the transport has written them ({@link queued}),
 *   for the stream's cap on bytes held per connection.
 *
 * Reading is paused for a pong owed, never because data fills the write side: both ends of a
 * tunnel run this code, and two ends that each stopped reading while their own writes were full
 * would wait on each other for ever under traffic both ways. Neither end of Portcullis pings, so
 * an end that pings is not a Portcullis edge or hub.
 *
 * What the peer sends without data is budgeted ({@link ControlBudget}). An attack on the pacing
 * above sent pongs nobody asked for: nothing answers them, so nothing paced them, and one node
 * certificate had the hub read 5.8 GB of them in 40 s (RSS 174 → 290 MB); two such tunnels made
 * another node's `/v1/pool` take 1,037 ms at the median instead of 12 ms. Empty binary frames
 * reach no reader either, and a peer that reads every pong can ping at line rate. So pings, pongs
 * and empty data frames spend tokens of a per-connection bucket ({@link CONTROL_FRAME_BUDGET}:
 * far above anything a keep-alive needs, since Portcullis itself sends none); a peer over it is
 * closed with 1008 and read no further.
 *
 * @module
 */
import type { Socket } from "node:net";
import { type CompiledRate, compileRate, spendConnectionToken } from "../ledger/rate_budget.ts";

/** Frames without data a peer may send: `burst` at once, then `per_second`. */
export const CONTROL_FRAME_BUDGET = Object.freeze({ per_second: 16, burst: 64 });

/** The close reason for a peer over its {@link ControlBudget}. */
export const OVER_CONTROL_BUDGET = "Too many frames without data";

/**
 * A peer's budget for frames that carry no data (pings, pongs, empty data frames): a token bucket
 * per connection.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { ControlBudget } from "./ws_pacing.ts";
 * let now = 0;
 * const budget = new ControlBudget({ per_second: 1, burst: 2 }, () => now);
 * assert.equal(budget.spend(), true);
 * assert.equal(budget.spend(), true);
 * assert.equal(budget.spend(), false);
 * now = 1000;
 * assert.equal(budget.spend(), true);
 * ```
 */
export class ControlBudget {
  readonly #rate: CompiledRate;
  readonly #clock: () => number;
  readonly #bucket: { rateTat?: number } = {};

  /**
   * @param budget refill per second and burst (default {@link CONTROL_FRAME_BUDGET})
   * @param clock milliseconds, monotonic
   */
  constructor(
    budget: { readonly per_second: number; readonly burst: number } = CONTROL_FRAME_BUDGET,
    clock: () => number = () => performance.now(),
  ) {
    this.#rate = compileRate(budget);
    this.#clock = clock;
  }

  /** Spends one frame's token: false when the peer is over its budget. */
  spend(): boolean {
    return spendConnectionToken(this.#bucket, this.#rate, this.#clock()) === 0;
  }
}

/** What the pacing writes with and how it gives a peer up. */
export interface PacingOptions {
  /** Unsent bytes above which a pong waits for the transport to drain. */
  readonly controlBoundBytes: number;
  /** The longest a pong may stay owed before the peer is given up (none: no bound). */
  readonly pongDeadlineMs?: number;
  /** Frames a pong with `payload` (masked or not, as the side needs). */
  readonly pongFrame: (payload: Uint8Array) => Uint8Array;
  /** Closes the connection because the peer does not read. */
  readonly giveUp: (reason: string) => void;
}

/** The pacing of one attached transport; see the module doc. */
export class ControlPacing {
  readonly #transport: Socket;
  readonly #options: PacingOptions;
  #queued = 0;
  /** The payload of the latest ping not yet answered (the transport was full). */
  #owed?: Uint8Array;
  /** A pong is owed: the transport is not read until it drains. */
  #pongHeld = false;
  /** The readable side is full: the transport is not read until it is read from. */
  #readHeld = false;
  #deadline?: ReturnType<typeof setTimeout>;

  /** @param transport the socket the frames go over (its `drain` ends a hold) */
  constructor(transport: Socket, options: PacingOptions) {
    this.#transport = transport;
    this.#options = options;
    transport.on("drain", () => this.#drained());
    transport.once("close", () => clearTimeout(this.#deadline));
  }

  /** Control-frame bytes handed to the transport and not yet written by it. */
  get queued(): number {
    return this.#queued;
  }

  /** Writes a control (or text) frame, counted until the transport has written it. */
  write(frame: Uint8Array): void {
    const transport = this.#transport;
    if (transport.destroyed || transport.writableEnded) return;
    this.#queued += frame.length;
    transport.write(frame, () => this.#queued -= frame.length);
  }

  /** A ping arrived: answered now, or — the transport full — its latest answered on drain. */
  ping(payload: Uint8Array): void {
    const transport = this.#transport;
    const full = transport.writableNeedDrain &&
      transport.writableLength > this.#options.controlBoundBytes;
    if (!full && !this.#pongHeld) return this.write(this.#options.pongFrame(payload));
    this.#owed = payload;
    if (this.#pongHeld) return;
    this.#pongHeld = true;
    const deadline = this.#options.pongDeadlineMs;
    if (deadline !== undefined) {
      this.#deadline = setTimeout(() => {
        this.#options.giveUp(`A ping unanswered for ${deadline} ms: the peer does not read`);
      }, deadline);
    }
    this.#reading();
  }

  /** The readable side is full (`true`) or was read from (`false`). */
  readFull(full: boolean): void {
    this.#readHeld = full;
    this.#reading();
  }

  /** The transport took everything: the owed pong goes out, and reading goes on. */
  #drained(): void {
    clearTimeout(this.#deadline);
    const owed = this.#owed;
    this.#owed = undefined;
    this.#pongHeld = false;
    if (owed) this.write(this.#options.pongFrame(owed));
    this.#reading();
  }

  /** Reads the transport unless the readable side is full or a pong is owed. */
  #reading(): void {
    if (this.#readHeld || this.#pongHeld) this.#transport.pause();
    else this.#transport.resume();
  }
}
