/**
 * One client connection as the lane server sees it: its concurrency budget in the ledger, and the
 * pipelined HTTP/1.1 requests waiting behind that budget.
 *
 * node's HTTP/1.1 server parses every request in what it has read (up to 64 KiB per read,
 * measured) and emits them all at once, whether their client is still there or not. Answering each
 * with a 429 was work for requests nobody would read: 60 connections × 2,000 pipelined GETs kept
 * an isolate busy for 11–13 s after the clients had gone. So a request beyond the connection's
 * `per_connection` bound waits here, unadmitted and unobserved, and the socket stops reading; the
 * next one is served when a reservation of this connection is released, and the socket reads again
 * once nothing waits. When the client goes, everything waiting is dropped unserved and counted. A
 * connection with more than {@link PIPELINE_LIMIT} requests waiting is closed: no client that reads
 * its answers pipelines that deep.
 *
 * A connection also ends here in order. Once the gateway decided to close it (a refused head, a
 * client's `Connection: close`) or its parser gave up on the bytes, requests parsed after that
 * point are dropped unserved — a strict parser would not have seen them — while those before it
 * are answered in order; only then does the last word (a 400 for the malformed bytes) go out and
 * the connection close.
 *
 * An `Upgrade` request waits its turn here too ({@link ConnectionState.inTurn}): it is served —
 * admitted, answered, tunnelled or refused — only once every request parsed before it on the
 * connection has been answered, because whatever is written for it (a 101 and the tunnel's bytes,
 * or a refusal) takes the connection over. Served at once, it put the 101 and the tunnel ahead of
 * an earlier POST's answer, or a `429 per_connection_limit` ahead of eight answers the client was
 * owed. Each parsed request is tracked until its answer is complete
 * ({@link ConnectionState.arrived}); when the connection closes first, every one still unanswered
 * is ended — its reservation cancelled, its upstream exchange aborted, its body relay stopped — so
 * no upstream socket outlives the client's connection. (node tells only the response holding the
 * socket that the socket closed; answers queued behind it, and the relays writing into them,
 * waited for ever, each holding an upstream socket.)
 *
 * HTTP/2 streams are concurrent by design and never wait here; a stream beyond the bound gets the
 * ledger's `per_connection_limit`.
 *
 * @module
 */
import type { ConnectionBudget } from "../ledger/ledger.ts";
import type { ParseGate } from "./parse_gate.ts";

/** Requests that may wait behind one connection's budget before the connection is closed. */
export const PIPELINE_LIMIT = 64;

/** What a connection state needs from its socket. */
export interface PausableSocket {
  readonly destroyed: boolean;
  pause(): unknown;
  resume(): unknown;
  destroy(): unknown;
  once(event: "close", listener: () => void): unknown;
}

/** A connection's budget, and the requests waiting for it. */
export class ConnectionState implements ConnectionBudget {
  active = 0;
  /** The connection's request-rate bucket (theoretical arrival time), kept by the ledger. */
  rateTat?: number;
  /** The last request parsed: the one whose body the parser reads, if it has one. */
  reading?: { readonly complete: boolean };
  readonly #socket: PausableSocket;
  readonly #bound: number;
  readonly #onDropped: (count: number) => void;
  #waiting?: (() => void)[];
  #paused = false;
  #closing = false;
  #broken = false;
  #last?: () => void;
  #gate?: ParseGate;
  /** Requests parsed and not yet answered: how to end each if the connection goes first. */
  #unanswered?: Set<() => void>;
  /** An `Upgrade` waiting for the requests before it to be answered. */
  #turn?: () => void;

