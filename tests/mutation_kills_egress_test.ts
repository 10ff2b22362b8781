/**
 * Kills operator-mutation survivors in src/egress/ (h1_body.ts, h1_bytes.ts, h1_response.ts,
 * own_listener.ts; destinations.ts has its own in destinations_ranges_test.ts): each test names the
 * rule it guards. The owned reader's refusals are asserted with the reason an operator reads in
 * the log (not only that something was refused), both sides of each byte class and each limit, fed
 * whole and byte by byte as the upstream's bytes would arrive; the own-listener lock with the
 * whole sentence it refuses with.
 *
 * @module
 */
import assert from "node:assert/strict";
import { PrivateAllowance } from "../src/egress/destinations.ts";
import { BodyDecoder } from "../src/egress/h1_body.ts";
import {
  type Framing,
  parseResponseHead,
  ResponseFramingError,
} from "../src/egress/h1_response.ts";
import type { LocalMachine } from "../src/egress/local_machine.ts";
import {
  ownListener,
  refuseLoopbackTunnel,
  refuseOwnDestination,
  refusePeer,
  resolvedBy,
} from "../src/egress/own_listener.ts";

/** A binary string (one char per byte) as bytes. */
function bytes(text: string): Uint8Array {
  return Uint8Array.from(text, (c) => c.charCodeAt(0));
}

const CHUNKED: Framing = { kind: "chunked" };
const OK = "HTTP/1.1 200 OK\r\n";

type Limits = { maxChunkLineBytes?: number; maxTrailerBytes?: number };

/** Feeds `text` whole, then byte by byte through one reused buffer: the body and done, or the error. */
function decodeBoth(text: string, limits: Limits = {}, framing = CHUNKED) {
  const results = [];
  for (const split of [false, true]) {
    const decoder = new BodyDecoder(framing, limits);
    let body = "";
    const onData = (view: Uint8Array) => body += String.fromCharCode(...view);
    try {
      if (!split) decoder.feed(bytes(text), 0, text.length, onData);
      else {
        const one = new Uint8Array(1);
        for (const c of text) {
          one[0] = c.charCodeAt(0);
          decoder.feed(one, 0, 1, onData);
        }
      }
      results.push({ body, done: decoder.done, error: undefined });
    } catch (error) {
      results.push({ body, done: decoder.done, error });
    }
  }
  assert.deepEqual(
    results[1],
    results[0],
    `whole and byte by byte differ for ${JSON.stringify(text)}`,
  );
  return results[0];
}

/** Asserts the body is refused with exactly `message`, whole and byte by byte. */
function refusedBecause(text: string, message: string, limits: Limits = {}): void {
  const { error } = decodeBoth(text, limits);
  assert.ok(error instanceof ResponseFramingError, `${JSON.stringify(text)}: not refused`);
  assert.equal(error.part, "body");
  assert.equal(error.message, message, JSON.stringify(text));
}

const BODY_REASONS: readonly [string, string, Limits?][] = [
  [";a\r\nhello\r\n0\r\n\r\n", 'Malformed chunk size at byte ";"'],
  ["\r\n", 'Malformed chunk size at byte "\\r"'],
  ["5 \r\n", 'Malformed chunk size at byte " "'],
  ["5;a\x01\r\n", "Control byte in a chunk extension"],
  ["5;a\x7f\r\n", "Control byte in a chunk extension"],
  ["5;a\r\r\n", "Expected CRLF after chunk-size line"],
  ["5\rX", "Expected CRLF after chunk-size line"],
  ["5\r\nhelloX", "Expected CRLF after chunk data"],
  ["5\r\nhello\rX", "Expected CRLF after chunk data"],
  ["20000000000000\r\n", "Chunk size is too large"],
  ["5;abcdefghi\r\n", "Chunk-size line exceeds 10 bytes", { maxChunkLineBytes: 10 }],
  ["0\r\nX: yz\r\n\r\n", "Trailer section exceeds 8 bytes", { maxTrailerBytes: 8 }],
  ["0\r\nX:y\r\n\n", "Malformed trailer field line"],
  ["0\r\nX:y\rX", "Malformed trailer field line"],
  ["0\r\n\rX", "Malformed trailer field line"],
  ["0\r\nX\r\n", "Malformed trailer field line"],
  ["0\r\nX@:y\r\n", "Malformed trailer field line"],
  ["0\r\n:y\r\n", "Malformed trailer field line"],
  ["0\r\nX:\x00\r\n", "Malformed trailer field line"],
  ["0\r\nX:y\r\n\x01", "Malformed trailer field line"],
];

