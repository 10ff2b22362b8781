/**
 * HTTP/1.1 response framing (RFC 9112) for the upstream connections the gateway reads itself
 * (owned_conns.ts): {@link parseResponseHead} parses one response head out of the connection's
 * read buffer, and a {@link BodyDecoder} hands the body on as views of that same buffer, never as
 * copies — the copies are what this replaces (docs/decisions.md §19: `node:http` gave every body
 * chunk a fresh buffer, and 32 downloads held hundreds of megabytes of them). No I/O here.
 *
 * Strict, because the gateway relays what it parses and a response it frames differently from the
 * upstream is a desynchronised connection: CRLF line ends only, no obs-fold, no control bytes in
 * values, HTTP/1.0 or HTTP/1.1 only; Content-Length only as digits (an identical list is one
 * value, RFC 9110 §8.6); Transfer-Encoding only as a single `chunked`, never beside Content-Length
 * and never on HTTP/1.0 (RFC 9112 §6.1); chunk sizes as bare hex digits. Any breach is a
 * {@link ResponseFramingError}: the exchange fails and the connection is not reused.
 *
 * Hand-written, not a package: undici's llhttp copies every read into WebAssembly memory before it
 * parses, which is the copy this module exists to avoid, and no parser on the registries decodes
 * chunked bodies into views of a caller's buffer. `tests/h1_response_test.ts` holds it against
 * h11 (Python) case by case and lists where it is deliberately stricter.
 *
 * @module
 */

/** How the response body is delimited (RFC 9112 §6.3). */
export type Framing =
  | { readonly kind: "none" }
  | { readonly kind: "length"; readonly length: number }
  | { readonly kind: "chunked" }
  | { readonly kind: "close" };

/** One parsed response head. */
export interface ResponseHead {
  /** 100–999 (RFC 9112 §4: 3DIGIT; below 100 is refused). */
  readonly status: number;
  readonly reason: string;
  /** HTTP/1.0 or HTTP/1.1. */
  readonly minor: 0 | 1;
  /** `[name, value, name, value …]`: names as received, values without surrounding OWS. */
  readonly rawHeaders: string[];
  /** Bytes the head took from `start`, the final CRLFCRLF included. */
  readonly headBytes: number;
  readonly framing: Framing;
  /** The connection may carry another request once this body is read (never for 101). */
  readonly keepAlive: boolean;
}

/** The upstream's bytes break HTTP/1.1 framing: the exchange fails, the connection is never reused. */
export class ResponseFramingError extends Error {
  /** Where it broke: the head (nothing relayed yet) or the body (the response is cut short). */
  readonly part: "head" | "body";

  /**
   * @param message what was wrong
   * @param part where it was
   */
  constructor(message: string, part: "head" | "body") {
    super(message);
    this.name = "ResponseFramingError";
    this.part = part;
  }
}

const CR = 0x0d;
const LF = 0x0a;
const SP = 0x20;
const HTAB = 0x09;
const COLON = 0x3a;
const SEMICOLON = 0x3b;
const DEFAULT_MAX_HEAD_BYTES = 16384;
const DEFAULT_MAX_HEADERS = 100;
const DEFAULT_MAX_CHUNK_LINE_BYTES = 4096;
const DEFAULT_MAX_TRAILER_BYTES = 16384;

