/**
 * The owned upstream reader's HTTP/1.1 response framing (src/egress/h1_response.ts): each refusal
 * and each framing choice, both sides of every limit, every split point of a corpus of responses
 * through a buffer overwritten after each read, and a differential against h11 (Python,
 * `fixtures/h1_response_oracle.py`) over valid responses and smuggling tricks, with the cases
 * where the module is deliberately stricter than h11 listed and asserted.
 *
 * @module
 */
import assert from "node:assert/strict";
import { BodyDecoder } from "../src/egress/h1_body.ts";
import {
  agreedLength,
  type Framing,
  parseResponseHead,
  ResponseFramingError,
  type ResponseHead,
} from "../src/egress/h1_response.ts";
import { peerTest } from "./fixtures/require.ts";

const ORACLE = new URL("./fixtures/h1_response_oracle.py", import.meta.url).pathname;

/** A binary string (one char per byte) as bytes. */
function bytes(text: string): Uint8Array {
  return Uint8Array.from(text, (c) => c.charCodeAt(0));
}

function binary(view: Uint8Array): string {
  let out = "";
  for (let i = 0; i < view.length; i += 8192) {
    out += String.fromCharCode(...view.subarray(i, i + 8192));
  }
  return out;
}

type HeadOptions = { method?: string; maxHeadBytes?: number; maxHeaders?: number };

function head(text: string, options: HeadOptions = {}): ResponseHead | null {
  const buf = bytes(text);
  return parseResponseHead(buf, 0, buf.length, { method: "GET", ...options });
}

function refusesHead(text: string, options: HeadOptions = {}): void {
  assert.throws(
    () => head(text, options),
    (e) => e instanceof ResponseFramingError && e.part === "head",
  );
}

type Limits = { maxChunkLineBytes?: number; maxTrailerBytes?: number };

/** Feeds `text` whole; the body, the bytes consumed, and whether it is done. */
function decode(framing: Framing, text: string, limits: Limits = {}) {
  const decoder = new BodyDecoder(framing, limits);
  let body = "";
  const used = decoder.feed(bytes(text), 0, text.length, (view) => body += binary(view));
  return { body, used, done: decoder.done, decoder };
}

function refusesBody(framing: Framing, text: string, limits: Limits = {}): void {
  assert.throws(
    () => decode(framing, text, limits),
    (e) => e instanceof ResponseFramingError && e.part === "body",
  );
}

const CHUNKED: Framing = { kind: "chunked" };
const OK = "HTTP/1.1 200 OK\r\n";

// ---------------------------------------------------------------------------------------------
// Head: refusals, framing, keep-alive, limits

const HEAD_REFUSALS: readonly [string, string][] = [
  ["HTTP/2.0", "HTTP/2.0 200 OK\r\n\r\n"],
  ["HTTP/1.2", "HTTP/1.2 200 OK\r\n\r\n"],
  ["a lowercase version", "http/1.1 200 OK\r\n\r\n"],
  ["two spaces before the status", "HTTP/1.1  200 OK\r\n\r\n"],
  ["a two-digit status", "HTTP/1.1 20 OK\r\n\r\n"],
  ["a four-digit status", "HTTP/1.1 2000 OK\r\n\r\n"],
  ["a status below 100", "HTTP/1.1 099 Low\r\n\r\n"],
  ["a tab instead of the space before the reason", "HTTP/1.1 200\tOK\r\n\r\n"],
  ["a control byte in the reason", "HTTP/1.1 200 O\x01K\r\n\r\n"],
  ["DEL in the reason", "HTTP/1.1 200 O\x7fK\r\n\r\n"],
  ["an empty line before the status line", "\r\nHTTP/1.1 200 OK\r\n\r\n"],
  ["bare LF line ends", "HTTP/1.1 200 OK\nContent-Length: 0\n\n"],
  ["one bare LF", "HTTP/1.1 200 OK\r\nContent-Length: 0\n\r\n"],
  ["a bare CR", "HTTP/1.1 200 OK\r\nX: a\rb\r\n\r\n"],
  ["a field name that is not a token", `${OK}X@Y: 1\r\n\r\n`],
  ["whitespace before the colon", `${OK}Content-Length : 0\r\n\r\n`],
  ["Transfer-Encoding : chunked", `${OK}Transfer-Encoding : chunked\r\n\r\n0\r\n\r\n`],
  ["an empty field name", `${OK}: 1\r\n\r\n`],
  ["a line without a colon", `${OK}Content-Length\r\n\r\n`],
  ["obs-fold", `${OK}X: a\r\n b\r\nContent-Length: 0\r\n\r\n`],
  ["NUL in a value", `${OK}X: a\x00b\r\n\r\n`],
  ["DEL in a value", `${OK}X: a\x7fb\r\n\r\n`],
  ["ESC in a value", `${OK}X: a\x1bb\r\n\r\n`],
  ["Content-Length +5", `${OK}Content-Length: +5\r\n\r\n`],
  ["Content-Length -1", `${OK}Content-Length: -1\r\n\r\n`],
  ["Content-Length 0x10", `${OK}Content-Length: 0x10\r\n\r\n`],
  ["Content-Length 5 5", `${OK}Content-Length: 5 5\r\n\r\n`],
  ["an empty Content-Length", `${OK}Content-Length:\r\n\r\n`],
  ["a Content-Length list that differs", `${OK}Content-Length: 5, 6\r\n\r\n`],
  ["a Content-Length list with an empty member", `${OK}Content-Length: 5,\r\n\r\n`],
  ["Content-Length fields that differ", `${OK}Content-Length: 5\r\nContent-Length: 6\r\n\r\n`],
  ["a Content-Length above 2^53", `${OK}Content-Length: 9007199254740992\r\n\r\n`],
  ["Transfer-Encoding xchunked", `${OK}Transfer-Encoding: xchunked\r\n\r\n`],
  ["Transfer-Encoding gzip", `${OK}Transfer-Encoding: gzip\r\n\r\n`],
  ["Transfer-Encoding gzip, chunked", `${OK}Transfer-Encoding: gzip, chunked\r\n\r\n`],
  ["Transfer-Encoding chunked, identity", `${OK}Transfer-Encoding: chunked, identity\r\n\r\n`],
  ["Transfer-Encoding chunked, chunked", `${OK}Transfer-Encoding: chunked, chunked\r\n\r\n`],
  [
    "two Transfer-Encoding fields",
    `${OK}Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n`,
  ],
  [
    "Transfer-Encoding then Content-Length",
    `${OK}Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n5\r\nhello\r\n0\r\n\r\n`,
  ],
  [
    "Content-Length then Transfer-Encoding",
    `${OK}Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n`,
  ],
  [
    "Transfer-Encoding on HTTP/1.0",
    "HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
  ],
];