Deno.test("BodyDecoder refuses each malformed chunked body with the reason that names it", () => {
  for (const [text, message, limits] of BODY_REASONS) refusedBecause(text, message, limits);
});

Deno.test("BodyDecoder reads every hex digit in either case as its value", () => {
  for (const digit of "0123456789abcdefABCDEF") {
    const size = parseInt(digit, 16);
    const data = "x".repeat(size);
    const wire = size === 0 ? "0\r\n\r\n" : `${digit}\r\n${data}\r\n0\r\n\r\n`;
    assert.deepEqual(decodeBoth(wire), { body: data, done: true, error: undefined }, digit);
  }
  assert.equal(decodeBoth("10\r\n" + "y".repeat(16) + "\r\n0\r\n\r\n").body.length, 16);
});

Deno.test("BodyDecoder refuses the bytes beside the hex digits as a chunk size", () => {
  const shown: [string, string][] = [
    ["\x00", String.raw`"\u0000"`],
    ["\x7f", String.raw`"\u007f"`],
    ["\xff", String.raw`"\u00ff"`],
  ];
  for (const byte of "/:@`Gg") shown.push([byte, `"${byte}"`]);
  for (const [byte, quoted] of shown) {
    refusedBecause(`${byte}\r\n`, `Malformed chunk size at byte ${quoted}`);
  }
});

Deno.test("BodyDecoder takes a chunk size of exactly 2^53 - 1 and refuses one more", () => {
  const at = decodeBoth("1fffffffffffff\r\nabc");
  assert.deepEqual(at, { body: "abc", done: false, error: undefined });
  refusedBecause("20000000000000\r\n", "Chunk size is too large");
});

Deno.test("BodyDecoder ends the body at the blank line after trailers, not at a trailer's CRLF", () => {
  const wire = "0\r\nA: 1\r\nB-2: x y\r\n\r\nHTTP";
  const decoder = new BodyDecoder(CHUNKED);
  const used = decoder.feed(bytes(wire), 0, wire.length, () => assert.fail("no data"));
  assert.equal(used, wire.length - 4);
  assert.ok(decoder.done);
  const early = new BodyDecoder(CHUNKED);
  const upTo = "0\r\nA: 1\r\n";
  assert.equal(early.feed(bytes(upTo), 0, upTo.length, () => {}), upTo.length);
  assert.equal(early.done, false, "a trailer's own CRLF does not end the body");
});

/** Parses `text` as a GET's response head. */
function head(text: string, options: { maxHeadBytes?: number; maxHeaders?: number } = {}) {
  const buf = bytes(text);
  return parseResponseHead(buf, 0, buf.length, { method: "GET", ...options });
}