/** Byte classes: a tchar (RFC 9110 §5.6.2); a field-value byte: VCHAR, obs-text, SP, HTAB (§5.5). */
const TCHAR = 1;
const FIELD = 2;
const CLASS = new Uint8Array(256);
for (let b = 0; b < 256; b++) {
  if (b === HTAB || (b >= SP && b !== 0x7f)) CLASS[b] |= FIELD;
  if (/^[-!#$%&'*+.^_`|~0-9A-Za-z]$/.test(String.fromCharCode(b))) CLASS[b] |= TCHAR;
}

const NONE: Framing = Object.freeze({ kind: "none" });
const CHUNKED: Framing = Object.freeze({ kind: "chunked" });
const CLOSE: Framing = Object.freeze({ kind: "close" });
const HTTP_1_DOT = [0x48, 0x54, 0x54, 0x50, 0x2f, 0x31, 0x2e]; // "HTTP/1."

function latin1(buf: Uint8Array, from: number, to: number): string {
  let text = "";
  for (let i = from; i < to; i += 8192) {
    text += String.fromCharCode(...buf.subarray(i, Math.min(to, i + 8192)));
  }
  return text;
}

/** Upstream text for a message: at most 64 chars, quoted, anything not printable ASCII escaped. */
function quoted(text: string): string {
  const json = JSON.stringify(text.slice(0, 64));
  return json.replace(/[\x7f-\xff]/g, (c) => `\\u00${c.charCodeAt(0).toString(16)}`);
}

function headError(message: string): ResponseFramingError {
  return new ResponseFramingError(message, "head");
}

/**
 * Parses one response head from `buf[start, end)`; the caller keeps unparsed head bytes contiguous
 * and calls again with the grown range when this returns null (each call rescans: O(n)).
 *
 * @param buf the connection's read buffer
 * @param start where the head begins
 * @param end where the bytes read so far end
 * @param request the request's method (HEAD and CONNECT change the framing) and the head's limits
 * @returns the head, or null when it is not complete yet
 * @throws {ResponseFramingError} when the bytes can never be a valid head, or it would exceed
 *   `maxHeadBytes` (default 16384) or `maxHeaders` fields (default 100)
 * @example
 * ```ts
 * import { parseResponseHead } from "./h1_response.ts";
 * const wire = new TextEncoder().encode("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi");
 * const head = parseResponseHead(wire, 0, wire.length, { method: "GET" });
 * // head?.framing: { kind: "length", length: 2 }; head?.headBytes: 38
 * ```
 */
export function parseResponseHead(
  buf: Uint8Array,
  start: number,
  end: number,
  request: {
    readonly method: string;
    readonly maxHeadBytes?: number;
    readonly maxHeaders?: number;
  },
): ResponseHead | null {
  const maxHeadBytes = request.maxHeadBytes ?? DEFAULT_MAX_HEAD_BYTES;
  const maxHeaders = request.maxHeaders ?? DEFAULT_MAX_HEADERS;
  const headEnd = findHeadEnd(buf, start, Math.min(end, start + maxHeadBytes));
  if (headEnd < 0) {
    if (end - start >= maxHeadBytes) throw headError(`Response head exceeds ${maxHeadBytes} bytes`);
    return null;
  }
  // findHeadEnd proved every LF in the head follows a CR; a CR elsewhere fails a line's check.
  let lineEnd = buf.indexOf(LF, start) - 1;
  const { status, reason, minor } = parseStatusLine(buf, start, lineEnd);
  const rawHeaders: string[] = [];
  for (let at = lineEnd + 2; at < headEnd - 2; at = lineEnd + 2) {
    lineEnd = buf.indexOf(LF, at) - 1;
    if (rawHeaders.length >= 2 * maxHeaders) {
      throw headError(`Response head has more than ${maxHeaders} header fields`);
    }
    parseFieldLine(buf, at, lineEnd, rawHeaders);
  }
  const { framing, keepAlive } = frameOf(request.method, status, minor, rawHeaders);
  return { status, reason, minor, rawHeaders, headBytes: headEnd - start, framing, keepAlive };
}

/**
 * The offset just past the head's CRLFCRLF in `buf[start, limit)`, or -1; refuses a bare LF. Scans
 * with the native `indexOf`, as a head that trickles in a byte per read is scanned once per read.
 */
function findHeadEnd(buf: Uint8Array, start: number, limit: number): number {
  const head = buf.subarray(start, limit);
  for (let i = head.indexOf(LF); i !== -1; i = head.indexOf(LF, i + 1)) {
    if (i === 0 || head[i - 1] !== CR) throw headError("Bare LF in response head");
    if (i >= 3 && head[i - 2] === LF) return start + i + 1;
  }
  return -1;
}

/** `HTTP/1.x SP 3DIGIT [SP reason]` (RFC 9112 §4), the line being `buf[from, to)`. */
function parseStatusLine(buf: Uint8Array, from: number, to: number) {
  const bad = () => headError(`Malformed status line ${quoted(latin1(buf, from, to))}`);
  if (to - from < 12 || buf[from + 8] !== SP) throw bad();
  for (let i = 0; i < HTTP_1_DOT.length; i++) if (buf[from + i] !== HTTP_1_DOT[i]) throw bad();
  const minor = buf[from + 7] - 0x30;
  if (minor !== 0 && minor !== 1) throw bad();
  let status = 0;
  for (let i = from + 9; i < from + 12; i++) {
    const digit = buf[i] - 0x30;
    if (digit < 0 || digit > 9) throw bad();
    status = status * 10 + digit;
  }
  if (status < 100) throw bad();
  if (to > from + 12 && buf[from + 12] !== SP) throw bad();
  for (let i = from + 13; i < to; i++) if (!(CLASS[buf[i]] & FIELD)) throw bad();
  return { status, reason: latin1(buf, Math.min(from + 13, to), to), minor: minor as 0 | 1 };
}

/** `token ":" OWS value OWS` (RFC 9112 §5), the line being `buf[from, to)`; pushes name and value. */
function parseFieldLine(buf: Uint8Array, from: number, to: number, out: string[]): void {
  if (buf[from] === SP || buf[from] === HTAB) throw headError("Obsolete line folding in response");
  let colon = from;
  while (colon < to && CLASS[buf[colon]] & TCHAR) colon++;
  if (colon === from || colon === to || buf[colon] !== COLON) {
    throw headError(`Malformed header field line ${quoted(latin1(buf, from, to))}`);
  }
  let valueFrom = colon + 1;
  let valueTo = to;
  for (let i = valueFrom; i < to; i++) {
    if (!(CLASS[buf[i]] & FIELD)) {
      throw headError(`Control byte in header ${quoted(latin1(buf, from, to))}`);
    }
  }
  while (valueFrom < valueTo && (buf[valueFrom] === SP || buf[valueFrom] === HTAB)) valueFrom++;
  while (valueTo > valueFrom && (buf[valueTo - 1] === SP || buf[valueTo - 1] === HTAB)) valueTo--;
  out.push(latin1(buf, from, colon), latin1(buf, valueFrom, valueTo));
}

/** List members of a field value, OWS trimmed (RFC 9110 §5.6.1). */
function members(value: string): string[] {
  return value.split(",").map((member) => member.replace(/^[ \t]+|[ \t]+$/g, ""));
}

/** The body's framing and whether the connection stays open (RFC 9112 §6.3, §9.3). */
function frameOf(method: string, status: number, minor: 0 | 1, rawHeaders: readonly string[]) {
  let length: string | undefined;
  let chunked = false;
  let close = false;
  for (let i = 0; i < rawHeaders.length; i += 2) {
    const name = rawHeaders[i].toLowerCase();
    const value = rawHeaders[i + 1];
    if (name === "content-length") {
      for (const member of members(value)) {
        if (!/^[0-9]+$/.test(member) || (length !== undefined && member !== length)) {
          throw headError(`Invalid or conflicting Content-Length ${quoted(value)}`);
        }
        length = member;
      }
    } else if (name === "transfer-encoding") {
      for (const coding of members(value)) {
        if (coding.toLowerCase() !== "chunked") {
          throw headError(`Unsupported Transfer-Encoding ${quoted(value)}`);
        }
        if (chunked) throw headError("Transfer-Encoding chunked more than once");
        chunked = true;
      }
    } else if (name === "connection") {
      close ||= members(value).some((token) => token.toLowerCase() === "close");
    }
  }
  if (chunked && length !== undefined) throw headError("Both Transfer-Encoding and Content-Length");
  if (chunked && minor === 0) throw headError("Transfer-Encoding on an HTTP/1.0 response");
  const bytes = length === undefined ? undefined : Number(length);
  if (bytes !== undefined && bytes > Number.MAX_SAFE_INTEGER) {
    throw headError(`Content-Length "${length}" is too large`);
  }
  const tunnel = status === 101 || (method === "CONNECT" && status >= 200 && status < 300);
  let framing: Framing;
  if (method === "HEAD" || status < 200 || status === 204 || status === 304 || tunnel) {
    framing = NONE;
  } else if (chunked) framing = CHUNKED;
  else if (bytes !== undefined) framing = { kind: "length", length: bytes };
  else framing = CLOSE;
  return { framing, keepAlive: minor === 1 && !close && !tunnel && framing !== CLOSE };
}

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
 * import { BodyDecoder } from "./h1_response.ts";
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