for (const [why, text] of HEAD_REFUSALS) {
  Deno.test(`parseResponseHead() refuses ${why}`, () => refusesHead(text));
}

Deno.test("parseResponseHead() still checks Content-Length when the response has no body", () => {
  refusesHead(`${OK}Content-Length: -1\r\n\r\n`, { method: "HEAD" });
  refusesHead("HTTP/1.1 304 Not Modified\r\nContent-Length: 1, 2\r\n\r\n");
  refusesHead("HTTP/1.1 204 No Content\r\nContent-Length: 0\r\nTransfer-Encoding: chunked\r\n\r\n");
});

Deno.test("parseResponseHead() refuses a bare LF before the head is complete", () => {
  refusesHead("HTTP/1.1 200 OK\n");
});

Deno.test("parseResponseHead() returns null until the final CRLF arrives", () => {
  const full = `${OK}Content-Length: 0\r\n\r\n`;
  for (let i = 0; i < full.length; i++) assert.equal(head(full.slice(0, i)), null, `at ${i}`);
  assert.equal(head(full)?.headBytes, full.length);
});

Deno.test("parseResponseHead() reads the status line, fields and head size", () => {
  const parsed = head(
    `${OK}Content-Type:  text/plain \t\r\nX-Empty:\r\nX-Obs: caf\xe9\r\n\r\nbody`,
  );
  assert.deepEqual(parsed, {
    status: 200,
    reason: "OK",
    minor: 1,
    rawHeaders: ["Content-Type", "text/plain", "X-Empty", "", "X-Obs", "caf\xe9"],
    headBytes: 71, // everything before "body"
    framing: { kind: "close" },
    keepAlive: false,
  });
});

Deno.test("parseResponseHead() takes an empty reason with or without its space", () => {
  assert.equal(head("HTTP/1.1 200\r\nContent-Length: 0\r\n\r\n")?.reason, "");
  assert.equal(head("HTTP/1.1 200 \r\nContent-Length: 0\r\n\r\n")?.reason, "");
  assert.equal(head("HTTP/1.1 599 Odd\treason \xff\r\n\r\n")?.reason, "Odd\treason \xff");
});

Deno.test("parseResponseHead() parses from `start`, counting headBytes from there", () => {
  const text = `junk${OK}Content-Length: 3\r\n\r\nabc`;
  const buf = bytes(text);
  const parsed = parseResponseHead(buf, 4, buf.length, { method: "GET" });
  assert.equal(parsed?.headBytes, text.length - 7);
  assert.deepEqual(parsed?.framing, { kind: "length", length: 3 });
});

/** A framing choice: the body's framing as its kind, or its length; whether kept alive. */
interface FramingCase {
  readonly what: string;
  readonly wire: string;
  readonly method?: string;
  readonly body: "none" | "chunked" | "close" | number;
  readonly keepAlive: boolean;
}

