/**
 * The ledger's state as fixed-size integer arrays, so that several request workers can share one
 * ledger through `SharedArrayBuffer`s:
 *
 * - **gauges** (`Int32Array`, updated with `Atomics` compare-and-swap): slots in use, bytes in use,
 *   open connections — the numbers admission decisions depend on;
 * - **counters** (`Float64Array`, one stripe per worker; each stripe has a single writer, readers
 *   sum the stripes): admitted, denied, overloads, releases — exact up to 2^53;
 * - **rate state** (`BigInt64Array`, CAS): each lane's token bucket as one theoretical arrival time.
 *
 * @module
 */
import { LANE_NAMES } from "./lane_names.ts";
import { OVERLOAD_KINDS, type OverloadKind } from "./overload.ts";

const LANE_COUNT = LANE_NAMES.length;

/** Gauge slots per lane. */
const GAUGE_LANE = { reserveUsed: 0, generalUsed: 1, connections: 2 } as const;
const GAUGE_LANE_STRIDE = 3;
const GAUGE_GLOBAL = LANE_COUNT * GAUGE_LANE_STRIDE;
/** Where each shared gauge sits in `gauges`; `size` is the array's length. */
export const GAUGE_INDEX = {
  reserveUsed: (lane: number) => lane * GAUGE_LANE_STRIDE + GAUGE_LANE.reserveUsed,
  generalUsed: (lane: number) => lane * GAUGE_LANE_STRIDE + GAUGE_LANE.generalUsed,
  connections: (lane: number) => lane * GAUGE_LANE_STRIDE + GAUGE_LANE.connections,
  generalTotal: GAUGE_GLOBAL,
  generalBytes: GAUGE_GLOBAL + 1,
  inUse: GAUGE_GLOBAL + 2,
  highWater: GAUGE_GLOBAL + 3,
  size: GAUGE_GLOBAL + 4,
} as const;

/** Per lane: admitted, denied route, connections accepted and refused, overloads, then holdings. */
const COUNTER_LANE_STRIDE = 4 + OVERLOAD_KINDS.length + 3;
const COUNTER_HELD = 4 + OVERLOAD_KINDS.length;
const COUNTER_GLOBAL = LANE_COUNT * COUNTER_LANE_STRIDE;
/** Where each entry sits in one worker's counter stripe; `size` is the stripe's length. */
export const COUNTER_INDEX = {
  admitted: (lane: number) => lane * COUNTER_LANE_STRIDE,
  deniedRoute: (lane: number) => lane * COUNTER_LANE_STRIDE + 1,
  connectionsAccepted: (lane: number) => lane * COUNTER_LANE_STRIDE + 2,
  connectionsRefused: (lane: number) => lane * COUNTER_LANE_STRIDE + 3,
  overload: (lane: number, kind: OverloadKind) =>
    lane * COUNTER_LANE_STRIDE + 4 + OVERLOAD_KINDS.indexOf(kind),
  /** What this worker holds right now (a gauge kept in its own stripe, for reclaiming). */
  heldReserve: (lane: number) => lane * COUNTER_LANE_STRIDE + COUNTER_HELD,
  heldGeneral: (lane: number) => lane * COUNTER_LANE_STRIDE + COUNTER_HELD + 1,
  heldConnections: (lane: number) => lane * COUNTER_LANE_STRIDE + COUNTER_HELD + 2,
  completed: COUNTER_GLOBAL,
  cancelled: COUNTER_GLOBAL + 1,
  doubleRelease: COUNTER_GLOBAL + 2,
  /**
   * What this worker reports about its sockets and descriptors, once a second (gauges kept in
   * its own stripe; readers sum them): upstream sockets by state, and descriptor exhaustion.
   */
  upstreamActive: COUNTER_GLOBAL + 3,
  upstreamIdle: COUNTER_GLOBAL + 4,
  upstreamConnecting: COUNTER_GLOBAL + 5,
  tunnels: COUNTER_GLOBAL + 6,
  descriptorsExhausted: COUNTER_GLOBAL + 7,
  descriptorExhaustions: COUNTER_GLOBAL + 8,
  listenerRearms: COUNTER_GLOBAL + 9,
  /** This isolate's V8 heap in use and allocated, in bytes (reported with the sockets). */
  heapUsed: COUNTER_GLOBAL + 10,
  heapTotal: COUNTER_GLOBAL + 11,
  /** Memory outside this isolate's heap (array buffers: socket reads), in bytes. */
  heapExternal: COUNTER_GLOBAL + 12,
  /** Collections this isolate's relays asked for (request/relay_memory.ts). */
  relayCollections: COUNTER_GLOBAL + 13,
  /**
   * This isolate's log lines on a stream (0 stdout, 1 stderr; observe/log_outlet.ts): written and
   * dropped (counters, added to by what changed since the last report, so a replacement worker
   * counts on from its predecessor), drop episodes, and bytes queued now (a gauge).
   */
  logWritten: (stream: number) => COUNTER_GLOBAL + 14 + stream * 4,
  logDropped: (stream: number) => COUNTER_GLOBAL + 15 + stream * 4,
  logEpisodes: (stream: number) => COUNTER_GLOBAL + 16 + stream * 4,
  logQueued: (stream: number) => COUNTER_GLOBAL + 17 + stream * 4,
  size: COUNTER_GLOBAL + 22,
} as const;

