/**
 * HTTP/1.1 response heads (RFC 9112) for the upstream connections the gateway reads itself
 * (owned_conns.ts): {@link parseResponseHead} parses one response head out of the connection's
 * read buffer and says how its body is framed; the body decoder (h1_body.ts) then hands the body on
 * as views of that same buffer, never as copies — the copies are what this replaces
 * (docs/decisions.md §19: `node:http` gave every body chunk a fresh buffer, and 32 downloads held
 * hundreds of megabytes of them). No I/O here.
 *
 * Strict, because the gateway relays what it parses and a response it frames differently from the
 * upstream is a desynchronised connection: CRLF line ends only, no obs-fold, no control bytes in
 * values, HTTP/1.0 or HTTP/1.1 only; Content-Length only as digits (an identical list, or identical
 * fields, are one value, RFC 9110 §8.6 — compared as written, as h11 compares them, so `01` and `1`
 * conflict; {@link agreedLength}); Transfer-Encoding only as a single `chunked`, never beside Content-Length
 * and never on HTTP/1.0 (RFC 9112 §6.1). Any breach is a {@link ResponseFramingError}: the
 * exchange fails and the connection is not reused.
 *
 * Hand-written, not a package: undici's llhttp copies every read into WebAssembly memory before it
 * parses, which is the copy this module exists to avoid, and no parser on the registries decodes
 * chunked bodies into views of a caller's buffer. `tests/h1_response_test.ts` holds the head
 * parser and the body decoder against h11 (Python) case by case and lists where they are
 * deliberately stricter.
 *
 * @module
 */
import { CLASS, COLON, CR, FIELD, HTAB, LF, quoted, SP, TCHAR } from "./h1_bytes.ts";

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

const DEFAULT_MAX_HEAD_BYTES = 16384;
const DEFAULT_MAX_HEADERS = 100;

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

/**
 * The one decimal value a response's Content-Length fields agree on (RFC 9110 §8.6: a list of
 * identical values, or several identical fields, may be taken as that one value, and a proxy
 * forwards it as one value), without leading zeros; null when a member is not 1*DIGIT, or two
 * members differ as written (`1, 2`, or `01` beside `1`: h11 refuses both; RFC 9112 §6.3 says such
 * a response is unrecoverable).
 *
 * @param values every Content-Length field value of the message, in order
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { agreedLength } from "./h1_response.ts";
 * assert.equal(agreedLength(["1, 1"]), "1");
 * assert.equal(agreedLength(["007", "007"]), "7");
 * assert.equal(agreedLength(["1", "2"]), null);
 * assert.equal(agreedLength(["01", "1"]), null);
 * ```
 */
export function agreedLength(values: readonly string[]): string | null {
  let agreed: string | undefined;
  for (const value of values) {
    for (const member of members(value)) {
      if (!/^[0-9]+$/.test(member) || (agreed !== undefined && member !== agreed)) return null;
      agreed = member;
    }
  }
  return agreed === undefined ? null : agreed.replace(/^0+(?=[0-9])/, "");
}

/** The body's framing and whether the connection stays open (RFC 9112 §6.3, §9.3). */
function frameOf(method: string, status: number, minor: 0 | 1, rawHeaders: readonly string[]) {
  const lengths: string[] = [];
  let chunked = false;
  let close = false;
  for (let i = 0; i < rawHeaders.length; i += 2) {
    const name = rawHeaders[i].toLowerCase();
    const value = rawHeaders[i + 1];
    if (name === "content-length") {
      lengths.push(value);
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
  const length = lengths.length === 0 ? undefined : agreedLength(lengths);
  if (length === null) {
    throw headError(`Invalid or conflicting Content-Length ${quoted(lengths.join(", "))}`);
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