const FRAMINGS: readonly FramingCase[] = [
  { what: "Content-Length", wire: `${OK}Content-Length: 12\r\n\r\n`, body: 12, keepAlive: true },
  {
    what: "an identical Content-Length list",
    wire: `${OK}Content-Length: 7 ,\t7\r\n\r\n`,
    body: 7,
    keepAlive: true,
  },
  {
    what: "identical Content-Length fields",
    wire: `${OK}Content-Length: 7\r\ncontent-length: 7\r\n\r\n`,
    body: 7,
    keepAlive: true,
  },
  {
    what: "the largest safe Content-Length",
    wire: `${OK}Content-Length: 9007199254740991\r\n\r\n`,
    body: Number.MAX_SAFE_INTEGER,
    keepAlive: true,
  },
  {
    what: "chunked",
    wire: `${OK}Transfer-Encoding: chunked\r\n\r\n`,
    body: "chunked",
    keepAlive: true,
  },
  {
    what: "chunked in any case",
    wire: `${OK}transfer-encoding:  ChUnKeD \r\n\r\n`,
    body: "chunked",
    keepAlive: true,
  },
  { what: "neither (close-delimited)", wire: `${OK}X: 1\r\n\r\n`, body: "close", keepAlive: false },
  {
    what: "HEAD whatever the headers say",
    method: "HEAD",
    wire: `${OK}Content-Length: 12\r\n\r\n`,
    body: "none",
    keepAlive: true,
  },
  {
    what: "HEAD with chunked",
    method: "HEAD",
    wire: `${OK}Transfer-Encoding: chunked\r\n\r\n`,
    body: "none",
    keepAlive: true,
  },
  { what: "HEAD with neither", method: "HEAD", wire: `${OK}\r\n`, body: "none", keepAlive: true },
  {
    what: "204 with Content-Length",
    wire: "HTTP/1.1 204 No Content\r\nContent-Length: 9\r\n\r\n",
    body: "none",
    keepAlive: true,
  },
  {
    what: "304 with Content-Length",
    wire: "HTTP/1.1 304 Not Modified\r\nContent-Length: 9\r\n\r\n",
    body: "none",
    keepAlive: true,
  },
  { what: "100 Continue", wire: "HTTP/1.1 100 Continue\r\n\r\n", body: "none", keepAlive: true },
  {
    what: "103 Early Hints",
    wire: "HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n",
    body: "none",
    keepAlive: true,
  },
  {
    what: "101 (never kept alive)",
    wire: "HTTP/1.1 101 Switching\r\nUpgrade: x\r\n\r\n",
    body: "none",
    keepAlive: false,
  },
  {
    what: "a 2xx to CONNECT (a tunnel)",
    method: "CONNECT",
    wire: `${OK}Content-Length: 5\r\n\r\n`,
    body: "none",
    keepAlive: false,
  },
  {
    what: "a 4xx to CONNECT",
    method: "CONNECT",
    wire: "HTTP/1.1 407 Auth\r\nContent-Length: 5\r\n\r\n",
    body: 5,
    keepAlive: true,
  },
  {
    what: "HTTP/1.0 with Content-Length",
    wire: "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\n",
    body: 2,
    keepAlive: false,
  },
  {
    what: "HTTP/1.0 even with keep-alive",
    wire: "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\n",
    body: 2,
    keepAlive: false,
  },
  {
    what: "Connection: close",
    wire: `${OK}Connection: close\r\nContent-Length: 2\r\n\r\n`,
    body: 2,
    keepAlive: false,
  },
  {
    what: "close in a Connection list, in any case",
    wire: `${OK}Connection: keep-alive , CLOSE\r\nConnection: Upgrade\r\nContent-Length: 2\r\n\r\n`,
    body: 2,
    keepAlive: false,
  },
  {
    what: "a Connection token that only contains close",
    wire: `${OK}Connection: closed\r\nContent-Length: 2\r\n\r\n`,
    body: 2,
    keepAlive: true,
  },
];

for (const { what, wire, method = "GET", body, keepAlive } of FRAMINGS) {
  Deno.test(`parseResponseHead() frames ${what}`, () => {
    const parsed = head(wire, { method });
    const framing = typeof body === "number" ? { kind: "length", length: body } : { kind: body };
    assert.deepEqual(parsed?.framing, framing);
    assert.equal(parsed?.keepAlive, keepAlive);
  });
}

/** A complete head of exactly `size` bytes. */
function headOfSize(size: number): string {
  const bare = `${OK}X: \r\n\r\n`;
  return `${OK}X: ${"a".repeat(size - bare.length)}\r\n\r\n`;
}

Deno.test("parseResponseHead() takes a head under or at maxHeadBytes and refuses one over", () => {
  const text = headOfSize(300);
  assert.equal(text.length, 300);
  assert.equal(head(text, { maxHeadBytes: 301 })?.headBytes, 300);
  assert.equal(head(text, { maxHeadBytes: 300 })?.headBytes, 300);
  refusesHead(text, { maxHeadBytes: 299 });
  assert.equal(head(headOfSize(16384))?.headBytes, 16384);
  refusesHead(headOfSize(16385));
});

Deno.test("parseResponseHead() refuses an unfinished head once it reaches maxHeadBytes", () => {
  const partial = `${OK}X: ${"a".repeat(100)}`;
  assert.equal(head(partial, { maxHeadBytes: partial.length + 1 }), null);
  refusesHead(partial, { maxHeadBytes: partial.length });
});

function fields(count: number): string {
  return OK + "X: 1\r\n".repeat(count) + "\r\n";
}

Deno.test("parseResponseHead() takes fields under or at maxHeaders and refuses one more", () => {
  assert.equal(head(fields(2), { maxHeaders: 3 })?.rawHeaders.length, 4);
  assert.equal(head(fields(3), { maxHeaders: 3 })?.rawHeaders.length, 6);
  refusesHead(fields(4), { maxHeaders: 3 });
  assert.equal(head(fields(100))?.rawHeaders.length, 200);
  refusesHead(fields(101));
});

Deno.test("ResponseFramingError names itself and where the framing broke", () => {
  const error = new ResponseFramingError("Bad", "body");
  assert.equal(error.name, "ResponseFramingError");
  assert.equal(error.part, "body");
  assert.ok(error instanceof Error);
});

