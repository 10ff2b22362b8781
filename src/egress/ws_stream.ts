/**
 * A WebSocket connection as a node `Duplex` of raw bytes, for the `https_tunnel` transport: what is
 * written goes out as binary frames (masked from the client side, RFC 6455 §5.3), binary frames
 * that arrive become readable data, a close frame ends the readable side and is answered, a ping
 * is answered with a pong. Text is not data: the hub takes the first message as the dial op
 * (`firstText`), and any other text message closes the connection (1003). A framing violation
 * closes with the decoder's code (1002, or 1009 for a frame over the limit).
 *
 * The stream also answers the socket methods node's HTTP client and the SOCKS handshake call on
 * what an agent's `createConnection` hands them (`setNoDelay`, `setKeepAlive`, `setTimeout`,
 * `ref`, `unref`, the byte counts), by passing them to the TLS socket underneath — so the SOCKS5
 * code (`socks5.ts`) and the agents run over a tunnel unchanged.
 *
 * The transport socket may be attached after the stream is made (the edge's dial returns the
 * stream at once and attaches the TLS socket once the HTTP upgrade succeeded): writes wait for it.
 *
 * Pongs are paced by the peer's reading (`ws_pacing.ts`: the latest ping answered once the
 * transport drains, the transport not read meanwhile, a peer that leaves a pong owed too long
 * given up). Bytes held for a peer outside flow control — control frames queued, data read but not
 * taken, a frame still arriving — are capped per connection (`maxBufferedBytes`): over the cap the
 * connection is closed with 1008 and ended. Frames without data — pings, pongs, empty binary
 * frames — spend a per-connection budget (`ws_pacing.ts` `ControlBudget`): over it the connection
 * is closed with 1008 and its transport is read no further. A TLS transport is read no further
 * than a paused TCP socket (`tls_reads.ts`: on Deno 2.9.6 pausing a `node:tls` socket alone leaves
 * its TCP socket read into memory).
 *
 * @module
 */
import { Buffer } from "node:buffer";
import type { Socket } from "node:net";
import { Duplex } from "node:stream";
import type { TLSSocket } from "node:tls";
import { holdTlsReads } from "./tls_reads.ts";
import { ControlBudget, ControlPacing, OVER_CONTROL_BUDGET } from "./ws_pacing.ts";
import {
  CloseCode,
  closeCodeOf,
  closePayload,
  encodeFrame,
  FrameDecoder,
  Opcode,
  type OpcodeValue,
} from "./ws_frame.ts";

/** The default largest frame payload: 1 MiB. */
export const MAX_FRAME_BYTES = 1 << 20;

/** The default bound on unsent bytes above which pongs wait (and reading pauses). */
export const CONTROL_BOUND_BYTES = 64 * 1024;

/** How long a close frame queued behind a peer that does not read may take before the end. */
const CLOSE_FLUSH_MS = 2000;

/** How one end of a WebSocket stream behaves. */
export interface WebSocketStreamOptions {
  /** `"client"` masks what it sends and refuses masked frames; `"server"` the reverse. */
  readonly side: "client" | "server";
  /** The largest frame payload accepted (default {@link MAX_FRAME_BYTES}). */
  readonly maxFrameBytes?: number;
  /**
   * When set, the first message must be text and is handed here (the hub's dial op); a binary
   * message before it closes the connection with 1008.
   */
  readonly firstText?: (text: string) => void;
  /** Unsent bytes above which pongs are coalesced (default {@link CONTROL_BOUND_BYTES}). */
  readonly controlBoundBytes?: number;
  /** The longest a pong may stay owed before the peer is closed with 1008 (default: no bound). */
  readonly pongDeadlineMs?: number;
  /**
   * Bytes held outside flow control (control frames queued, data not taken, a partial frame)
   * above which the connection is closed with 1008 (default: twice the frame limit and 1 MiB).
   */
  readonly maxBufferedBytes?: number;
  /**
   * Frames without data (pings, pongs, empty binary frames) the peer may send: `burst`, then
   * `per_second` (default `CONTROL_FRAME_BUDGET`); over it the connection is closed with 1008.
   */
  readonly controlBudget?: { readonly per_second: number; readonly burst: number };
}

/** Why the stream closed, as far as the WebSocket knows. */
export interface WebSocketClosed {
  /** The close code sent or received. */
  readonly code: number;
  readonly reason: string;
  /** True when this end refused something (a violation, or `refuse`). */
  readonly refused: boolean;
}