const HEAD_REASONS: readonly [string, string, { maxHeadBytes?: number; maxHeaders?: number }?][] = [
  ["HTTP/1.1 200 OK\n", "Bare LF in response head"],
  ["\nHTTP/1.1 200 OK\r\n\r\n", "Bare LF in response head"],
  [`${OK}X: 1\r\n\n`, "Bare LF in response head"],
  [`${OK}X: ${"a".repeat(40)}`, "Response head exceeds 40 bytes", { maxHeadBytes: 40 }],
  [`${OK}X: 1\r\nY: 2\r\n\r\n`, "Response head has more than 1 header fields", { maxHeaders: 1 }],
  ["HTTP/1.1 20 OK\r\n\r\n", 'Malformed status line "HTTP/1.1 20 OK"'],
  ["HTTP/1.1 099 Low\r\n\r\n", 'Malformed status line "HTTP/1.1 099 Low"'],
  ["HTTP/1.1 2x0 OK\r\n\r\n", 'Malformed status line "HTTP/1.1 2x0 OK"'],
  ["HTTP/1.1 200\tOK\r\n\r\n", 'Malformed status line "HTTP/1.1 200\\tOK"'],
  ["HTTP/1.1 200 O\x7fK\xff\r\n\r\n", 'Malformed status line "HTTP/1.1 200 O\\u007fK\\u00ff"'],
  ["HTTP/1.2 200 OK\r\n\r\n", 'Malformed status line "HTTP/1.2 200 OK"'],
  [`${OK}X: a\r\n b\r\n\r\n`, "Obsolete line folding in response"],
  [`${OK}X: a\r\n\tb\r\n\r\n`, "Obsolete line folding in response"],
  [`${OK}X : a\r\n\r\n`, 'Malformed header field line "X : a"'],
  [`${OK}: a\r\n\r\n`, 'Malformed header field line ": a"'],
  [`${OK}X\r\n\r\n`, 'Malformed header field line "X"'],
  [`${OK}X: a\x00b\r\n\r\n`, 'Control byte in header "X: a\\u0000b"'],
  [`${OK}X: a\rb\r\n\r\n`, 'Control byte in header "X: a\\rb"'],
  [`${OK}Transfer-Encoding: gzip\r\n\r\n`, 'Unsupported Transfer-Encoding "gzip"'],
  [`${OK}Transfer-Encoding: chunked, chunked\r\n\r\n`, "Transfer-Encoding chunked more than once"],
  [
    `${OK}Content-Length: 1\r\nContent-Length: 2\r\n\r\n`,
    'Invalid or conflicting Content-Length "1, 2"',
  ],
  [
    `${OK}Content-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n`,
    "Both Transfer-Encoding and Content-Length",
  ],
  [
    "HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
    "Transfer-Encoding on an HTTP/1.0 response",
  ],
  [
    `${OK}Content-Length: 9007199254740992\r\n\r\n`,
    'Content-Length "9007199254740992" is too large',
  ],
];

Deno.test("parseResponseHead() refuses each malformed head with the reason that names it", () => {
  for (const [text, message, options] of HEAD_REASONS) {
    assert.throws(
      () => head(text, options),
      (e) => e instanceof ResponseFramingError && e.part === "head" && e.message === message,
      `${JSON.stringify(text)}: not refused with ${JSON.stringify(message)}`,
    );
  }
});

const TCHARS = "!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

Deno.test("parseResponseHead() and trailers take every tchar in a field name and no other byte", () => {
  for (const c of TCHARS) {
    const parsed = head(`${OK}X${c}: 1\r\nContent-Length: 0\r\n\r\n`);
    assert.deepEqual(parsed?.rawHeaders, [`X${c}`, "1", "Content-Length", "0"], c);
    assert.ok(decodeBoth(`0\r\nX${c}: 1\r\n\r\n`).done, `trailer ${c}`);
  }
  for (let b = 0; b < 256; b++) {
    const c = String.fromCharCode(b);
    if (TCHARS.includes(c) || c === ":" || c === "\r" || c === "\n") continue;
    assert.throws(() => head(`${OK}X${c}Y: 1\r\n\r\n`), ResponseFramingError, `byte ${b}`);
    assert.ok(
      decodeBoth(`0\r\nX${c}Y: 1\r\n\r\n`).error instanceof ResponseFramingError,
      `trailer byte ${b}`,
    );
  }
});

Deno.test("parseResponseHead() and trailers take every field-value byte and refuse every control", () => {
  for (let b = 0; b < 256; b++) {
    const c = String.fromCharCode(b);
    if (c === "\r" || c === "\n") continue;
    const field = b === 0x09 || (b >= 0x20 && b !== 0x7f);
    const wire = `${OK}X: a${c}b\r\nContent-Length: 0\r\n\r\n`;
    const trailer = decodeBoth(`0\r\nX: a${c}b\r\n\r\n`);
    const reason = `HTTP/1.1 200 O${c}K\r\nContent-Length: 0\r\n\r\n`;
    if (field) {
      assert.equal(head(wire)?.rawHeaders[1], `a${c}b`, `byte ${b}`);
      assert.ok(trailer.done, `trailer byte ${b}`);
      assert.equal(head(reason)?.reason, `O${c}K`, `reason byte ${b}`);
    } else {
      assert.throws(() => head(wire), ResponseFramingError, `byte ${b}`);
      assert.ok(trailer.error instanceof ResponseFramingError, `trailer byte ${b}`);
      assert.throws(() => head(reason), ResponseFramingError, `reason byte ${b}`);
    }
  }
});