// ---------------------------------------------------------------------------------------------
// Body

const CHUNK_REFUSALS: readonly [string, string][] = [
  ["an empty chunk size", "\r\nhello\r\n0\r\n\r\n"],
  ["a negative chunk size", "-5\r\nhello\r\n0\r\n\r\n"],
  ["a 0x prefix", "0x5\r\nhello\r\n0\r\n\r\n"],
  ["a space before the size", " 5\r\nhello\r\n0\r\n\r\n"],
  ["a space after the size", "5 \r\nhello\r\n0\r\n\r\n"],
  ["a tab after the size", "5\t\r\nhello\r\n0\r\n\r\n"],
  ["a space before an extension", "5 ;a=b\r\nhello\r\n0\r\n\r\n"],
  ["an extension without a size", ";a\r\nhello\r\n0\r\n\r\n"],
  ["a size that is not hex", "g\r\n"],
  ["a chunk size above 2^53", "20000000000000\r\n"],
  ["a control byte in an extension", "5;a\x01\r\nhello\r\n0\r\n\r\n"],
  ["a bare LF after the size", "5\nhello\r\n0\r\n\r\n"],
  ["a bare CR after the size", "5\rhello\r\n0\r\n\r\n"],
  ["no CRLF after chunk data", "5\r\nhelloXX0\r\n\r\n"],
  ["LF alone after chunk data", "5\r\nhello\n0\r\n\r\n"],
  ["another byte in place of the CR after chunk data", "5\r\nhelloX\n0\r\n\r\n"],
  ["another byte in place of the LF after chunk data", "5\r\nhello\rX0\r\n\r\n"],
  ["too much chunk data", "5\r\nhello!\r\n0\r\n\r\n"],
  ["a bare LF ending the body", "0\r\n\n"],
  ["a bare LF after a trailer", "0\r\nX: y\n\r\n"],
  ["obs-fold in a trailer", "0\r\nX: y\r\n z\r\n\r\n"],
  ["a trailer starting with a space", "0\r\n X: y\r\n\r\n"],
  ["whitespace before a trailer's colon", "0\r\nX : y\r\n\r\n"],
  ["a trailer without a colon", "0\r\nXY\r\n\r\n"],
  ["a trailer with an empty name", "0\r\n: y\r\n\r\n"],
  ["NUL in a trailer", "0\r\nX: a\x00b\r\n\r\n"],
  ["something other than CRLF after the trailers", "0\r\n\rX"],
];

for (const [why, text] of CHUNK_REFUSALS) {
  Deno.test(`BodyDecoder refuses ${why}`, () => refusesBody(CHUNKED, text));
}

Deno.test("BodyDecoder decodes chunks with extensions, any-case hex and trailers", () => {
  const wire = 'a;name=value;q="x;y"\r\n0123456789\r\n00B\r\nhello world\r\n' +
    "0;last\r\nExpires: never\r\nX-Checksum:\t\xff\r\n\r\nHTTP/1.1";
  const { body, used, done } = decode(CHUNKED, wire);
  assert.equal(body, "0123456789hello world");
  assert.equal(used, wire.length - "HTTP/1.1".length);
  assert.ok(done);
});

Deno.test("BodyDecoder hands on views of the caller's buffer, not copies", () => {
  const buf = bytes(`${"x".repeat(10)}5\r\nhello\r\n3\r\nabc\r\n0\r\n\r\n`);
  const views: Uint8Array[] = [];
  new BodyDecoder(CHUNKED).feed(buf, 10, buf.length, (view) => views.push(view));
  assert.deepEqual(views.map((v) => [v.buffer === buf.buffer, v.byteOffset, v.length]), [
    [true, 13, 5],
    [true, 23, 3],
  ]);
});

Deno.test("BodyDecoder stops after a Content-Length body, leaving the next response", () => {
  const { body, used, done } = decode({ kind: "length", length: 5 }, "helloHTTP/1.1 200 OK");
  assert.deepEqual([body, used, done], ["hello", 5, true]);
});

Deno.test("BodyDecoder is done at once for no body and a zero length, and consumes nothing", () => {
  for (const framing of [{ kind: "none" }, { kind: "length", length: 0 }] as Framing[]) {
    const decoder = new BodyDecoder(framing);
    assert.ok(decoder.done);
    assert.equal(decoder.feed(bytes("HTTP/1.1"), 0, 8, () => assert.fail("no data")), 0);
    assert.ok(decoder.eof());
  }
});

Deno.test("BodyDecoder.eof() completes only a close-delimited body", () => {
  const close = decode({ kind: "close" }, "all of it");
  assert.deepEqual([close.body, close.used, close.done], ["all of it", 9, false]);
  assert.ok(close.decoder.eof());
  assert.ok(close.decoder.done);
  assert.equal(decode({ kind: "length", length: 5 }, "hell").decoder.eof(), false);
  assert.equal(decode(CHUNKED, "5\r\nhello\r\n0\r\n").decoder.eof(), false);
  assert.equal(decode(CHUNKED, "5\r\nhello\r\n0\r\n\r\n").decoder.eof(), true);
});

