/**
 * Reads the TLS ClientHello at the start of a connection and finds its SNI host name, without
 * decrypting or answering anything — the first step of L4 passthrough, where the gateway routes
 * on the name and hands the untouched bytes to the tenant's own TLS server.
 *
 * Covers the record layer (RFC 8446 §5.1, RFC 5246 §6.2.1: a handshake message may be fragmented
 * over several records, which are reassembled), the ClientHello of TLS 1.3 (RFC 8446 §4.1.2) and
 * of TLS 1.2 and earlier (RFC 5246 §7.4.1.2, where extensions may be absent), and the
 * `server_name` extension (RFC 6066 §3). Everything else in the hello is checked only for shape.
 *
 * Hand-written: the gateway must call it on whatever bytes have arrived and be told "need more",
 * "done" or "not TLS" without the reader touching the socket, with a size cap, and without ever
 * throwing on hostile input. `read-tls-client-hello` reads (and unshifts) the socket itself, only
 * looks at the first record, throws on malformed lengths and has no cap; `sni` handles one record
 * only. Node's `tls` server exposes SNI only by terminating TLS, which passthrough must not do.
 *
 * @module
 */

/** What {@link readClientHello} made of the bytes read so far. */
export type HelloResult =
  /** A true prefix of a ClientHello: read more bytes and call again. */
  | { readonly kind: "incomplete" }
  /** A complete ClientHello; `serverName` is absent when it carries no `host_name`. */
  | { readonly kind: "hello"; readonly serverName?: string }
  /** Not a TLS ClientHello, malformed, or larger than the cap. Never names the SNI. */
  | { readonly kind: "invalid"; readonly reason: string };

/** The default cap on the bytes a ClientHello may occupy on the wire: two full records. */
export const DEFAULT_MAX_HELLO_BYTES = 16384 * 2;

/** RFC 8446 §5.1: the plaintext of one record is at most 2^14 bytes (no expansion slack). */
const MAX_RECORD_LENGTH = 16384;
/**
 * Not in any RFC: a bound on the records one ClientHello may be split over. Callers re-parse as
 * bytes trickle in, so without it a hello in one-byte records costs quadratic time; evasion tools
 * that split hellos use a handful of records.
 */
const MAX_HELLO_RECORDS = 64;
const RECORD_HEADER_LENGTH = 5;
const HANDSHAKE_HEADER_LENGTH = 4;
const CONTENT_TYPE_HANDSHAKE = 22;
const HANDSHAKE_CLIENT_HELLO = 1;
const EXTENSION_SERVER_NAME = 0x0000;
const NAME_TYPE_HOST_NAME = 0;

const INCOMPLETE: HelloResult = Object.freeze({ kind: "incomplete" });

function invalid(reason: string): HelloResult {
  return { kind: "invalid", reason };
}

/**
 * Parses the bytes read so far from a new connection. Never throws. Bytes after the end of the
 * ClientHello (early data, a change_cipher_spec record) are ignored.
 *
 * @param bytes everything received on the connection so far, from its first byte
 * @param maxHelloBytes cap on the wire size of the ClientHello, record headers included, so the
 *   caller never needs to buffer more than this while the result is `"incomplete"`
 * @returns `incomplete`, `hello` with the lower-case SNI name, or `invalid` with a reason
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { readClientHello } from "./client_hello.ts";
 *
 * assert.deepEqual(readClientHello(new Uint8Array([22, 3, 1])), { kind: "incomplete" });
 * assert.equal(readClientHello(new TextEncoder().encode("GET / HTTP/1.1\r\n")).kind, "invalid");
 * ```
 */
export function readClientHello(
  bytes: Uint8Array,
  maxHelloBytes: number = DEFAULT_MAX_HELLO_BYTES,
): HelloResult {
  const message = reassembleHandshake(bytes, maxHelloBytes);
  if (!(message instanceof Uint8Array)) return message;
  return parseClientHello(new Cursor(message));
}

/**
 * Walks the handshake records (RFC 8446 §5.1) and returns the body of the first handshake message
 * once all of it has arrived, or the verdict on the bytes so far.
 */
