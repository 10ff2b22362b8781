/**
 * HTTP/1.1 response bodies (RFC 9112 §6, §7) for the upstream connections the gateway reads
 * itself: a {@link BodyDecoder} takes the framing the head parser found (h1_response.ts) and hands
 * the body on as views of the connection's read buffer, never as copies, stopping right after its
 * last byte so that a pipelined response stays the caller's. No I/O here.
 *
 * As strict as the head: chunk sizes as bare hex digits (no whitespace, at most 2^53 - 1), a CRLF
 * after every chunk-size line and every chunk, chunk extensions and trailer lines checked like
 * field lines and bounded, then discarded. Any breach is a {@link ResponseFramingError} with
 * `part: "body"`: the response is cut short and the connection is not reused. Hand-written for the
 * reason h1_response.ts gives: no parser on the registries decodes chunked bodies into views of a
 * caller's buffer.
 *
 * @module
 */
import { CLASS, COLON, CR, FIELD, LF, quoted, TCHAR } from "./h1_bytes.ts";
import { type Framing, ResponseFramingError } from "./h1_response.ts";

const SEMICOLON = 0x3b;
const DEFAULT_MAX_CHUNK_LINE_BYTES = 4096;
const DEFAULT_MAX_TRAILER_BYTES = 16384;

// BodyDecoder states for chunked bodies.
const SIZE = 0; // chunk-size hex digits
const EXT = 1; // after ";": chunk-ext, skipped
const SIZE_LF = 2;
const DATA = 3;
const DATA_CR = 4;
const DATA_LF = 5;
const LINE = 6; // start of a trailer line, or the final CRLF
const NAME = 7;
const VALUE = 8;
const LINE_LF = 9;
const LAST_LF = 10;
const DONE = 11;

/**
 * Decodes a body framed as a {@link Framing}, handing each run of body bytes on as a view of the
 * buffer it was given (never a copy), valid only until `onData` returns and the caller reuses the
 * buffer. Keeps no view between feeds: a chunk line or trailer split across reads is decoded byte
 * by byte into a few counters; trailers are checked as field lines and discarded.
 *
 * @example
 * ```ts
 * import { BodyDecoder } from "./h1_body.ts";
 * const body = new TextEncoder().encode("3;x=y\r\nabc\r\n0\r\n\r\nHTTP/1.1");
 * const decoder = new BodyDecoder({ kind: "chunked" });
 * const views: Uint8Array[] = [];
 * const used = decoder.feed(body, 0, body.length, (view) => views.push(view));
 * // views: one view of body[7, 10), "abc"
 * // used: 19 (the next response's bytes are left); decoder.done: true
 * ```
 */
export class BodyDecoder {
  readonly #framing: Framing;
  readonly #maxLineBytes: number;
  readonly #maxTrailerBytes: number;
  #state: number;
  #remaining: number;
  #size = 0;
  #digits = 0;
  #lineBytes = 0;
  #trailerBytes = 0;

  /**
   * @param framing the head's framing
   * @param limits a chunk line's bytes before its CRLF, extensions included (default 4096); the
   *   trailer section's bytes, its final CRLF included (default 16384)
   */
  constructor(
    framing: Framing,
    limits: { maxChunkLineBytes?: number; maxTrailerBytes?: number } = {},
  ) {
    this.#framing = framing;
    this.#maxLineBytes = limits.maxChunkLineBytes ?? DEFAULT_MAX_CHUNK_LINE_BYTES;
    this.#maxTrailerBytes = limits.maxTrailerBytes ?? DEFAULT_MAX_TRAILER_BYTES;
    this.#remaining = framing.kind === "length" ? framing.length : 0;
    const empty = framing.kind === "none" || (framing.kind === "length" && framing.length === 0);
    this.#state = empty ? DONE : framing.kind === "chunked" ? SIZE : DATA;
  }

  /** True once the whole body (a chunked body's trailers included) has been consumed. */
  get done(): boolean {
    return this.#state === DONE;
  }