/** A WebSocket connection as a Duplex of raw bytes; see the module doc. */
export class WebSocketStream extends Duplex {
  /** Set once a close frame was sent or received. */
  wsClose?: WebSocketClosed;
  readonly #side: "client" | "server";
  readonly #decoder: FrameDecoder;
  #firstText?: (text: string) => void;
  #transport?: Socket;
  #waiting?: () => void;
  #bytesRead = 0;
  #bytesWritten = 0;
  readonly #options: WebSocketStreamOptions;
  readonly #maxBuffered: number;
  #pacing?: ControlPacing;
  readonly #budget: ControlBudget;

  /** @param options the side, the frame limit and the first-message hook */
  constructor(options: WebSocketStreamOptions) {
    super({ allowHalfOpen: false });
    this.#side = options.side;
    this.#firstText = options.firstText;
    this.#options = options;
    const maxPayload = options.maxFrameBytes ?? MAX_FRAME_BYTES;
    this.#decoder = new FrameDecoder({ side: options.side, maxPayload });
    this.#maxBuffered = options.maxBufferedBytes ?? 2 * maxPayload + (1 << 20);
    this.#budget = new ControlBudget(options.controlBudget);
  }

  /**
   * Starts carrying frames over `transport`; `head` is what arrived after the HTTP head.
   *
   * @throws {TypeError} when a transport is already attached
   */
  attach(transport: Socket, head?: Uint8Array): void {
    if (this.#transport) throw new TypeError("A transport is already attached");
    this.#transport = transport;
    holdTlsReads(transport as TLSSocket);
    this.#pacing = new ControlPacing(transport, {
      controlBoundBytes: this.#options.controlBoundBytes ?? CONTROL_BOUND_BYTES,
      pongDeadlineMs: this.#options.pongDeadlineMs,
      pongFrame: (payload) => this.#frame(Opcode.pong, payload),
      giveUp: (reason) => this.#giveUp(reason),
    });
    transport.on("data", (chunk: Uint8Array) => this.#receive(chunk));
    transport.on("end", () => this.push(null));
    transport.on("error", (error: Error) => this.destroy(error));
    transport.on("close", () => this.destroy());
    transport.on("timeout", () => this.emit("timeout"));
    this.#waiting?.();
    this.#waiting = undefined;
    if (head && head.length > 0) this.#receive(head);
  }

  /** Sends a text message (the edge's dial op). */
  sendText(text: string): void {
    this.#send(Opcode.text, new TextEncoder().encode(text));
  }

  /**
   * Sends a close frame with `code` and `reason`, then ends the connection: the transport is
   * destroyed once the frame is written, or {@link CLOSE_FLUSH_MS} later.
   */
  refuse(code: number, reason: string): void {
    if (this.wsClose) return;
    this.wsClose = { code, reason, refused: true };
    this.#send(Opcode.close, closePayload(code, reason));
    this.#transport?.end();
    this.push(null);
    this.destroy();
  }

  override _read(): void {
    this.#pacing?.readFull(false);
  }

  override _write(chunk: Uint8Array, _encoding: string, callback: (error?: Error) => void): void {
    // An empty write carries nothing: no frame (the peer budgets frames without data).
    if (chunk.length === 0) return callback();
    const go = () => {
      if (this.wsClose) return callback(new Error("The WebSocket is closed"));
      this.#bytesWritten += chunk.length;
      this.#transport!.write(
        this.#frame(Opcode.binary, chunk),
        (error) => callback(error ?? undefined),
      );
    };
    if (this.#transport) go();
    else this.#waiting = go;
  }

  override _final(callback: (error?: Error) => void): void {
    if (!this.wsClose && this.#transport) {
      this.wsClose = { code: CloseCode.normal, reason: "", refused: false };
      this.#send(Opcode.close, closePayload(CloseCode.normal));
      this.#transport.end();
    }
    callback();
  }

  /**
   * Ends the transport: at once, or — when a close frame is queued on it — once that frame is
   * written, and at most {@link CLOSE_FLUSH_MS} later (a peer that does not read never takes it).
   */
  override _destroy(error: Error | null, callback: (error: Error | null) => void): void {
    const transport = this.#transport;
    const flushing = transport?.writableEnded && !transport.writableFinished;
    if (transport && !transport.destroyed && flushing && this.wsClose) {
      const end = () => {
        clearTimeout(timer);
        transport.destroy();
      };
      const timer = setTimeout(end, CLOSE_FLUSH_MS);
      transport.once("finish", end).once("close", end);
    } else transport?.destroy();
    callback(error);
  }