function reassembleHandshake(bytes: Uint8Array, maxHelloBytes: number): Uint8Array | HelloResult {
  const fragments: Uint8Array[] = [];
  let received = 0;
  let messageLength: number | undefined;
  let offset = 0;
  for (;;) {
    // The message still needs at least one byte, so at least one more record.
    if (offset + RECORD_HEADER_LENGTH + 1 > maxHelloBytes) return invalid("ClientHello too large");
    if (fragments.length === MAX_HELLO_RECORDS) return invalid("ClientHello in too many records");
    const record = readRecordHeader(bytes, offset);
    if (typeof record !== "number") return record;
    const start = offset + RECORD_HEADER_LENGTH;
    const available = Math.min(record, bytes.length - start);
    fragments.push(bytes.subarray(start, start + available));
    const before = received;
    received += available;
    if (messageLength === undefined) {
      const header = readHandshakeHeader(fragments, received, start - before, maxHelloBytes);
      if (header.kind === "invalid") return header;
      if (header.kind === "length") messageLength = HANDSHAKE_HEADER_LENGTH + header.length;
    }
    const used = messageLength === undefined
      ? available
      : Math.min(available, messageLength - before);
    if (start + used > maxHelloBytes) return invalid("ClientHello too large");
    if (messageLength !== undefined && received >= messageLength) {
      return concat(fragments, received).subarray(HANDSHAKE_HEADER_LENGTH, messageLength);
    }
    if (start + record > bytes.length) return INCOMPLETE;
    offset = start + record;
  }
}

/** Checks a record header (RFC 8446 §5.1) as far as it has arrived; returns its length. */
function readRecordHeader(bytes: Uint8Array, offset: number): number | HelloResult {
  const available = bytes.length - offset;
  if (available >= 1 && bytes[offset] !== CONTENT_TYPE_HANDSHAKE) {
    return invalid("Not a TLS handshake record");
  }
  if (available >= 2 && bytes[offset + 1] !== 3) return invalid("Not a TLS record version");
  if (available < RECORD_HEADER_LENGTH) return INCOMPLETE;
  const length = (bytes[offset + 3] << 8) | bytes[offset + 4];
  if (length > MAX_RECORD_LENGTH) return invalid("TLS record longer than 2^14 bytes");
  // RFC 8446 §5.1: zero-length fragments of handshake messages MUST NOT be sent.
  if (length === 0) return invalid("Empty TLS handshake record");
  return length;
}

/**
 * Checks the handshake header (RFC 8446 §4) as far as it has arrived: type client_hello, and a
 * length that fits the cap even if all the rest of the message came in the current record.
 */
function readHandshakeHeader(
  fragments: readonly Uint8Array[],
  received: number,
  /** Where the message would start on the wire if all of it were in the current record. */
  wireStart: number,
  maxHelloBytes: number,
): { readonly kind: "length"; readonly length: number } | HelloResult {
  if (received === 0) return INCOMPLETE;
  if (fragments[0][0] !== HANDSHAKE_CLIENT_HELLO) {
    return invalid("First handshake message is not a ClientHello");
  }
  if (received < HANDSHAKE_HEADER_LENGTH) return INCOMPLETE;
  const header = concat(fragments, received);
  const length = (header[1] << 16) | (header[2] << 8) | header[3];
  const leastWireBytes = wireStart + HANDSHAKE_HEADER_LENGTH + length;
  if (leastWireBytes > maxHelloBytes) return invalid("ClientHello too large");
  return { kind: "length", length };
}

/** Joins fragments into one array (a single fragment is returned as is). */
function concat(fragments: readonly Uint8Array[], length: number): Uint8Array {
  if (fragments.length === 1) return fragments[0];
  const joined = new Uint8Array(length);
  let at = 0;
  for (const fragment of fragments) {
    joined.set(fragment, at);
    at += fragment.length;
  }
  return joined;
}

/**
 * Parses a ClientHello body (RFC 8446 §4.1.2; RFC 5246 §7.4.1.2): legacy_version, random,
 * legacy_session_id<0..32>, cipher_suites<2..2^16-2>, legacy_compression_methods<1..2^8-1>,
 * then extensions<8..2^16-1>, which a TLS 1.2 hello may omit. The extensions must end the body.
 */
function parseClientHello(body: Cursor): HelloResult {
  const version = body.uint(2);
  if (version === undefined || version >> 8 !== 3) return invalid("Bad ClientHello version");
  if (!body.skip(32)) return invalid("ClientHello random truncated");
  const sessionId = body.vector(1);
  if (sessionId === undefined || sessionId.remaining > 32) return invalid("Bad legacy_session_id");
  const suites = body.vector(2);
  if (suites === undefined || suites.remaining < 2 || suites.remaining % 2 !== 0) {
    return invalid("Bad cipher_suites");
  }
  const compression = body.vector(1);
  if (compression === undefined || compression.remaining < 1) {
    return invalid("Bad legacy_compression_methods");
  }
  if (body.remaining === 0) return { kind: "hello" };
  const extensions = body.vector(2);
  if (extensions === undefined || body.remaining !== 0) return invalid("Bad extensions length");
  return readExtensions(extensions);
}

