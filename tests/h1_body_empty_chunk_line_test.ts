/**
 * Rule 5 of issue 33, for the owned response body decoder (src/egress/h1_body.ts): a chunk-size
 * line with no digits (`3\r\nabc\r\n\r\n…`) is refused as a malformed chunk size, at its own CR —
 * not read as a last chunk of size 0 whose "trailers" then happen to fail on the next line. Read
 * that way, `3\r\nabc\r\n\r\n\r\n` would be a complete body `abc` and `…\r\n\r\nX: y\r\n\r\n` a body
 * with a trailer: an upstream (or whoever writes through it) could end a body where every strict
 * parser says it goes on. The unit's contract, in process: the error's kind, part and message,
 * the byte it is raised at, what was handed on before it; and h11 (tests/fixtures/
 * h1_response_oracle.py) refusing the same streams at the same line.
 *
 * @module
 */
import assert from "node:assert/strict";
import { BodyDecoder } from "../src/egress/h1_body.ts";
import { parseResponseHead, ResponseFramingError } from "../src/egress/h1_response.ts";
import { peerTest } from "./fixtures/require.ts";

const ORACLE = new URL("./fixtures/h1_response_oracle.py", import.meta.url).pathname;
const HEAD = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
/** Where the empty chunk-size line's CR is in every body below: after `3\r\nabc\r\n`. */
const EMPTY_LINE_AT = "3\r\nabc\r\n".length;

/** Bodies whose second chunk-size line is empty, each followed by something else. */
const EMPTY_SIZE_LINES: readonly [string, string][] = [
  ["then a proper last chunk", "3\r\nabc\r\n\r\n0\r\n\r\n"],
  ["then an empty line (a complete body, were the empty line a zero size)", "3\r\nabc\r\n\r\n\r\n"],
  ["then a field line (a trailer, were it a zero size)", "3\r\nabc\r\n\r\nX: y\r\n\r\n"],
  ["then another chunk", "3\r\nabc\r\n\r\n2\r\nde\r\n0\r\n\r\n"],
  ["at the end of what was read", "3\r\nabc\r\n\r\n"],
];

/** A binary string (one char per byte) as bytes. */
function bytes(text: string): Uint8Array {
  return Uint8Array.from(text, (c) => c.charCodeAt(0));
}

/**
 * Feeds `body` one byte per read through one reused buffer.
 *
 * @returns what was handed on, and the offset and error of the refusal (if any)
 */
function feedByteByByte(body: string) {
  const decoder = new BodyDecoder({ kind: "chunked" });
  const buffer = new Uint8Array(1);
  let handed = "";
  for (let at = 0; at < body.length; at++) {
    buffer[0] = body.charCodeAt(at);
    try {
      decoder.feed(buffer, 0, 1, (view) => handed += String.fromCharCode(...view));
    } catch (error) {
      return { handed, at, error, done: decoder.done };
    }
  }
  return { handed, at: -1, error: undefined, done: decoder.done };
}

/** Asserts the refusal is the empty chunk size itself, raised at its CR. */
function refusedAtTheEmptyLine(what: string, body: string): void {
  const fed = feedByteByByte(body);
  assert.ok(fed.error instanceof ResponseFramingError, `${what}: not refused (${fed.error})`);
  assert.equal(fed.error.part, "body", what);
  assert.equal(fed.error.message, 'Malformed chunk size at byte "\\r"', what);
  assert.equal(fed.at, EMPTY_LINE_AT, `${what}: refused at byte ${fed.at}`);
  assert.equal(fed.handed, "abc", `${what}: the first chunk went on, nothing after it`);
  assert.equal(fed.done, false, what);
  // Fed whole, the same refusal.
  const whole = new BodyDecoder({ kind: "chunked" });
  assert.throws(
    () => whole.feed(bytes(body), 0, body.length, () => {}),
    (e) =>
      e instanceof ResponseFramingError && e.part === "body" &&
      e.message === 'Malformed chunk size at byte "\\r"',
    what,
  );
}

Deno.test(
  "rule 5: the response parser refuses an empty chunk-size line as a malformed chunk size, at its CR, whatever follows",
  () => {
    // The other side: with its size, the same body is decoded whole.
    const good = "3\r\nabc\r\n0\r\n\r\n";
    const fed = feedByteByByte(good);
    assert.equal(fed.error, undefined);
    assert.deepEqual([fed.handed, fed.done], ["abc", true]);
    // And a first size line that is empty is refused the same way, at byte 0.
    const first = feedByteByByte("\r\n\r\n");
    assert.ok(first.error instanceof ResponseFramingError);
    assert.equal(first.error.message, 'Malformed chunk size at byte "\\r"');
    assert.equal(first.at, 0);

    for (const [what, body] of EMPTY_SIZE_LINES) refusedAtTheEmptyLine(what, body);
  },
);

peerTest(
  "rule 5: h11 refuses the same empty chunk-size lines, at that line",
  ["python3-h11"],
  async (peers) => {
    const cases = [
      ...EMPTY_SIZE_LINES.map(([what, body]) => ({ what, wire: HEAD + body, refused: true })),
      { what: "the same body with its size", wire: `${HEAD}3\r\nabc\r\n0\r\n\r\n`, refused: false },
    ];
    const input = cases.map(({ wire }) => ({ bytes: btoa(wire), method: "GET" }));
    const child = new Deno.Command(peers["python3-h11"], {
      args: [ORACLE],
      stdin: "piped",
      stdout: "piped",
      stderr: "piped",
    }).spawn();
    const writer = child.stdin.getWriter();
    await writer.write(new TextEncoder().encode(JSON.stringify(input)));
    await writer.close();
    const output = await child.output();
    assert.ok(output.success, new TextDecoder().decode(output.stderr));
    const verdicts = JSON.parse(new TextDecoder().decode(output.stdout)) as {
      ok: boolean;
      error: string | null;
    }[];
    cases.forEach(({ what, wire, refused }, i) => {
      const theirs = verdicts[i];
      // Ours on the same stream: the head, then the body.
      const buf = bytes(wire);
      const head = parseResponseHead(buf, 0, buf.length, { method: "GET" });
      assert.ok(head, what);
      assert.deepEqual(head.framing, { kind: "chunked" }, what);
      const decoder = new BodyDecoder(head.framing);
      let ours: string | undefined;
      try {
        decoder.feed(buf, head.headBytes, buf.length, () => {});
        if (!decoder.done) ours = "incomplete";
      } catch (error) {
        ours = (error as Error).message;
      }
      if (!refused) {
        assert.deepEqual([ours, theirs.ok], [undefined, true], what);
        return;
      }
      assert.equal(ours, 'Malformed chunk size at byte "\\r"', what);
      assert.equal(theirs.ok, false, `${what}: h11 accepted it`);
      // h11 quotes the line it refused: the empty one, not the line after it.
      assert.equal(theirs.error, "illegal chunk header: bytearray(b'\\r\\n')", what);
    });
  },
);