Deno.test("BodyDecoder takes a chunk line under or at its limit and refuses one over", () => {
  const at = "5;abcdefgh"; // 10 bytes before the CRLF
  const wire = (line: string) => `${line}\r\nhello\r\n0\r\n\r\n`;
  assert.equal(decode(CHUNKED, wire(at.slice(0, 9)), { maxChunkLineBytes: 10 }).body, "hello");
  assert.equal(decode(CHUNKED, wire(at), { maxChunkLineBytes: 10 }).body, "hello");
  refusesBody(CHUNKED, wire(`${at}i`), { maxChunkLineBytes: 10 });
  const long = `5;${"e".repeat(4094)}`;
  assert.equal(decode(CHUNKED, wire(long)).body, "hello");
  refusesBody(CHUNKED, wire(`${long}e`));
  refusesBody(CHUNKED, `${"0".repeat(4097)}\r\n\r\n`);
});

Deno.test("BodyDecoder takes trailers under or at their limit and refuses more", () => {
  const wire = "0\r\nX: y\r\n\r\n"; // a trailer section of 8 bytes, its final CRLF included
  assert.ok(decode(CHUNKED, wire, { maxTrailerBytes: 9 }).done);
  assert.ok(decode(CHUNKED, wire, { maxTrailerBytes: 8 }).done);
  refusesBody(CHUNKED, wire, { maxTrailerBytes: 7 });
  const big = `0\r\nX: ${"v".repeat(16384 - 7)}\r\n\r\n`;
  assert.ok(decode(CHUNKED, big).done);
  refusesBody(CHUNKED, big.replace("X:", "XY:"));
});

// ---------------------------------------------------------------------------------------------
// The caller's loop, through one reused buffer

/** A response as the relay saw it. */
interface Relayed {
  readonly status: number;
  readonly reason: string;
  readonly minor: 0 | 1;
  readonly rawHeaders: readonly string[];
  readonly framing: Framing["kind"];
  readonly keepAlive: boolean;
  readonly body: string;
}

/** What the relay made of one connection's bytes. */
interface Outcome {
  readonly ok: boolean;
  readonly error?: string;
  readonly responses: readonly Relayed[];
}

/**
 * Reads `pieces` (one connection's reads, then its close) as the owned reader does: one buffer,
 * unparsed head bytes kept contiguous, body bytes fed as they come. After every read the whole
 * buffer is overwritten with garbage and the unconsumed bytes are put back at a moving offset, so
 * anything the parser kept from an earlier read would show.
 */
function relay(pieces: readonly Uint8Array[], method: string): Outcome {
  const buf = new Uint8Array(pieces.reduce((n, piece) => n + piece.length, 0) + 16);
  const responses: Relayed[] = [];
  let start = 0;
  let end = 0;
  let round = 0;
  let current: { head: ResponseHead; decoder: BodyDecoder; body: string } | undefined;
  let closing = false;
  const finish = () => {
    const { head, body } = current!;
    responses.push({ ...head, framing: head.framing.kind, body });
    closing = !head.keepAlive && (head.status >= 200 || head.status === 101);
    current = undefined;
  };
  const fail = (error: string): Outcome => ({ ok: false, error, responses });
  try {
    for (const piece of pieces) {
      buf.set(piece, end);
      end += piece.length;
      for (;;) {
        if (current === undefined) {
          if (start === end) break;
          if (closing) return fail("Bytes after a response that closes the connection");
          const head = parseResponseHead(buf, start, end, { method });
          if (head === null) break;
          start += head.headBytes;
          current = { head, decoder: new BodyDecoder(head.framing), body: "" };
        }
        const active = current;
        start += active.decoder.feed(buf, start, end, (view) => active.body += binary(view));
        if (!active.decoder.done) break;
        finish();
      }
      const pending = buf.slice(start, end);
      round++;
      for (let i = 0; i < buf.length; i++) buf[i] = (i * 151 + round * 97) & 0xff;
      start = round % 8;
      end = start + pending.length;
      buf.set(pending, start);
    }
  } catch (e) {
    if (e instanceof ResponseFramingError) return fail(e.message);
    throw e;
  }
  if (current !== undefined) {
    if (!current.decoder.eof()) return fail("Body cut short");
    finish();
  }
  if (start < end) return fail("Head cut short");
  if (responses.length === 0 || responses.at(-1)!.status < 200) return fail("No final response");
  return { ok: true, responses };
}