Deno.test("framing errors quote at most 64 characters of the upstream's line", () => {
  const name = "N".repeat(70);
  const shown = `${name}: v`.slice(0, 64);
  assert.throws(
    () => head(`${OK}${name}: v\x01\r\n\r\n`),
    (e) => e instanceof ResponseFramingError && e.message === `Control byte in header "${shown}"`,
  );
  const exact = "N".repeat(61);
  assert.throws(
    () => head(`${OK}${exact}:\x01\r\n\r\n`),
    (e) =>
      e instanceof ResponseFramingError &&
      e.message === `Control byte in header "${exact}:\\u0001"`,
  );
});

Deno.test("parseResponseHead() reads an empty first line as a malformed status line, not a bare LF", () => {
  for (const text of ["\r\n\r\n", "\r\nHTTP/1.1 200 OK\r\n\r\n"]) {
    assert.throws(
      () => head(text),
      (e) => e instanceof ResponseFramingError && e.message === 'Malformed status line ""',
      JSON.stringify(text),
    );
  }
});

Deno.test("parseResponseHead() takes only digits as the status, a space or nothing after it", () => {
  for (const status of ["2/0", "2:0", "/00", "20:"]) {
    assert.throws(() => head(`HTTP/1.1 ${status} OK\r\n\r\n`), ResponseFramingError, status);
  }
  for (
    const line of ["HTTP/1.1 200X", "HTTP/1.1 200\x01", "HTTP/1.1 200 \x01", "HTTP/1.1 200 \x7f"]
  ) {
    assert.throws(() => head(`${line}\r\n\r\n`), ResponseFramingError, JSON.stringify(line));
  }
  assert.equal(head("HTTP/1.1 200 \t\r\n\r\n")?.reason, "\t");
  assert.equal(head("HTTP/1.1 100 Continue\r\n\r\n")?.status, 100);
});

Deno.test("parseResponseHead() reads a value that follows the colon at once, and long values whole", () => {
  assert.deepEqual(head(`${OK}X:v\r\nY:\tw\r\n\r\n`)?.rawHeaders, ["X", "v", "Y", "w"]);
  let long = "";
  for (let i = 0; long.length < 12000; i++) long += String.fromCharCode(0x21 + (i % 90));
  const parsed = head(`${OK}X: ${long}\r\n\r\n`, { maxHeadBytes: 20000 });
  assert.equal(parsed?.rawHeaders[1], long);
  const reason = long.slice(0, 9000);
  assert.equal(head(`HTTP/1.1 200 ${reason}\r\n\r\n`, { maxHeadBytes: 20000 })?.reason, reason);
});

/** A status's framing and keep-alive, answering `method`, with `Content-Length: 5`. */
function framed(method: string, status: number) {
  const buf = bytes(`HTTP/1.1 ${status} X\r\nContent-Length: 5\r\n\r\n`);
  const parsed = parseResponseHead(buf, 0, buf.length, { method });
  return [parsed?.framing.kind, parsed?.keepAlive];
}

Deno.test("parseResponseHead() frames a body for every status but 1xx, 204 and 304", () => {
  for (const status of [100, 102, 199, 204, 304]) {
    assert.deepEqual(framed("GET", status), ["none", true], `${status}`);
  }
  for (const status of [200, 203, 205, 299, 303, 305, 404]) {
    assert.deepEqual(framed("GET", status), ["length", true], `${status}`);
  }
});

Deno.test("parseResponseHead() takes only 101 and a 2xx to CONNECT as a tunnel", () => {
  assert.deepEqual(framed("GET", 101), ["none", false]);
  for (const status of [100, 102, 199]) {
    assert.deepEqual(framed("CONNECT", status), ["none", true], `${status}`);
  }
  for (const status of [200, 201, 299]) {
    assert.deepEqual(framed("CONNECT", status), ["none", false], `${status}`);
  }
  for (const status of [300, 301, 407]) {
    assert.deepEqual(framed("CONNECT", status), ["length", true], `${status}`);
  }
});