/** The buffers behind one ledger; hand them to another worker to share the ledger. */
export interface LedgerBuffers {
  readonly gauges: SharedArrayBuffer | ArrayBuffer;
  readonly counters: SharedArrayBuffer | ArrayBuffer;
  readonly rate: SharedArrayBuffer | ArrayBuffer;
  readonly stripes: number;
}

/**
 * Typed views over the ledger buffers, with this worker's counter stripe.
 *
 * @internal
 */
export class LedgerMemory {
  /** Shared gauges; change only through `Atomics`. */
  readonly gauges: Int32Array;
  /** All counter stripes. */
  readonly counters: Float64Array;
  /** Token-bucket state per lane (theoretical arrival time, microseconds). */
  readonly rate: BigInt64Array;
  /** Offset of this worker's stripe in `counters`. */
  readonly stripe: number;
  readonly buffers: LedgerBuffers;

  private constructor(buffers: LedgerBuffers, stripe: number) {
    if (!Number.isInteger(stripe) || stripe < 0 || stripe >= buffers.stripes) {
      throw new RangeError(`Counter stripe ${stripe} is outside 0..${buffers.stripes - 1}`);
    }
    this.buffers = buffers;
    this.gauges = new Int32Array(buffers.gauges);
    this.counters = new Float64Array(buffers.counters);
    this.rate = new BigInt64Array(buffers.rate);
    this.stripe = stripe * COUNTER_INDEX.size;
  }

  /**
   * Allocates fresh ledger memory.
   *
   * @param stripes how many workers will write counters (one stripe each)
   * @param shared back it with `SharedArrayBuffer` (needed only to share across workers)
   */
  static create(stripes = 1, shared = false): LedgerMemory {
    const alloc = (bytes: number) => shared ? new SharedArrayBuffer(bytes) : new ArrayBuffer(bytes);
    return new LedgerMemory({
      gauges: alloc(GAUGE_INDEX.size * 4),
      counters: alloc(COUNTER_INDEX.size * 8 * stripes),
      rate: alloc(LANE_COUNT * 8),
      stripes,
    }, 0);
  }

  /** Views buffers another worker allocated, writing counters to stripe `stripe`. */
  static attach(buffers: LedgerBuffers, stripe: number): LedgerMemory {
    return new LedgerMemory(buffers, stripe);
  }

  /** Adds one to a counter in this worker's stripe. */
  bump(index: number): void {
    this.counters[this.stripe + index]++;
  }

  /** Adds `delta` to an entry of this worker's stripe (its holdings go up and down). */
  add(index: number, delta: number): void {
    this.counters[this.stripe + index] += delta;
  }

  /** Sets an entry of this worker's stripe (a gauge only this worker writes). */
  set(index: number, value: number): void {
    this.counters[this.stripe + index] = value;
  }

  /** An entry of stripe `stripe`. */
  read(stripe: number, index: number): number {
    return this.counters[stripe * COUNTER_INDEX.size + index];
  }

  /** Sets an entry of stripe `stripe` (reclaiming a stopped worker's holdings). */
  write(stripe: number, index: number, value: number): void {
    this.counters[stripe * COUNTER_INDEX.size + index] = value;
  }

  /** The sum of a counter over every stripe. */
  total(index: number): number {
    let sum = 0;
    for (let offset = 0; offset < this.counters.length; offset += COUNTER_INDEX.size) {
      sum += this.counters[offset + index];
    }
    return sum;
  }

  /** A counter as each stripe (each worker) counted it. */
  perStripe(index: number): number[] {
    const out: number[] = [];
    for (let offset = 0; offset < this.counters.length; offset += COUNTER_INDEX.size) {
      out.push(this.counters[offset + index]);
    }
    return out;
  }

  /** Takes one unit of gauge `index` if it stays at or under `limit`; false when full. */
  tryTake(index: number, amount: number, limit: number): boolean {
    const gauges = this.gauges;
    for (;;) {
      const current = Atomics.load(gauges, index);
      if (current + amount > limit) return false;
      if (Atomics.compareExchange(gauges, index, current, current + amount) === current) {
        return true;
      }
    }
  }

  /** Returns `amount` to gauge `index`. */
  give(index: number, amount: number): void {
    Atomics.sub(this.gauges, index, amount);
  }

  /** Reads a gauge. */
  gauge(index: number): number {
    return Atomics.load(this.gauges, index);
  }

  /** Raises gauge `index` to `value` if it is higher. */
  raise(index: number, value: number): void {
    const gauges = this.gauges;
    for (;;) {
      const current = Atomics.load(gauges, index);
      if (value <= current) return;
      if (Atomics.compareExchange(gauges, index, current, value) === current) return;
    }
  }
}
