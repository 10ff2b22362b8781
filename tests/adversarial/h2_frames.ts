/**
 * A hand-rolled HTTP/2 wire client for adversarial tests: it writes exactly the frames a test
 * builds (RFC 9113 §4–§6), with header blocks HPACK-encoded as literals without indexing and
 * without Huffman coding (RFC 7541 §6.2.2), and records every frame the server sends back. No HTTP/2
 * library sits in between, so a test can send what a well-behaved client never would: streams reset
 * as soon as they open, flow-control windows pushed past 2^31 − 1.
 *
 * @module
 */
import type { Buffer } from "node:buffer";
import tls from "node:tls";

const encoder = new TextEncoder();

/** The client connection preface (RFC 9113 §3.4). */
export const PREFACE: Uint8Array = encoder.encode("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");

/** Frame types (RFC 9113 §6). */
export const FrameType = {
  DATA: 0x0,
  HEADERS: 0x1,
  RST_STREAM: 0x3,
  SETTINGS: 0x4,
  GOAWAY: 0x7,
  WINDOW_UPDATE: 0x8,
} as const;

/** Frame flags (RFC 9113 §6): END_STREAM and ACK share a bit. */
export const Flag = { END_STREAM: 0x1, ACK: 0x1, END_HEADERS: 0x4 } as const;

/** Error codes (RFC 9113 §7). */
export const ErrorCode = {
  NO_ERROR: 0x0,
  PROTOCOL_ERROR: 0x1,
  INTERNAL_ERROR: 0x2,
  FLOW_CONTROL_ERROR: 0x3,
  CANCEL: 0x8,
  ENHANCE_YOUR_CALM: 0xb,
} as const;

/** The largest flow-control window, and the largest WINDOW_UPDATE increment (RFC 9113 §6.9). */
export const MAX_WINDOW = 0x7fffffff;

/** One frame as read off the wire. */
export interface Frame {
  readonly type: number;
  readonly flags: number;
  readonly stream: number;
  readonly payload: Uint8Array;
}

/** A GOAWAY's fields (RFC 9113 §6.8). */
export interface Goaway {
  readonly lastStream: number;
  readonly code: number;
}

/** Joins byte arrays. */
export function concat(parts: readonly Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((sum, part) => sum + part.byteLength, 0));
  let offset = 0;
  for (const part of parts) {
    out.set(part, offset);
    offset += part.byteLength;
  }
  return out;
}

/** Encodes one frame: 24-bit length, type, flags, 31-bit stream id, payload. */
export function encodeFrame(
  type: number,
  flags: number,
  stream: number,
  payload: Uint8Array = new Uint8Array(0),
): Uint8Array {
  const out = new Uint8Array(9 + payload.byteLength);
  const view = new DataView(out.buffer);
  view.setUint32(0, payload.byteLength << 8); // the 4th byte is overwritten by the type
  out[3] = type;
  out[4] = flags;
  view.setUint32(5, stream & MAX_WINDOW);
  out.set(payload, 9);
  return out;
}

/** A SETTINGS frame carrying `settings` as `[identifier, value]` pairs (none: empty SETTINGS). */
export function settingsFrame(settings: readonly [number, number][] = []): Uint8Array {
  const payload = new Uint8Array(6 * settings.length);
  const view = new DataView(payload.buffer);
  settings.forEach(([id, value], i) => {
    view.setUint16(6 * i, id);
    view.setUint32(6 * i + 2, value);
  });
  return encodeFrame(FrameType.SETTINGS, 0, 0, payload);
}

/** The acknowledgement of the server's SETTINGS. */
export function settingsAck(): Uint8Array {
  return encodeFrame(FrameType.SETTINGS, Flag.ACK, 0);
}

/** An RST_STREAM for `stream` with error `code`. */
export function rstStreamFrame(stream: number, code: number): Uint8Array {
  const payload = new Uint8Array(4);
  new DataView(payload.buffer).setUint32(0, code);
  return encodeFrame(FrameType.RST_STREAM, 0, stream, payload);
}