Deno.test("parseResponseHead() trims spaces and tabs on both sides of each list member", () => {
  for (const value of ["5\t, 5", "5 ,\t5", "5\t,\t5", "5 , 5"]) {
    const parsed = head(`${OK}Content-Length: ${value}\r\n\r\n`);
    assert.deepEqual(parsed?.framing, { kind: "length", length: 5 }, JSON.stringify(value));
  }
  for (const value of ["close\t, x", "x,\tclose", "x , close"]) {
    assert.equal(
      head(`${OK}Connection: ${value}\r\nContent-Length: 0\r\n\r\n`)?.keepAlive,
      false,
      value,
    );
  }
});

Deno.test("BodyDecoder holds a limit of 0 as given, not as the default", () => {
  refusedBecause("0\r\n\r\n", "Chunk-size line exceeds 0 bytes", { maxChunkLineBytes: 0 });
  refusedBecause("0\r\n\r\n", "Trailer section exceeds 0 bytes", { maxTrailerBytes: 0 });
  assert.ok(decodeBoth("0\r\n\r\n", { maxTrailerBytes: 2 }).done);
  assert.ok(decodeBoth("0\r\n\r\n", { maxChunkLineBytes: 1 }).done);
});

Deno.test("parseResponseHead() holds a limit of 0 as given, not as the default", () => {
  assert.throws(
    () => head(`${OK}\r\n`, { maxHeadBytes: 0 }),
    (e) => e instanceof ResponseFramingError && e.message === "Response head exceeds 0 bytes",
  );
  assert.throws(
    () => head(`${OK}X: 1\r\n\r\n`, { maxHeaders: 0 }),
    (e) =>
      e instanceof ResponseFramingError &&
      e.message === "Response head has more than 0 header fields",
  );
  assert.equal(head(`${OK}\r\n`, { maxHeaders: 0 })?.status, 200);
});

Deno.test("parseResponseHead() checks every byte of `HTTP/1.x ` before the status", () => {
  const line = "HTTP/1.1 200 OK";
  for (let at = 0; at < 9; at++) {
    if (at === 7) continue; // the minor version, 0 or 1
    const wrong = line.slice(0, at) + "X" + line.slice(at + 1);
    assert.throws(
      () => head(`${wrong}\r\n\r\n`),
      (e) => e instanceof ResponseFramingError && e.message === `Malformed status line "${wrong}"`,
      wrong,
    );
  }
  assert.equal(head("HTTP/1.0 200 OK\r\n\r\n")?.minor, 0);
});

const LOCAL = { hostname: "127.0.0.1", port: 9901, name: "lanes.local_health.listen[0]" };
const SIX = { hostname: "::1", port: 9903, name: "lanes.public.listen[0]" };

Deno.test("ownListener() takes the unspecified address as this machine's loopback listener", () => {
  for (const host of ["0.0.0.0", "0", "[::]"]) {
    assert.equal(ownListener(host, 9901, [LOCAL])?.name, LOCAL.name, host);
    assert.equal(ownListener(host, 9903, [SIX])?.name, SIX.name, host);
  }
  assert.equal(ownListener("10.0.0.1", 9901, [LOCAL]), undefined, "a LAN address is not loopback");
  assert.equal(ownListener("not a host", 9901, [LOCAL]), undefined);
});

Deno.test("resolvedBy() names the hosts file only when it maps the name somewhere", () => {
  const machine: LocalMachine = {
    hostname: "vm",
    hosts: new Map([["vm", []], ["db.test", ["10.0.0.9", "::1"]]]),
    addresses: new Set(),
    unread: [],
  };
  assert.equal(resolvedBy("vm", machine), " (the host name of this machine)");
  assert.equal(resolvedBy("db.test", machine), ' (/etc/hosts maps "db.test" to 10.0.0.9, ::1)');
  assert.equal(resolvedBy("other.test", machine), "");
  assert.equal(resolvedBy("127.0.0.1", machine), "");
  assert.equal(resolvedBy("not a host", machine), "");
});

