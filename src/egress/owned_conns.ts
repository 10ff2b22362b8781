/**
 * Upstream connections the gateway reads itself: a `Deno.TcpConn` and the buffer its bytes are read
 * into, reused for the connection's life instead of a fresh buffer per read (docs/decisions.md §19:
 * `node:http`'s client copied every body chunk into a new buffer, and 32 downloads held hundreds of
 * megabytes of them). Each agent (agents.ts) keeps its own {@link OwnedConns}: idle keep-alive
 * connections per destination, and the ones carrying a response, which the idle watch sweeps.
 *
 * An idle connection keeps one small read pending. When the upstream closes it (its keep-alive time
 * ran out) or sends bytes nobody asked for, that read returns and the connection is dropped from
 * the pool at once, so a request is not written to a connection the upstream already closed. A
 * connection taken from the pool hands that pending read to its new owner: the first bytes of the
 * response may already be in it. A connection back from an exchange goes to the client connection
 * it served at once, to any other only once it has settled (reuse_settle.ts): surplus bytes an
 * upstream sends a few milliseconds after a response drop the connection instead of answering
 * another client. Connections still settling do not count against the idle cap (they were busy a
 * moment ago; counting them would close the settled ones the next clients need).
 *
 * @module
 */
import { mayTake, SETTLE_MS } from "./reuse_settle.ts";

/** Bytes per read buffer: one socket read's worth. */
export const READ_BUFFER_BYTES = 64 * 1024;
/** The pending read of an idle connection only learns that something arrived. */
const PARK_BYTES = 256;
/** Read buffers kept for reuse beyond the connections holding one. */
const SPARE_BUFFERS = 64;

const spares: Uint8Array[] = [];

/** A read buffer, reused when one is spare. */
export function takeBuffer(): Uint8Array {
  return spares.pop() ?? new Uint8Array(READ_BUFFER_BYTES);
}

/** Gives a read buffer back once nothing refers to its bytes any more. */
export function giveBuffer(buffer: Uint8Array): void {
  if (spares.length < SPARE_BUFFERS && buffer.byteLength === READ_BUFFER_BYTES) spares.push(buffer);
}

/** One upstream connection the gateway reads itself. */
export class OwnedConn {
  readonly conn: Deno.TcpConn;
  /** The pool it returns to: destination (and TLS identity, none yet) as `host:port`. */
  readonly key: string;
  /** Whether it carried an exchange before (a failure on it may be the upstream's close). */
  reused = false;
  /** When a body read started that has not returned yet (the idle watch's clock); undefined: none. */
  readingSince?: number;
  /** When it went back to the pool (the idle watch's clock: set by its first sweep after). */
  idleSince = 0;
  /** When its last exchange released it (the pool's clock): it settles from then. */
  releasedAt = Number.NEGATIVE_INFINITY;
  /** The client connection its current or last exchange served. */
  owner?: object;
  #closed = false;
  #parked?: { readonly buffer: Uint8Array; readonly read: Promise<number | null> };
  #parkedIdle = false;

  /**
   * @param conn the connected socket (after any SOCKS handshake)
   * @param key the pool it belongs to
   */
  constructor(conn: Deno.TcpConn, key: string) {
    this.conn = conn;
    this.key = key;
  }

  /** True once closed (by its owner, the pool, or the idle watch). */
  get closed(): boolean {
    return this.#closed;
  }

  /** Closes the socket; a pending read rejects. Idempotent. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    try {
      this.conn.close();
    } catch {
      // Already closed by the runtime.
    }
  }

  /** Bytes written on this connection so far (every exchange it carried). */
  bytesWritten = 0;

  /** Writes all of `bytes`, counting each part the socket took ({@link bytesWritten}). */
  async write(bytes: Uint8Array): Promise<void> {
    for (let at = 0; at < bytes.byteLength;) {
      const n = await this.conn.write(bytes.subarray(at));
      this.bytesWritten += n;
      at += n;
    }
  }

  /**
   * Reads into `target` (the bytes of a read a pooled connection had pending come first).
   *
   * @param clock when given, the read is inside a body: the idle watch cuts it off when it waits
   *   longer than the body idle time
   * @returns the bytes read; null at the upstream's end of stream
   */
  async read(target: Uint8Array, clock?: () => number): Promise<number | null> {
    this.readingSince = clock?.();
    try {
      const parked = this.#parked;
      if (!parked) return await this.conn.read(target);
      this.#parked = undefined;
      const n = await parked.read;
      if (n !== null) target.set(parked.buffer.subarray(0, n));
      return n;
    } finally {
      this.readingSince = undefined;
    }
  }