/** A WINDOW_UPDATE of `increment` on `stream` (0: the connection). */
export function windowUpdateFrame(stream: number, increment: number): Uint8Array {
  const payload = new Uint8Array(4);
  new DataView(payload.buffer).setUint32(0, increment & MAX_WINDOW);
  return encodeFrame(FrameType.WINDOW_UPDATE, 0, stream, payload);
}

/**
 * A HEADERS frame with END_HEADERS (and END_STREAM unless `endStream` is false) carrying
 * `fields` as one HPACK block.
 */
export function headersFrame(
  stream: number,
  fields: readonly [string, string][],
  endStream = true,
): Uint8Array {
  const flags = Flag.END_HEADERS | (endStream ? Flag.END_STREAM : 0);
  return encodeFrame(FrameType.HEADERS, flags, stream, hpackLiterals(fields));
}

/** The pseudo-headers of a GET of `path` on `authority` (over https unless told otherwise). */
export function getRequest(authority: string, path: string, scheme = "https"): [string, string][] {
  return [[":method", "GET"], [":scheme", scheme], [":authority", authority], [":path", path]];
}

/**
 * Encodes `fields` as an HPACK block of "literal header field without indexing — new name"
 * representations (RFC 7541 §6.2.2), plain strings, no Huffman: nothing enters the dynamic table,
 * so every block decodes the same however many are sent.
 */
export function hpackLiterals(fields: readonly [string, string][]): Uint8Array {
  const bytes: number[] = [];
  for (const [name, value] of fields) {
    bytes.push(0x00);
    for (const text of [name, value]) {
      const raw = encoder.encode(text);
      bytes.push(...hpackInteger(raw.byteLength, 7, 0x00), ...raw);
    }
  }
  return Uint8Array.from(bytes);
}

/** An HPACK integer with an N-bit prefix (RFC 7541 §5.1); `high` holds the bits above the prefix. */
export function hpackInteger(value: number, prefixBits: number, high: number): number[] {
  const max = (1 << prefixBits) - 1;
  if (value < max) return [high | value];
  const out = [high | max];
  let rest = value - max;
  while (rest >= 0x80) {
    out.push((rest & 0x7f) | 0x80);
    rest = Math.floor(rest / 0x80);
  }
  out.push(rest);
  return out;
}

/**
 * Splits whole frames off the front of `bytes`.
 *
 * @returns the frames, and the bytes of an unfinished frame left over
 */
export function parseFrames(bytes: Uint8Array): { frames: Frame[]; rest: Uint8Array } {
  const frames: Frame[] = [];
  let offset = 0;
  while (bytes.byteLength - offset >= 9) {
    const view = new DataView(bytes.buffer, bytes.byteOffset + offset);
    const length = view.getUint32(0) >>> 8;
    if (bytes.byteLength - offset < 9 + length) break;
    frames.push({
      type: bytes[offset + 3],
      flags: bytes[offset + 4],
      stream: view.getUint32(5) & MAX_WINDOW,
      payload: bytes.slice(offset + 9, offset + 9 + length),
    });
    offset += 9 + length;
  }
  return { frames, rest: bytes.slice(offset) };
}

/** The fields of a GOAWAY frame. */
export function goawayOf(frame: Frame): Goaway {
  const view = new DataView(frame.payload.buffer, frame.payload.byteOffset);
  return { lastStream: view.getUint32(0) & MAX_WINDOW, code: view.getUint32(4) };
}

/** The error code of an RST_STREAM frame. */
export function rstCodeOf(frame: Frame): number {
  return new DataView(frame.payload.buffer, frame.payload.byteOffset).getUint32(0);
}