/** Walks the extensions (RFC 8446 §4.2: no type twice) and reads `server_name` when present. */
function readExtensions(extensions: Cursor): HelloResult {
  const seen = new Set<number>();
  let serverName: string | undefined;
  while (extensions.remaining > 0) {
    const type = extensions.uint(2);
    const data = extensions.vector(2);
    if (type === undefined || data === undefined) return invalid("Extension runs past its block");
    if (seen.has(type)) return invalid("Duplicate extension type");
    seen.add(type);
    if (type !== EXTENSION_SERVER_NAME) continue;
    const name = readServerName(data);
    if (typeof name !== "string" && name !== undefined) return name;
    serverName = name;
  }
  return serverName === undefined ? { kind: "hello" } : { kind: "hello", serverName };
}

/**
 * Reads `ServerNameList server_name_list<1..2^16-1>` (RFC 6066 §3), which must fill the extension.
 * Entries of another name_type are skipped assuming the same `opaque<1..2^16-1>` shape; more than
 * one `host_name` is invalid (RFC 6066: "MUST NOT contain more than one name of the same type").
 */
function readServerName(data: Cursor): string | undefined | HelloResult {
  const list = data.vector(2);
  if (list === undefined || data.remaining !== 0 || list.remaining === 0) {
    return invalid("Bad server_name list length");
  }
  let hostName: string | undefined;
  while (list.remaining > 0) {
    const nameType = list.uint(1);
    const name = list.vector(2);
    if (nameType === undefined || name === undefined) return invalid("server_name entry overruns");
    if (nameType !== NAME_TYPE_HOST_NAME) continue;
    if (hostName !== undefined) return invalid("More than one host_name");
    const checked = checkHostName(name.rest());
    if (checked === undefined) return invalid("Bad SNI host_name");
    hostName = checked;
  }
  return hostName;
}

/**
 * Accepts 1–255 bytes of ASCII letters, digits, hyphens and dots; returns the name lower-cased
 * without one trailing dot (RFC 6066 §3 sends it without; some clients add one), or undefined.
 */
function checkHostName(bytes: Uint8Array): string | undefined {
  if (bytes.length < 1 || bytes.length > 255) return undefined;
  let name = "";
  for (const byte of bytes) {
    if (!isHostNameByte(byte)) return undefined;
    name += String.fromCharCode(byte >= 0x41 && byte <= 0x5a ? byte + 0x20 : byte);
  }
  if (name.endsWith(".")) name = name.slice(0, -1);
  return name.length > 0 ? name : undefined;
}

function isHostNameByte(byte: number): boolean {
  return (byte >= 0x30 && byte <= 0x39) || // 0-9
    (byte >= 0x41 && byte <= 0x5a) || // A-Z
    (byte >= 0x61 && byte <= 0x7a) || // a-z
    byte === 0x2d || byte === 0x2e; // - .
}

/** A bounds-checked reader over `bytes[start, end)`: a read past `end` returns undefined. */
class Cursor {
  readonly #bytes: Uint8Array;
  readonly #end: number;
  #offset: number;

  constructor(bytes: Uint8Array, start = 0, end = bytes.length) {
    this.#bytes = bytes;
    this.#offset = start;
    this.#end = end;
  }

  /** Bytes left before the end. */
  get remaining(): number {
    return this.#end - this.#offset;
  }

  /** Reads a big-endian unsigned integer of `width` bytes (RFC 8446 §3.3). */
  uint(width: 1 | 2 | 3): number | undefined {
    if (this.remaining < width) return undefined;
    let value = 0;
    for (let i = 0; i < width; i++) value = (value << 8) | this.#bytes[this.#offset + i];
    this.#offset += width;
    return value;
  }

  /** Skips `count` bytes; false when fewer remain. */
  skip(count: number): boolean {
    if (this.remaining < count) return false;
    this.#offset += count;
    return true;
  }

  /** Reads a vector with a `width`-byte length prefix (RFC 8446 §3.4) as a sub-reader. */
  vector(width: 1 | 2): Cursor | undefined {
    const length = this.uint(width);
    if (length === undefined || this.remaining < length) return undefined;
    const start = this.#offset;
    this.#offset += length;
    return new Cursor(this.#bytes, start, start + length);
  }

  /** The unread bytes, consuming them. */
  rest(): Uint8Array {
    const rest = this.#bytes.subarray(this.#offset, this.#end);
    this.#offset = this.#end;
    return rest;
  }
}