  /**
   * Starts the idle connection's pending read: when it returns while the connection still sits in
   * the pool, `dropped` is called (the upstream closed it, or spoke unasked).
   */
  park(dropped: () => void): void {
    const buffer = new Uint8Array(PARK_BYTES);
    const read = this.conn.read(buffer).catch(() => null);
    this.#parked = { buffer, read };
    read.then(() => {
      if (this.#parked?.read === read && this.#parkedIdle) dropped();
    });
    this.#parkedIdle = true;
  }

  /** Taken from the pool: a return of the pending read now belongs to the new owner's first read. */
  claim(): void {
    this.#parkedIdle = false;
  }
}

/** The owned connections of one agent: idle ones per destination, and busy ones. */
export class OwnedConns {
  /** Idle connections per destination, oldest release first. */
  readonly #idle = new Map<string, OwnedConn[]>();
  readonly #busy = new Set<OwnedConn>();
  readonly #maxIdle: number;
  readonly #clock: () => number;
  readonly #settleMs: number;

  /**
   * @param maxIdle settled idle connections kept per destination
   * @param settleMs how long a connection back from an exchange settles for other clients
   * @param clock milliseconds, monotonic (for the settle time)
   */
  constructor(
    maxIdle: number,
    settleMs: number = SETTLE_MS,
    clock: () => number = () => performance.now(),
  ) {
    this.#maxIdle = maxIdle;
    this.#settleMs = settleMs;
    this.#clock = clock;
  }

  /**
   * The newest idle connection to `key` that client connection `owner` may have, now busy and
   * `owner`'s; undefined when there is none (a connection still settling for another client is
   * left where it is: the caller dials).
   */
  take(key: string, owner?: object): OwnedConn | undefined {
    const list = this.#idle.get(key);
    if (!list) return undefined;
    const now = this.#clock();
    let at = list.length - 1;
    while (at >= 0 && !mayTake(list[at], owner, now, this.#settleMs)) at--;
    if (at < 0) return undefined;
    const [conn] = list.splice(at, 1);
    if (list.length === 0) this.#idle.delete(key);
    conn.claim();
    conn.owner = owner;
    this.#busy.add(conn);
    return conn;
  }

  /** True when an idle connection to `key` waits in the pool (settled or not). */
  holds(key: string): boolean {
    return this.#idle.has(key);
  }

  /**
   * Closes every idle connection whose destination `refused` names (the destination check refuses
   * it now: reach_verdicts.ts), each destination asked once.
   *
   * @returns how many were closed
   */
  closeIdle(refused: (key: string) => boolean): number {
    let closed = 0;
    for (const [key, list] of [...this.#idle]) {
      if (!refused(key)) continue;
      this.#idle.delete(key);
      for (const conn of list) conn.close();
      closed += list.length;
    }
    return closed;
  }

  /** Counts a freshly dialled connection as busy, serving client connection `owner`. */
  adopt(conn: OwnedConn, owner?: object): void {
    conn.owner = owner;
    this.#busy.add(conn);
  }

  /**
   * An exchange on `conn` ended: a connection that may carry another goes back to the pool (the
   * oldest idle one closed when the pool is full); any other is closed.
   */
  release(conn: OwnedConn, reusable: boolean): void {
    this.#busy.delete(conn);
    if (!reusable || conn.closed) return conn.close();
    const list = this.#idle.get(conn.key) ?? [];
    const now = this.#clock();
    const settledCount = list.filter((idle) => now - idle.releasedAt >= this.#settleMs).length;
    if (settledCount >= this.#maxIdle) list.shift()?.close();
    conn.releasedAt = now;
    conn.reused = true;
    conn.idleSince = Number.NaN; // set by the first sweep that sees it idle
    list.push(conn);
    this.#idle.set(conn.key, list);
    conn.park(() => this.#drop(conn));
  }

  /** Removes an idle connection the upstream closed (or spoke on) and closes it. */
  #drop(conn: OwnedConn): void {
    const list = this.#idle.get(conn.key);
    const at = list?.indexOf(conn) ?? -1;
    if (at >= 0) list!.splice(at, 1);
    if (list?.length === 0) this.#idle.delete(conn.key);
    conn.close();
  }

  /**
   * One sweep of the idle watch: a busy connection whose read has waited `bodyIdleMs` is closed
   * (its response is cut off); an idle one unused for its keep-alive limit is closed.
   *
   * @param limits the body idle time, and each idle connection's keep-alive limit (the shorter
   *   time its upstream announced, else the egress's)
   */
  sweep(
    now: number,
    limits: { readonly bodyIdleMs: number; readonly idleLimit: (conn: OwnedConn) => number },
  ): void {
    for (const conn of this.#busy) {
      if (conn.readingSince !== undefined && now - conn.readingSince >= limits.bodyIdleMs) {
        conn.close();
      }
    }
    for (const list of [...this.#idle.values()]) {
      for (const conn of [...list]) {
        if (Number.isNaN(conn.idleSince)) conn.idleSince = now;
        if (now - conn.idleSince >= limits.idleLimit(conn)) this.#drop(conn);
      }
    }
  }

  /** Connections by state, for `/metrics`. */
  counts(): { active: number; idle: number } {
    let idle = 0;
    for (const list of this.#idle.values()) idle += list.length;
    return { active: this.#busy.size, idle };
  }

  /** Closes every connection, busy or idle (the edge is closing). */
  closeAll(): void {
    for (const conn of this.#busy) conn.close();
    this.#busy.clear();
    for (const list of this.#idle.values()) for (const conn of list) conn.close();
    this.#idle.clear();
  }
}