/** How to reach a TLS listener: SNI name, trusted CAs (PEM), ALPN offer (default: `h2` only). */
export interface H2Target {
  readonly port: number;
  readonly servername: string;
  readonly ca: readonly string[];
  /** The protocols offered; empty offers no ALPN at all. */
  readonly alpn?: readonly string[];
}

/**
 * A TLS connection (offering ALPN `h2` only, unless told otherwise) that writes raw bytes and parses every frame
 * the server sends. Bytes after a non-HTTP/2 answer (an HTTP/1.1 reply) are kept in `raw`.
 */
export class H2Wire {
  readonly socket: tls.TLSSocket;
  /** Every frame received, in order. */
  readonly frames: Frame[] = [];
  /** Every byte received, as latin1 text (for a server that did not speak HTTP/2). */
  raw = "";
  #pending: Uint8Array = new Uint8Array(0);
  #closed = false;
  #closing = false;
  #wake: (() => void) | undefined;

  private constructor(socket: tls.TLSSocket) {
    this.socket = socket;
    socket.on("data", (chunk: Buffer) => this.#receive(chunk));
    const end = () => {
      if (!this.#closing) this.#closed = true;
      this.#wake?.();
    };
    socket.on("end", end);
    socket.on("close", end);
    socket.on("error", end);
  }

  /**
   * Connects and finishes the TLS handshake.
   *
   * @throws {Error} the client's error when the handshake fails
   */
  static open(target: H2Target): Promise<H2Wire> {
    return new Promise((resolve, reject) => {
      const socket = tls.connect({
        host: "127.0.0.1",
        port: target.port,
        servername: target.servername,
        ca: [...target.ca],
        ALPNProtocols: target.alpn?.length === 0 ? undefined : [...target.alpn ?? ["h2"]],
      });
      socket.once("secureConnect", () => resolve(new H2Wire(socket)));
      socket.once("error", (error) => {
        socket.destroy();
        reject(error);
      });
    });
  }

  /** The ALPN protocol the server chose (false: none). */
  get alpn(): string | false {
    return this.socket.alpnProtocol ?? false;
  }

  /** True once the server closed the connection (or it failed) — not after {@link close}. */
  get closed(): boolean {
    return this.#closed;
  }

  /** Writes bytes; resolves once they were handed to the socket (false if it was gone). */
  write(bytes: Uint8Array): Promise<boolean> {
    if (this.#closed || this.socket.destroyed) return Promise.resolve(false);
    return new Promise((resolve) => this.socket.write(bytes, (error) => resolve(!error)));
  }

  /** The frames received so far of `type`. */
  framesOf(type: number): Frame[] {
    return this.frames.filter((frame) => frame.type === type);
  }

  /** The first GOAWAY received, if any. */
  get goaway(): Goaway | undefined {
    const frame = this.frames.find((f) => f.type === FrameType.GOAWAY);
    return frame && goawayOf(frame);
  }

  /**
   * Waits until `done` holds, the connection closes, or `ms` pass — whichever is first.
   *
   * @returns true when `done` held
   */
  async until(done: () => boolean, ms: number): Promise<boolean> {
    const deadline = Date.now() + ms;
    while (!done() && !this.#closed && Date.now() < deadline) {
      let timer: ReturnType<typeof setTimeout> | undefined;
      await new Promise<void>((resolve) => {
        this.#wake = resolve;
        timer = setTimeout(resolve, Math.max(1, deadline - Date.now()));
      });
      clearTimeout(timer);
    }
    return done();
  }

  /** Closes the connection and waits until it is gone. */
  async close(): Promise<void> {
    if (this.socket.destroyed) return;
    this.#closing = true;
    const gone = new Promise((resolve) => this.socket.once("close", resolve));
    this.socket.destroy();
    await gone;
  }

  #receive(chunk: Buffer): void {
    this.raw += chunk.toString("latin1");
    const { frames, rest } = parseFrames(concat([this.#pending, new Uint8Array(chunk)]));
    this.frames.push(...frames);
    this.#pending = rest;
    this.#wake?.();
  }
}