Deno.test("refuseLoopbackTunnel() lets a loopback tunnel through when the target or the loopback address is allowed", () => {
  const bound = "127.0.0.1";
  const byTarget = new PrivateAllowance(["far.test:8080"]);
  const byRange = new PrivateAllowance(["127.0.0.0/8"]);
  assert.equal(refuseLoopbackTunnel("far.test", 8080, bound, byTarget, [LOCAL]), undefined);
  assert.equal(refuseLoopbackTunnel("far.test", 8080, bound, byRange, [LOCAL]), undefined);
  assert.equal(
    refuseLoopbackTunnel("far.test", 8080, bound, new PrivateAllowance(["far.test:8081"]), [LOCAL]),
    "The SOCKS instance reached far.test:8080 from 127.0.0.1: it is on this machine, not in " +
      "egress.allow_private",
  );
  assert.equal(
    refuseLoopbackTunnel("far.test", 9901, bound, byTarget, [LOCAL]),
    "The SOCKS instance reached far.test:9901 from 127.0.0.1: it is on this machine, and port " +
      "9901 is this gateway's own listener lanes.local_health.listen[0] (127.0.0.1:9901); " +
      "egress.allow_private never opens a way back in",
  );
  assert.equal(refuseLoopbackTunnel("far.test", 9901, "far.test", byTarget, [LOCAL]), undefined);
  for (const unreadable of ["", "[::1", "1.2.3.4.5.6", "a b"]) {
    assert.equal(refuseLoopbackTunnel("far.test", 9901, unreadable, byTarget, [LOCAL]), undefined);
  }
});

Deno.test("refuseOwnDestination() and refusePeer() refuse with the whole sentence, and only an own listener", () => {
  const machine: LocalMachine = {
    hostname: "vm",
    hosts: new Map(),
    addresses: new Set(),
    unread: [],
  };
  assert.equal(
    refuseOwnDestination("127.0.0.1", 9901, [LOCAL], machine),
    "Destination 127.0.0.1:9901 reaches this gateway's own listener lanes.local_health.listen[0] " +
      "(127.0.0.1:9901); egress.allow_private never opens a way back in",
  );
  assert.equal(refuseOwnDestination("127.0.0.1", 9902, [LOCAL], machine), undefined);
  assert.equal(
    refusePeer("db.example", 9903, "::1", [SIX], machine),
    "The direct connection to db.example:9903 reached ::1, this gateway's own listener " +
      "lanes.public.listen[0] (::1:9903); egress.allow_private never opens a way back in",
  );
  assert.equal(refusePeer("db.example", 9903, "10.0.0.1", [SIX], machine), undefined);
});

Deno.test("parseResponseHead() reads framing from field names, never from a value that spells one", () => {
  const parsed = head(
    `${OK}X-A: connection\r\nclose: 1\r\nX-B: content-length\r\n7: x\r\nContent-Length: 0\r\n\r\n`,
  );
  assert.deepEqual([parsed?.framing, parsed?.keepAlive], [{ kind: "length", length: 0 }, true]);
  const te = head(`${OK}X-A: transfer-encoding\r\nchunked: 1\r\n\r\n`);
  assert.deepEqual([te?.framing, te?.keepAlive], [{ kind: "close" }, false]);
});

Deno.test("ownListener() matches a listener's own spelling, and a name that resolves to its address", () => {
  const named = { hostname: "gateway.internal", port: 9904, name: "lanes.public.listen[1]" };
  assert.equal(ownListener("GATEWAY.internal.", 9904, [named])?.name, named.name);
  const onPublic = { hostname: "203.0.113.5", port: 9905, name: "lanes.public.listen[2]" };
  const machine: LocalMachine = {
    hostname: "vm",
    hosts: new Map([["front.test", ["203.0.113.5"]], ["other.test", ["203.0.113.6"]]]),
    addresses: new Set(["203.0.113.5"]),
    unread: [],
  };
  assert.equal(ownListener("front.test", 9905, [onPublic], machine)?.name, onPublic.name);
  assert.equal(ownListener("203.0.113.5", 9905, [onPublic], machine)?.name, onPublic.name);
  assert.equal(ownListener("other.test", 9905, [onPublic], machine), undefined);
});
