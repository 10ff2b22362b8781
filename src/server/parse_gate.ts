/**
 * How far ahead of the gateway node's HTTP/1.1 parser may read a connection. Left alone, Deno's
 * `node:http` server parses every request in what the socket delivered — 64 KiB per read, about
 * 1,500 pipelined GETs — and builds a request and a response object for each before any handler
 * can say no; a flood of 40 connections × 2,000 pipelined GETs kept a public worker busy for
 * seconds on requests whose clients were already gone (docs/decisions.md §13).
 *
 * The gate stands between the socket and the parser. It takes over the server's `data` and `end`
 * listeners (and turns off the parser's direct "consume" reads, which bypass them) and feeds what
 * arrives in slices of {@link SLICE} bytes, asking before each slice whether the connection may go
 * on; while it may not (its pipelined requests wait, or it is closing), the rest stays here and
 * the socket stops reading. So a connection's parser runs at most one slice ahead of its budget,
 * and a client that leaves takes its unparsed bytes with it. The end of the stream reaches the
 * parser only after the last slice.
 *
 * After an `Upgrade` the parser lets go of the socket; the gate then hands whatever it still holds
 * back to the socket (`unshift`), so the tunnel sees every byte.
 *
 * @module
 */

/** Bytes fed to the parser at a time: ~50 typical pipelined GETs. */
export const SLICE = 2048;

/** The socket as the gate uses it. */
interface GatedSocket {
  readonly destroyed: boolean;
  // deno-lint-ignore no-explicit-any
  parser?: any;
  // deno-lint-ignore no-explicit-any
  _handle?: any;
  // deno-lint-ignore ban-types
  listeners(event: "data" | "end"): Function[];
  // deno-lint-ignore no-explicit-any
  removeListener(event: "data" | "end", listener: (...args: any[]) => void): unknown;
  // deno-lint-ignore no-explicit-any
  on(event: "data" | "end" | "close", listener: (...args: any[]) => void): unknown;
  pause(): unknown;
  resume(): unknown;
  unshift(chunk: Uint8Array): unknown;
}

/**
 * Turns off the parser's direct reads for a new socket: called before node's connection listener
 * (so the server attaches `data` and `end` listeners the gate can take over).
 */
export function preferListeners(socket: GatedSocket): void {
  if (socket._handle) socket._handle._consumed = true;
}

/** One connection's gate. */
export class ParseGate {
  readonly #socket: GatedSocket;
  // deno-lint-ignore no-explicit-any
  readonly #hold: (parser: any) => boolean;
  readonly #onData: ((chunk: Uint8Array) => void)[];
  readonly #onEnd: (() => void)[];

  readonly #take: (chunk: Uint8Array) => void;
  #pending: Uint8Array[] = [];
  #ended = false;
  #released = false;
  #pumping = false;
  #paused = false;

  /**
   * Takes over the server's listeners of `socket`.
   *
   * @param socket a socket node's HTTP server has just set up
   * @param hold true while the connection may not have more of its bytes parsed (it is asked
   *   with the socket's parser, to tell a message boundary from the middle of a body)
   */
  // deno-lint-ignore no-explicit-any
  constructor(socket: GatedSocket, hold: (parser: any) => boolean) {
    this.#socket = socket;
    this.#hold = hold;
    this.#onData = socket.listeners("data") as ((chunk: Uint8Array) => void)[];
    this.#onEnd = socket.listeners("end") as (() => void)[];
    for (const listener of this.#onData) socket.removeListener("data", listener);
    for (const listener of this.#onEnd) socket.removeListener("end", listener);
    this.#take = (chunk: Uint8Array) => {
      this.#pending.push(chunk);
      this.pump();
    };
    socket.on("data", this.#take);
    socket.on("end", () => {
      this.#ended = true;
      this.pump();
    });
    socket.on("close", () => this.#pending = []);
  }

  /** True while bytes wait here for the connection to have room (or for its end). */
  get holding(): boolean {
    return this.#pending.length > 0;
  }

  /** Feeds slices while the connection may go on; call again once a hold may have lifted. */
  pump(): void {
    if (this.#pumping || this.#released) return;
    this.#pumping = true;
    try {
      this.#feed();
    } finally {
      this.#pumping = false;
    }
  }

  #feed(): void {
    const socket = this.#socket;
    while (this.#pending.length > 0) {
      if (socket.destroyed) {
        this.#pending = [];
        return;
      }
      if (this.#hold(socket.parser)) {
        if (!this.#paused) {
          this.#paused = true;
          socket.pause();
        }
        return;
      }
      const chunk = this.#pending[0];
      const slice = chunk.byteLength <= SLICE ? chunk : chunk.subarray(0, SLICE);
      if (slice === chunk) this.#pending.shift();
      else this.#pending[0] = chunk.subarray(SLICE);
      for (const listener of this.#onData) listener.call(socket, slice);
      if (!socket.parser) return this.#release();
    }
    if (this.#paused) {
      this.#paused = false;
      socket.resume();
    }
    if (this.#ended) {
      this.#ended = false;
      for (const listener of this.#onEnd) listener.call(socket);
    }
  }

  /** The parser let go of the socket (an upgrade): give back what is still held. */
  #release(): void {
    this.#released = true;
    this.#socket.removeListener("data", this.#take);
    const rest = this.#pending;
    this.#pending = [];
    for (let i = rest.length - 1; i >= 0; i--) this.#socket.unshift(rest[i]);
  }
}