/** Valid responses (one connection each), used for the split points and against h11. */
const VALID: readonly { name: string; wire: string; method?: string }[] = [
  {
    name: "Content-Length",
    wire: `${OK}Content-Type: text/plain\r\nContent-Length: 11\r\n\r\nhello world`,
  },
  { name: "Content-Length 0", wire: `${OK}Content-Length: 0\r\n\r\n` },
  { name: "an identical Content-Length list", wire: `${OK}Content-Length: 5, 5\r\n\r\nhello` },
  {
    name: "identical Content-Length fields",
    wire: `${OK}Content-Length: 5\r\nContent-Length: 5\r\n\r\nhello`,
  },
  {
    name: "chunked",
    wire: `${OK}Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n`,
  },
  {
    name: "chunked with extensions",
    wire:
      `${OK}Transfer-Encoding: chunked\r\n\r\n5;a=b;c="d e"\r\nhello\r\n1;x\r\n!\r\n0;end\r\n\r\n`,
  },
  {
    name: "chunked with trailers",
    wire: `${OK}Transfer-Encoding: chunked\r\nTrailer: Expires\r\n\r\n3\r\nabc\r\n0\r\n` +
      "Expires: Wed, 21 Oct 2015 07:28:00 GMT\r\nX-Sum:  12 \r\n\r\n",
  },
  {
    name: "chunked with any-case hex and leading zeros",
    wire:
      `${OK}Transfer-Encoding: chunked\r\n\r\n00a\r\n0123456789\r\nB\r\nhello world\r\n000\r\n\r\n`,
  },
  {
    name: "Chunked in mixed case",
    wire: `${OK}Transfer-Encoding: ChUnKeD\r\n\r\n1\r\nx\r\n0\r\n\r\n`,
  },
  {
    name: "chunked with OWS",
    wire: `${OK}Transfer-Encoding: \t chunked \r\n\r\n1\r\nx\r\n0\r\n\r\n`,
  },
  {
    name: "close-delimited",
    wire: `${OK}Content-Type: text/plain\r\n\r\nuntil the end\r\n\r\n0\r\n`,
  },
  { name: "close-delimited, empty", wire: `${OK}\r\n` },
  { name: "HTTP/1.0 with Content-Length", wire: "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nhi" },
  { name: "HTTP/1.0 close-delimited", wire: "HTTP/1.0 200 OK\r\nServer: old\r\n\r\nold body" },
  { name: "HEAD with Content-Length", method: "HEAD", wire: `${OK}Content-Length: 100\r\n\r\n` },
  { name: "HEAD with chunked", method: "HEAD", wire: `${OK}Transfer-Encoding: chunked\r\n\r\n` },
  {
    name: "HEAD, pipelined",
    method: "HEAD",
    wire: `${OK}Content-Length: 100\r\n\r\nHTTP/1.1 404 Not Found\r\nContent-Length: 100\r\n\r\n`,
  },
  { name: "204 with Content-Length", wire: "HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n" },
  {
    name: "304 with Content-Length",
    wire: "HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\n",
  },
  {
    name: "100 Continue then the response",
    wire: `HTTP/1.1 100 Continue\r\n\r\n${OK}Content-Length: 2\r\n\r\nok`,
  },
  {
    name: "103 Early Hints twice then the response",
    wire: "HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n" +
      `HTTP/1.1 103 Early Hints\r\nLink: </b.js>\r\n\r\n${OK}Transfer-Encoding: chunked\r\n\r\n` +
      "2\r\nok\r\n0\r\n\r\n",
  },
  {
    name: "three pipelined responses",
    wire:
      `${OK}Content-Length: 3\r\n\r\none${OK}Transfer-Encoding: chunked\r\n\r\n3\r\ntwo\r\n0\r\n\r\n` +
      `HTTP/1.1 204 No Content\r\n\r\n${OK}Connection: close\r\nContent-Length: 5\r\n\r\nthree`,
  },
  { name: "Connection: close", wire: `${OK}Connection: close\r\nContent-Length: 2\r\n\r\nhi` },
  {
    name: "close in a Connection list",
    wire: `${OK}Connection: keep-alive, Close\r\nContent-Length: 2\r\n\r\nhi`,
  },
  { name: "an empty reason", wire: "HTTP/1.1 200 \r\nContent-Length: 0\r\n\r\n" },
  { name: "no reason", wire: "HTTP/1.1 200\r\nContent-Length: 0\r\n\r\n" },
  {
    name: "obs-text and a tab in the reason",
    wire: "HTTP/1.1 200 \xc7a\tva\r\nContent-Length: 0\r\n\r\n",
  },
  { name: "status 999", wire: "HTTP/1.1 999 Custom\r\nContent-Length: 1\r\n\r\n9" },
  {
    name: "field values with obs-text, inner spaces and OWS",
    wire: `${OK}X-A: caf\xe9\r\nX-B:\t a  b\tc \t\r\nX-Empty:\r\nX-Tok: !#$%&'*+-.^_\`|~\r\n` +
      "Content-Length: 0\r\n\r\n",
  },
  { name: "100 header fields", wire: OK + "X-F: 1\r\n".repeat(99) + "Content-Length: 0\r\n\r\n" },
  {
    name: "a 70,000-byte body",
    wire: `${OK}Content-Length: 70000\r\n\r\n${"0123456789".repeat(7000)}`,
  },
];

/** `text` cut at each offset in `cuts`. */
function cut(text: string, cuts: readonly number[]): Uint8Array[] {
  const at = [0, ...cuts, text.length];
  return at.slice(1).map((to, i) => bytes(text.slice(at[i], to)));
}

for (const { name, wire, method = "GET" } of VALID) {
  if (wire.length > 20_000) continue;
  Deno.test(`relay through one buffer: ${name}, split at every offset and byte by byte`, () => {
    const whole = relay([bytes(wire)], method);
    assert.ok(whole.ok, whole.error);
    for (let i = 1; i < wire.length; i++) {
      assert.deepEqual(relay(cut(wire, [i]), method), whole, `split at ${i}`);
    }
    const everyByte = Array.from({ length: wire.length - 1 }, (_, i) => i + 1);
    assert.deepEqual(relay(cut(wire, everyByte), method), whole, "byte by byte");
  });
}