  /**
   * Consumes body bytes from `buf[start, end)`, stopping right after the body's last byte.
   *
   * @param buf the connection's read buffer
   * @param start the first unconsumed byte
   * @param end the end of the bytes read
   * @param onData given each run of body bytes, a view of `buf`
   * @returns how many bytes it consumed; the rest (a pipelined response) is the caller's
   * @throws {ResponseFramingError} on a malformed chunk line, size, CRLF or trailer
   */
  feed(buf: Uint8Array, start: number, end: number, onData: (view: Uint8Array) => void): number {
    let i = start;
    while (i < end && this.#state !== DONE) {
      if (this.#state !== DATA) {
        this.#step(buf[i++]);
        continue;
      }
      const close = this.#framing.kind === "close";
      const take = close ? end - i : Math.min(this.#remaining, end - i);
      onData(buf.subarray(i, i + take));
      i += take;
      if (close) continue;
      this.#remaining -= take;
      if (this.#remaining === 0) this.#state = this.#framing.kind === "chunked" ? DATA_CR : DONE;
    }
    return i - start;
  }

  /**
   * The connection ended.
   *
   * @returns true when the body is complete (only a close-delimited body completes by EOF); false
   *   when it was cut short
   */
  eof(): boolean {
    if (this.#framing.kind === "close") this.#state = DONE;
    return this.#state === DONE;
  }

  #step(b: number): void {
    switch (this.#state) {
      case SIZE:
      case EXT:
        return this.#sizeLine(b);
      case SIZE_LF:
        this.#expect(b, LF, "chunk-size line");
        this.#state = this.#size === 0 ? LINE : DATA;
        this.#remaining = this.#size;
        this.#size = this.#digits = this.#lineBytes = 0;
        return;
      case DATA_CR:
        this.#expect(b, CR, "chunk data");
        this.#state = DATA_LF;
        return;
      case DATA_LF:
        this.#expect(b, LF, "chunk data");
        this.#state = SIZE;
        return;
      default:
        return this.#trailer(b);
    }
  }

  /** `1*HEXDIG [";" chunk-ext] CR` (RFC 9112 §7.1): no whitespace, at most 2^53 - 1. */
  #sizeLine(b: number): void {
    if (b === CR && this.#digits > 0) {
      this.#state = SIZE_LF;
      return;
    }
    if (++this.#lineBytes > this.#maxLineBytes) {
      throw bodyError(`Chunk-size line exceeds ${this.#maxLineBytes} bytes`);
    }
    if (this.#state === EXT) {
      if (!(CLASS[b] & FIELD)) throw bodyError("Control byte in a chunk extension");
      return;
    }
    const digit = hexValue(b);
    if (digit >= 0) {
      this.#size = this.#size * 16 + digit;
      this.#digits++;
      if (this.#size > Number.MAX_SAFE_INTEGER) throw bodyError("Chunk size is too large");
    } else if (b === SEMICOLON && this.#digits > 0) this.#state = EXT;
    else throw bodyError(`Malformed chunk size at byte ${quoted(String.fromCharCode(b))}`);
  }

  /** Trailer field lines (checked like header lines, then discarded) and the final CRLF (§7.1.2). */
  #trailer(b: number): void {
    if (++this.#trailerBytes > this.#maxTrailerBytes) {
      throw bodyError(`Trailer section exceeds ${this.#maxTrailerBytes} bytes`);
    }
    const state = this.#state;
    if (state === LINE && b === CR) this.#state = LAST_LF;
    else if (state === LINE && CLASS[b] & TCHAR) this.#state = NAME;
    else if (state === NAME && b === COLON) this.#state = VALUE;
    else if (state === NAME && CLASS[b] & TCHAR) return;
    else if (state === VALUE && b === CR) this.#state = LINE_LF;
    else if (state === VALUE && CLASS[b] & FIELD) return;
    else if ((state === LINE_LF || state === LAST_LF) && b === LF) {
      this.#state = state === LINE_LF ? LINE : DONE;
    } else throw bodyError("Malformed trailer field line");
  }

  #expect(b: number, want: number, after: string): void {
    if (b !== want) throw bodyError(`Expected CRLF after ${after}`);
  }
}

function bodyError(message: string): ResponseFramingError {
  return new ResponseFramingError(message, "body");
}

function hexValue(b: number): number {
  if (b >= 0x30 && b <= 0x39) return b - 0x30;
  const lower = b | 0x20;
  return lower >= 0x61 && lower <= 0x66 ? lower - 0x61 + 10 : -1;
}