  /**
   * @param socket the client connection
   * @param bound the ledger's `per_connection`
   * @param onDropped told how many waiting requests were dropped because the client went away
   */
  constructor(socket: PausableSocket, bound: number, onDropped: (count: number) => void) {
    this.#socket = socket;
    this.#bound = bound;
    this.#onDropped = onDropped;
    socket.once("close", () => this.#drop());
  }

  /** Puts the socket's bytes behind `gate`, which asks {@link holdsParse} before each slice. */
  gate(gate: ParseGate): void {
    this.#gate = gate;
  }

  /**
   * True while the parser must not read further: at a message boundary, when the budget is in
   * use, requests wait, or the connection is ending — never in the middle of a message, whose
   * body its request needs — and always once the parser failed.
   */
  // deno-lint-ignore no-explicit-any
  holdsParse(parser: any): boolean {
    if (this.#broken) return true;
    const incoming = parser?.incoming;
    if (incoming && !incoming.complete) return false;
    return this.#closing || this.active >= this.#bound || this.waiting > 0;
  }

  /** True once the connection ends after what it holds: later requests are dropped. */
  get closing(): boolean {
    return this.#closing;
  }

  /** Marks the connection as ending after the requests it holds now. */
  close(): void {
    this.#closing = true;
  }

  /**
   * Ends the connection with `last` once every request it holds is answered (now, when none is).
   */
  finishWith(last: () => void): void {
    this.#closing = true;
    this.#broken = true;
    if (this.active === 0 && this.waiting === 0) last();
    else this.#last = last;
  }

  /**
   * Tracks a request parsed on this connection until its answer is complete. If the connection
   * closes first, `end` is called: it must end the request's answer (node tells only the response
   * holding the socket that the socket closed; one queued behind it never hears of it).
   *
   * @returns the function to call once the answer is complete (delivered, refused or cut off);
   *   further calls do nothing
   */
  arrived(end: () => void): () => void {
    const unanswered = this.#unanswered ??= new Set();
    unanswered.add(end);
    return () => {
      if (!unanswered.delete(end) || unanswered.size > 0 || !this.#turn) return;
      // After the answer's own close listeners (its reservation's release) have run.
      queueMicrotask(() => this.#takeTurn());
    };
  }

  /** Requests parsed and not yet answered. */
  get unanswered(): number {
    return this.#unanswered?.size ?? 0;
  }

  /**
   * Serves an `Upgrade` request in its turn: `serve` runs once every request parsed before it
   * has been answered (at once when none is pending; a request waiting behind the budget is
   * pending too). Nothing is parsed after an `Upgrade`, so at most one waits. If the connection
   * closes first, it is dropped unserved and counted.
   */
  inTurn(serve: () => void): void {
    if (this.unanswered === 0) serve();
    else this.#turn = serve;
  }

  /** Marks the connection as failed: its parser gave up inside a body; nothing more is read. */
  fail(): void {
    this.#closing = true;
    this.#broken = true;
  }

  /** Counts a request dropped unserved (it came after the connection's end was decided). */
  drop(): void {
    this.#onDropped(1);
  }

  /** Requests waiting behind the budget. */
  get waiting(): number {
    return this.#waiting?.length ?? 0;
  }

  /** True when a new request must wait (the budget is in use, or others wait before it). */
  mustWait(): boolean {
    return this.active >= this.#bound || this.waiting > 0;
  }

  /**
   * Queues a request to run once the budget has room, and stops reading the socket.
   *
   * @returns false when the connection was closed instead (too many waiting)
   */
  wait(run: () => void): boolean {
    const waiting = this.#waiting ??= [];
    if (waiting.length >= PIPELINE_LIMIT) {
      this.#socket.destroy();
      return false;
    }
    waiting.push(run);
    if (!this.#gate && !this.#paused) {
      this.#paused = true;
      this.#socket.pause();
    }
    return true;
  }

  /** Called by the ledger after one of this connection's reservations was released. */
  released(): void {
    // The common case — nothing waits, nothing held — costs nothing more.
    if (this.waiting === 0 && this.#last === undefined && !this.#gate?.holding) return;
    // Not inside the release itself: the release runs in a response's close handler.
    queueMicrotask(() => this.#next());
  }

  #next(): void {
    const waiting = this.#waiting ?? [];
    if (this.#socket.destroyed) return;
    while (waiting.length > 0 && this.active < this.#bound) {
      const run = waiting.shift()!;
      if (waiting.length === 0 && this.#paused) {
        // The last one may still have body bytes to read.
        this.#paused = false;
        this.#socket.resume();
      }
      run();
    }
    if (this.active === 0 && waiting.length === 0 && this.#last) {
      const last = this.#last;
      this.#last = undefined;
      last();
      return;
    }
    this.#gate?.pump();
  }

  #takeTurn(): void {
    const serve = this.#turn;
    if (!serve || this.unanswered > 0 || this.#socket.destroyed) return;
    this.#turn = undefined;
    serve();
  }

  /** The connection closed: what waits is dropped, and every unanswered request is ended. */
  #drop(): void {
    const dropped = this.waiting + (this.#turn ? 1 : 0);
    this.#waiting = undefined;
    this.#turn = undefined;
    if (dropped > 0) this.#onDropped(dropped);
    const unanswered = this.#unanswered;
    this.#unanswered = undefined;
    for (const end of unanswered ?? []) end();
  }
}