Deno.test("relay through one buffer: a 70,000-byte body in reads of many sizes", () => {
  const wire = VALID.find((c) => c.name === "a 70,000-byte body")!.wire;
  const whole = relay([bytes(wire)], "GET");
  assert.equal(whole.responses[0].body.length, 70000);
  for (const size of [997, 4096, 65536]) {
    const cuts = [];
    for (let at = size; at < wire.length; at += size) cuts.push(at);
    assert.deepEqual(relay(cut(wire, cuts), "GET"), whole, `reads of ${size}`);
  }
});

// ---------------------------------------------------------------------------------------------
// Against h11

/** Malformed or truncated streams; each must be refused by both, or be listed in STRICTER. */
const MALFORMED: readonly { name: string; wire: string; method?: string }[] = [
  ...HEAD_REFUSALS.map(([name, head]) => ({ name, wire: head })),
  ...CHUNK_REFUSALS.map(([name, body]) => ({
    name: `chunked body: ${name}`,
    wire: `${OK}Transfer-Encoding: chunked\r\n\r\n${body}`,
  })),
  {
    name: "Transfer-Encoding: chunked after a leading space",
    wire: `${OK} Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n`,
  },
  { name: "a Content-Length body cut short", wire: `${OK}Content-Length: 10\r\n\r\nhello` },
  { name: "a chunked body cut short", wire: `${OK}Transfer-Encoding: chunked\r\n\r\n5\r\nhel` },
  {
    name: "a chunked body without its last chunk",
    wire: `${OK}Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n`,
  },
  { name: "a head cut short", wire: `${OK}Content-Length: 0\r\n` },
  { name: "nothing at all", wire: "" },
  { name: "only a 100 Continue", wire: "HTTP/1.1 100 Continue\r\n\r\n" },
  { name: "garbage after a body", wire: `${OK}Content-Length: 2\r\n\r\nhiXYZ` },
  {
    name: "a body after a HEAD response",
    method: "HEAD",
    wire: `${OK}Content-Length: 2\r\n\r\nhi`,
  },
  {
    name: "bytes after Connection: close",
    wire: `${OK}Connection: close\r\nContent-Length: 2\r\n\r\nhiHTTP`,
  },
  { name: "a body after a 204", wire: "HTTP/1.1 204 No Content\r\nContent-Length: 2\r\n\r\nhi" },
  {
    name: "a malformed second response",
    wire: `${OK}Content-Length: 2\r\n\r\nhi${OK}Content-Length: -2\r\n\r\n`,
  },
  {
    name: "a chunk size larger than the bytes sent",
    wire: `${OK}Transfer-Encoding: chunked\r\n\r\n10\r\nhello\r\n0\r\n\r\n`,
  },
  { name: "101 fields", wire: OK + "X-F: 1\r\n".repeat(100) + "Content-Length: 0\r\n\r\n" },
];

/**
 * Where this module refuses what h11 (0.14) accepts, and why. The differential asserts both
 * halves: we refuse, h11 accepts (so a stale entry shows).
 */
const STRICTER: ReadonlyMap<string, string> = new Map([
  ["HTTP/2.0", "h11 takes any DIGIT.DIGIT version; a 2.0 or 1.2 status line here is no HTTP/1.x"],
  ["HTTP/1.2", "the same: only HTTP/1.0 and HTTP/1.1 have framing we know"],
  ["a control byte in the reason", "h11 allows any byte but NUL and whitespace (its issue #57)"],
  ["DEL in the reason", "the same: DEL is a CTL, not VCHAR (RFC 9112 §4)"],
  ["bare LF line ends", "h11 takes LF alone as a line end; a relay must not (RFC 9112 §2.2)"],
  ["one bare LF", "the same, for a single line"],
  ["obs-fold", "h11 unfolds; RFC 9112 §5.2 lets a client replace it, we refuse it"],
  ["DEL in a value", "h11 allows control bytes in values; RFC 9110 §5.5 does not"],
  ["ESC in a value", "the same"],
  [
    "Transfer-Encoding then Content-Length",
    "h11 lets chunked win; both at once is a smuggling sign",
  ],
  ["Content-Length then Transfer-Encoding", "the same, the other order"],
  [
    "Transfer-Encoding on HTTP/1.0",
    "HTTP/1.0 has no chunked coding (RFC 9112 §6.1); h11 decodes it",
  ],
  [
    "chunked body: a space after the size",
    "h11 allows trailing OWS on a chunk line; RFC 9112 §7.1 does not",
  ],
  ["chunked body: a tab after the size", "the same"],
  ["chunked body: a control byte in an extension", "h11 skips any extension bytes unchecked"],
  [
    "chunked body: a bare LF ending the body",
    "h11 takes LF alone as a line end in the trailer section",
  ],
  ["chunked body: a bare LF after a trailer", "the same"],
  ["chunked body: obs-fold in a trailer", "h11 unfolds trailer lines as it does header lines"],
  ["101 fields", "h11 has no cap on the number of fields, only on the head's bytes"],
]);

/** h11's verdict on one stream (see the oracle's docstring). */
interface H11Outcome {
  readonly ok: boolean;
  readonly error: string | null;
  readonly responses: readonly {
    readonly status: number;
    readonly reason: string;
    readonly version: string;
    readonly headers: readonly [string, string][];
    readonly body: string;
    readonly keep_alive: boolean | null;
  }[];
}