  /** Sets TCP_NODELAY on the transport. */
  setNoDelay(noDelay = true): this {
    this.#transport?.setNoDelay(noDelay);
    return this;
  }

  /** Sets TCP keep-alive on the transport. */
  setKeepAlive(enable = false, delay = 0): this {
    this.#transport?.setKeepAlive(enable, delay);
    return this;
  }

  /** An idle timeout on the transport; `timeout` is emitted here. */
  setTimeout(ms: number, callback?: () => void): this {
    this.#transport?.setTimeout(ms);
    if (callback) this.once("timeout", callback);
    return this;
  }

  /** Lets the transport keep the process alive. */
  ref(): this {
    this.#transport?.ref();
    return this;
  }

  /** Stops the transport keeping the process alive. */
  unref(): this {
    this.#transport?.unref();
    return this;
  }

  /** Payload bytes received in binary frames. */
  get bytesRead(): number {
    return this.#bytesRead;
  }

  /** Payload bytes written. */
  get bytesWritten(): number {
    return this.#bytesWritten;
  }

  /** True until a transport is attached. */
  get connecting(): boolean {
    return this.#transport === undefined;
  }

  get remoteAddress(): string | undefined {
    return this.#transport?.remoteAddress;
  }

  get remotePort(): number | undefined {
    return this.#transport?.remotePort;
  }

  /** Frames what arrived and acts on each whole frame. */
  #receive(chunk: Uint8Array): void {
    if (this.wsClose?.refused) return;
    const { frames, violation } = this.#decoder.push(chunk);
    for (const frame of frames) {
      if (this.wsClose) return;
      this.#handle(frame.opcode, frame.payload);
    }
    if (violation) return this.refuse(violation.code, violation.reason);
    this.#checkBuffered();
  }

  /** Bytes held outside flow control; over the cap the connection is closed (1008) and ended. */
  #checkBuffered(): void {
    const held = (this.#pacing?.queued ?? 0) + this.readableLength + this.#decoder.buffered;
    if (held <= this.#maxBuffered) return;
    this.#giveUp(`More than ${this.#maxBuffered} bytes held for a peer that does not read`);
  }

  /**
   * Closes with 1008 a peer that does not read, and ends the transport at once: the close frame
   * is queued behind what the peer left unread.
   */
  #giveUp(reason: string): void {
    if (this.wsClose) return;
    this.refuse(CloseCode.policyViolation, reason);
    this.#transport?.destroy();
  }

  #handle(opcode: OpcodeValue, payload: Uint8Array): void {
    const dataless = opcode === Opcode.ping || opcode === Opcode.pong ||
      (opcode === Opcode.binary && payload.length === 0);
    if (dataless && !this.#budget.spend()) return this.#overBudget();
    if (opcode === Opcode.binary) {
      if (this.#firstText) return this.refuse(CloseCode.policyViolation, "Expected the dial op");
      this.#bytesRead += payload.length;
      if (!this.push(Buffer.from(payload.buffer, payload.byteOffset, payload.length))) {
        this.#pacing?.readFull(true);
      }
      return;
    }
    if (opcode === Opcode.text) {
      const first = this.#firstText;
      if (!first) return this.refuse(CloseCode.unsupportedData, "Text is not data");
      this.#firstText = undefined;
      return first(new TextDecoder().decode(payload));
    }
    if (opcode === Opcode.ping) return this.#pacing?.ping(payload);
    if (opcode === Opcode.close) {
      const code = closeCodeOf(payload);
      this.wsClose = { code, reason: "", refused: false };
      this.#send(Opcode.close, closePayload(code === 1005 ? CloseCode.normal : code));
      this.#transport?.end();
      this.push(null);
    }
  }

  /**
   * Closes with 1008 a peer over its budget of frames without data, and reads its transport no
   * further: the close frame still goes out (a peer that reads it learns why).
   */
  #overBudget(): void {
    this.#transport?.pause();
    this.refuse(CloseCode.policyViolation, OVER_CONTROL_BUDGET);
  }

  /** Writes a control or text frame (counted by the pacing until the transport wrote it). */
  #send(opcode: OpcodeValue, payload: Uint8Array): void {
    this.#pacing?.write(this.#frame(opcode, payload));
  }

  #frame(opcode: OpcodeValue, payload: Uint8Array): Uint8Array {
    const mask = this.#side === "client" ? crypto.getRandomValues(new Uint8Array(4)) : undefined;
    return encodeFrame(opcode, payload, mask);
  }
}