async function askH11(python: string, cases: readonly { wire: string; method: string }[]) {
  const input = cases.map(({ wire, method }) => ({ bytes: btoa(wire), method }));
  const child = new Deno.Command(python, {
    args: [ORACLE],
    stdin: "piped",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const writer = child.stdin.getWriter();
  await writer.write(new TextEncoder().encode(JSON.stringify(input)));
  await writer.close();
  const output = await child.output();
  if (!output.success) {
    throw new Error(`The h11 oracle failed: ${new TextDecoder().decode(output.stderr)}`);
  }
  const out = JSON.parse(new TextDecoder().decode(output.stdout)) as H11Outcome[];
  return out.map((o) => ({
    ...o,
    responses: o.responses.map((r) => ({ ...r, body: atob(r.body) })),
  }));
}

/**
 * Our fields as h11 reports them: names compared lowercased; Content-Length as its one value, once
 * (h11 collapses an identical list and drops repeated fields); Transfer-Encoding lowercased.
 */
function asH11(rawHeaders: readonly string[]): [string, string][] {
  const out: [string, string][] = [];
  let sawLength = false;
  for (let i = 0; i < rawHeaders.length; i += 2) {
    const name = rawHeaders[i].toLowerCase();
    const value = rawHeaders[i + 1];
    if (name === "content-length") {
      if (!sawLength) out.push([name, value.split(",")[0].trim()]);
      sawLength = true;
    } else out.push([name, name === "transfer-encoding" ? value.toLowerCase() : value]);
  }
  return out;
}

/** How our reading of one case differs from h11's, or undefined when it does not. */
function disagreement(name: string, ours: Outcome, theirs: H11Outcome): string | undefined {
  const why = STRICTER.get(name);
  if (why !== undefined) {
    if (ours.ok) return `we accept, but must refuse (${why})`;
    return theirs.ok
      ? undefined
      : `listed as stricter than h11, but h11 refuses too (${theirs.error})`;
  }
  if (ours.ok !== theirs.ok) {
    return `ours: ${ours.error ?? "accepted"}; h11: ${theirs.error ?? "accepted"}`;
  }
  if (ours.responses.length !== theirs.responses.length) {
    return `${ours.responses.length} responses against h11's ${theirs.responses.length}`;
  }
  for (const [j, r] of ours.responses.entries()) {
    const h = theirs.responses[j];
    const mine: unknown[] = [r.status, r.reason, `1.${r.minor}`, asH11(r.rawHeaders), r.body];
    const h11: unknown[] = [
      h.status,
      h.reason,
      h.version,
      h.headers.map(([n, v]) => [n.toLowerCase(), v]),
      h.body,
    ];
    // h11 calls a close-delimited body's end "done", and keeps no keep-alive state for a 1xx.
    if (r.framing !== "close" && h.keep_alive !== null) {
      mine.push(r.keepAlive);
      h11.push(h.keep_alive);
    }
    if (JSON.stringify(mine) !== JSON.stringify(h11)) {
      return `response ${j}: ${JSON.stringify(mine)} against h11's ${JSON.stringify(h11)}`;
    }
  }
  return undefined;
}

peerTest("parseResponseHead() and BodyDecoder agree with h11", ["python3-h11"], async (peers) => {
  const cases = [...VALID, ...MALFORMED].map(({ name, wire, method = "GET" }) => ({
    name,
    wire,
    method,
  }));
  assert.ok(cases.length >= 60, `${cases.length} cases`);
  assert.deepEqual([...STRICTER.keys()].filter((name) => !cases.some((c) => c.name === name)), []);
  const verdicts = await askH11(peers["python3-h11"], cases);
  const problems: string[] = [];
  cases.forEach(({ name, wire, method }, i) => {
    const ours = relay([bytes(wire)], method);
    if (VALID.some((c) => c.name === name) && !ours.ok) problems.push(`${name}: ${ours.error}`);
    const problem = disagreement(name, ours, verdicts[i]);
    if (problem !== undefined) problems.push(`${name}: ${problem}`);
  });
  assert.deepEqual(problems, []);
});

Deno.test("parseResponseHead() quotes upstream bytes in its messages with controls escaped", () => {
  assert.throws(
    () => head(`${OK}X: a\x00\x1b[31m\xff\r\n\r\n`),
    (e) =>
      e instanceof ResponseFramingError &&
      e.message.includes(String.raw`"X: a\u0000\u001b[31m\u00ff"`),
  );
});

Deno.test("agreedLength() is the one value identical members agree on, as h11 compares them", () => {
  assert.equal(agreedLength(["5"]), "5");
  assert.equal(agreedLength(["5, 5", "5"]), "5");
  assert.equal(agreedLength([" 5 ,\t5 "]), "5");
  assert.equal(agreedLength(["0005"]), "5", "leading zeros go");
  assert.equal(agreedLength(["0"]), "0");
  assert.equal(agreedLength(["000"]), "0");
  for (const values of [["5, 6"], ["5", "6"], ["05", "5"], ["5,"], ["+5"], [""], [], ["5 5"]]) {
    assert.equal(agreedLength(values), null, JSON.stringify(values));
  }
});
