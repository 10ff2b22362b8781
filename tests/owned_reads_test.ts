/**
 * Upstream responses read on the gateway's own connections (`egress.owned_reads`, on by default):
 *
 * - differential: the same scripted upstream answers, relayed once with owned reads and once with
 *   `node:http`'s client, reach the client the same (status, headers, body) — or, where the owned
 *   reader is deliberately stricter, as a 502 while the upstream's connection is dropped;
 * - buffer reuse cannot corrupt a body: a numbered 8 MiB body read by a slow client, in both
 *   framings, arrives byte for byte;
 * - keep-alive: one upstream connection carries sequential requests; when the upstream closes an
 *   idle one, the next request opens another and nothing fails;
 * - a body cut short by the upstream reaches the client cut short;
 * - the upstream receives the request head `node:http`'s client would write, byte for byte
 *   (obs-text as the client sent it), and a head with CR, LF or NUL in a field is never written.
 *
 * The upstream here is a raw TCP script, so the test sees the gateway's connections from outside.
 *
 * @module
 */
import { SETTLE_MS } from "../src/egress/reuse_settle.ts";
import assert from "node:assert/strict";
import {
  parseResponses,
  type RawResponse,
  readUntilClosed,
  utf8,
  writeAll,
} from "./fixtures/http_client.ts";
import { waitFor } from "./fixtures/in_process.ts";
import { closeQuietly, type ProxyEdge, SHOP, withProxyEdge } from "./fixtures/proxy_edge.ts";
import { requestHead } from "../src/proxy/owned_attempt.ts";

const encoder = new TextEncoder();

/** A scripted upstream: answers `GET /case/<name>` with the case's bytes; counts connections. */
interface Script {
  readonly port: number;
  /** Connections accepted so far. */
  readonly accepted: () => number;
  /** Connections the gateway closed (a read returned end of stream or failed). */
  readonly closedByGateway: () => number;
  /** Every request head received, as bytes read one character per byte. */
  readonly heads: string[];
  /** Closes every connection idle between requests (the upstream's keep-alive ran out). */
  closeIdle(): void;
  stop(): Promise<void>;
}

/** One scripted answer: its bytes (written in the given pieces), and whether to close after it. */
interface Case {
  readonly pieces: readonly (string | Uint8Array)[];
  readonly close?: boolean;
}

function scriptedUpstream(cases: Record<string, Case>): Script {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const open = new Set<Deno.Conn>();
  const idle = new Set<Deno.Conn>();
  let accepted = 0;
  let closedByGateway = 0;
  const heads: string[] = [];
  const serve = async (conn: Deno.Conn) => {
    const buffer = new Uint8Array(16384);
    let pending = "";
    try {
      for (;;) {
        idle.add(conn);
        while (!pending.includes("\r\n\r\n")) {
          const n = await conn.read(buffer);
          if (n === null) {
            closedByGateway++;
            return;
          }
          pending += String.fromCharCode(...buffer.subarray(0, n));
        }
        idle.delete(conn);
        const end = pending.indexOf("\r\n\r\n");
        const line = pending.slice(0, pending.indexOf("\r\n"));
        heads.push(pending.slice(0, end + 4));
        pending = pending.slice(end + 4);
        const name = /^[A-Z]+ \/case\/([^\s?]+)\S* HTTP\/1\.1$/.exec(line)?.[1] ?? "";
        const answer = cases[name] ??
          { pieces: ["HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"] };
        for (const piece of answer.pieces) {
          await writeAll(conn, typeof piece === "string" ? encoder.encode(piece) : piece);
        }
        if (answer.close) return;
      }
    } catch {
      closedByGateway++;
    } finally {
      open.delete(conn);
      idle.delete(conn);
      closeQuietly(conn);
    }
  };
  const loop = (async () => {
    for await (const conn of listener) {
      accepted++;
      open.add(conn);
      serve(conn);
    }
  })();
  return {
    port: (listener.addr as Deno.NetAddr).port,
    accepted: () => accepted,
    closedByGateway: () => closedByGateway,
    heads,
    closeIdle() {
      for (const conn of idle) closeQuietly(conn);
    },
    async stop() {
      listener.close();
      for (const conn of open) closeQuietly(conn);
      await loop.catch(() => {});
    },
  };
}

/** Runs `body` against an edge whose `shop.test` routes `/case/…` to the script, direct. */
async function withScript(
  cases: Record<string, Case>,
  ownedReads: boolean | { ownedReads: boolean; way: "direct" | "socks" },
  body: (
    send: (name: string, method?: string) => Promise<RawResponse>,
    script: Script,
    p: ProxyEdge,
  ) => Promise<void>,
): Promise<void> {
  const { ownedReads: owned, way } = typeof ownedReads === "boolean"
    ? { ownedReads, way: "direct" }
    : ownedReads;
  const script = scriptedUpstream(cases);
  try {
    await withProxyEdge({
      socks: way === "socks" ? [{}] : [],
      routes: () => [{
        name: "cases",
        match: { prefix: "/case/" },
        proxy: { backends: [{ url: `http://127.0.0.1:${script.port}` }] },
      }],
      egress: () => ({
        direct: way === "direct" ? [`127.0.0.1:${script.port}`] : [],
        allow_private: ["127.0.0.0/8"],
        owned_reads: owned,
        body_idle_ms: 2000,
      }),
    }, async (p) => {
      await body(
        // Each request comes on a fresh client connection: a pooled connection is another
        // client's only once it settled (reuse_settle.ts).
        async (name, method = "GET") => {
          await new Promise((resolve) => setTimeout(resolve, SETTLE_MS + 5));
          return await p.send({ method, path: `/case/${name}` });
        },
        script,
        p,
      );
    });
  } finally {
    await script.stop();
  }
}

const CASES: Record<string, Case> = {
  length: { pieces: ["HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-Kind: length\r\n\r\nhello"] },
  chunked: {
    pieces: [
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
      "5;name=value\r\nhello\r\n",
      "6\r\n world\r\n0\r\nX-Trailer: gone\r\n\r\n",
    ],
  },
  "chunked-split": {
    pieces: [
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1",
      "0\r\n0123456789",
      "abcdef\r",
      "\n0\r",
      "\n\r\n",
    ],
  },
  "close-delimited": { pieces: ["HTTP/1.1 200 OK\r\n\r\nuntil the end"], close: true },
  "http10": { pieces: ["HTTP/1.0 200 OK\r\nContent-Length: 4\r\n\r\nold!"], close: true },
  "no-content": { pieces: ["HTTP/1.1 204 No Content\r\n\r\n"] },
  "not-modified": { pieces: ['HTTP/1.1 304 Not Modified\r\nETag: "x"\r\n\r\n'] },
  "continue-then-ok": {
    pieces: [
      "HTTP/1.1 100 Continue\r\n\r\n",
      "HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n",
      "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
    ],
  },
  "empty-reason": { pieces: ["HTTP/1.1 599 \r\nContent-Length: 1\r\n\r\nx"] },
  "many-headers": {
    pieces: [
      `HTTP/1.1 200 OK\r\n${
        Array.from({ length: 60 }, (_, i) => `X-H${i}: v${i}\r\n`).join("")
      }Content-Length: 0\r\n\r\n`,
    ],
  },
  "utf8-body": {
    pieces: [
      "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\n",
      new Uint8Array([0xc3, 0xa9, 0xe2, 0x82, 0xac, 0x21]),
    ],
  },
  "length-and-chunked": {
    pieces: [
      "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
    ],
  },
  "two-lengths": {
    pieces: ["HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd"],
  },
  "bad-chunk-size": {
    pieces: ["HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n"],
  },
  "xchunked": {
    pieces: ["HTTP/1.1 200 OK\r\nTransfer-Encoding: xchunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"],
  },
  "trailing-bytes": {
    pieces: ["HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 200 OK\r\n\r\n"],
  },
  "obs-fold": { pieces: ["HTTP/1.1 200 OK\r\nX-A: one\r\n two\r\nContent-Length: 1\r\n\r\nx"] },
  "bare-lf": { pieces: ["HTTP/1.1 200 OK\nContent-Length: 1\n\nx"] },
  "te-on-http10": {
    pieces: ["HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n0\r\n\r\n"],
    close: true,
  },
  "space-before-colon": { pieces: ["HTTP/1.1 200 OK\r\nX-A : one\r\nContent-Length: 1\r\n\r\nx"] },
  "nul-in-value": { pieces: ["HTTP/1.1 200 OK\r\nX-A: o\u0000ne\r\nContent-Length: 1\r\n\r\nx"] },
  "chunk-size-space": {
    pieces: ["HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1 \r\nx\r\n0\r\n\r\n"],
  },
  "not-http": { pieces: ["SSH-2.0-OpenSSH_9.6\r\n\r\n"] },
  "unasked-101": {
    pieces: [
      "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n",
    ],
  },
};

/**
 * The cases both readers answer: all but the trailing bytes, which would be read as the next
 * answer on a connection `node:http` keeps.
 */
const ALIKE = Object.keys(CASES).filter((name) => name !== "trailing-bytes");

/** What the client saw, minus what differs per request (the date, the request id). */
function seen(response: RawResponse): string {
  const headers = Object.entries(response.headers)
    .filter(([name]) => !["date", "x-request-id", "keep-alive", "connection"].includes(name))
    .sort(([a], [b]) => a.localeCompare(b));
  const body = response.body.replace(/"request_id":"[^"]*"/, '"request_id":"…"');
  return JSON.stringify({ status: response.status, headers, body });
}

/**
 * Where the owned reader is deliberately stricter than `node:http`'s client, which relays the
 * first as a body read to the connection's end, decodes chunks sent on HTTP/1.0, and cuts off
 * the response after an upgrade nobody asked for: each is a 502 before anything is relayed.
 */
const STRICTER = ["xchunked", "te-on-http10", "unasked-101"];

Deno.test("owned reads: every scripted answer reaches the client as node:http's client relays it", async () => {
  const results: Record<string, Record<string, string>> = { owned: {}, node: {} };
  for (const [label, owned] of [["owned", true], ["node", false]] as const) {
    await withScript(CASES, owned, async (send) => {
      for (const name of ALIKE) {
        results[label][name] = await send(name).then(seen, () => "cut short");
      }
      results[label]["head"] = await send("length", "HEAD").then(seen, () => "cut short");
    });
  }
  const differ = [...ALIKE, "head"].filter((name) => results.owned[name] !== results.node[name]);
  assert.deepEqual(differ, STRICTER, "the owned reader differs only where it is stricter");
  for (const name of STRICTER) assert.notEqual(results.node[name], results.owned[name], name);
  // The owned reader refused what breaks HTTP/1.1 framing in the head, and relayed the rest.
  for (
    const name of [
      "length-and-chunked",
      "two-lengths",
      "xchunked",
      "not-http",
      "unasked-101",
      "obs-fold",
      "bare-lf",
      "te-on-http10",
      "space-before-colon",
      "nul-in-value",
    ]
  ) {
    assert.equal(JSON.parse(results.owned[name]).status, 502, name);
  }
  for (const name of ["bad-chunk-size", "chunk-size-space"]) {
    assert.equal(results.owned[name], "cut short", `${name}: a body framing error after the head`);
  }
  assert.equal(JSON.parse(results.owned["chunked"]).body, "hello world");
  assert.equal(JSON.parse(results.owned["chunked-split"]).body, "0123456789abcdef");
  assert.equal(JSON.parse(results.owned["close-delimited"]).body, "until the end");
  assert.equal(JSON.parse(results.owned["continue-then-ok"]).body, "ok");
  assert.equal(JSON.parse(results.owned["head"]).body, "");
});

Deno.test("owned reads: a refused answer's connection is dropped, a good one is reused", async () => {
  await withScript(CASES, true, async (send, script) => {
    assert.equal((await send("length")).status, 200);
    assert.equal((await send("length")).status, 200);
    assert.equal(script.accepted(), 1, "two sequential requests shared one upstream connection");
    // The GET is tried again on fresh connections (the route's attempts); each answer is refused.
    assert.equal((await send("two-lengths")).status, 502);
    const tried = script.accepted();
    assert.ok(tried >= 2, `the refused GET was tried again (${tried} connections)`);
    await waitFor(() => script.closedByGateway(), (n) => n === tried);
    assert.equal((await send("length")).status, 200);
    assert.equal(script.accepted(), tried + 1, "no refused answer's connection was used again");
    // Bytes after a whole body answer nothing: relayed without them, on a connection not reused.
    const trailing = await send("trailing-bytes");
    assert.equal(trailing.status, 200);
    assert.equal(trailing.body, "ok");
    await waitFor(() => script.closedByGateway(), (n) => n === tried + 1);
    assert.equal((await send("length")).status, 200);
    assert.equal(script.accepted(), tried + 2);
  });
});

Deno.test("owned reads: an idle connection the upstream closed is dropped before it is used", async () => {
  await withScript(CASES, true, async (send, script, p) => {
    assert.equal((await send("length")).status, 200);
    assert.equal(script.accepted(), 1);
    script.closeIdle();
    await waitFor(async () => (await p.egress()).retries, (n) => n === 0);
    // The gateway learns of the close from the idle connection's pending read, not from a request.
    for (let i = 0; i < 5; i++) {
      const response = await send("length");
      assert.equal(
        response.status,
        200,
        `request ${i} after the upstream closed its idle connection`,
      );
      assert.equal(response.body, "hello");
    }
    assert.equal(script.accepted(), 2, "one new connection, reused for the rest");
    // Not one request went to the closed connection and had to be sent again.
    assert.equal((await p.egress()).retries, 0);
  });
});

/** A body whose every line is numbered, so a lost, repeated or reordered chunk shows. */
function numberedBody(bytes: number): Uint8Array {
  const out = new Uint8Array(bytes);
  for (let i = 0, at = 0; at < bytes; i++, at += 10) {
    for (let digit = 8, n = i; digit >= 0; digit--, n = Math.floor(n / 10)) {
      if (at + digit < bytes) out[at + digit] = 0x30 + n % 10;
    }
    if (at + 9 < bytes) out[at + 9] = 0x0a;
  }
  return out;
}

/** Chunked framing of `body` in pieces of varying size. */
function chunked(body: Uint8Array): Uint8Array[] {
  const out: Uint8Array[] = [
    encoder.encode("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"),
  ];
  for (let at = 0, size = 1; at < body.length; at += size, size = (size * 7 + 13) % 100_000 + 1) {
    const piece = body.subarray(at, Math.min(body.length, at + size));
    out.push(encoder.encode(`${piece.length.toString(16)}\r\n`), piece, encoder.encode("\r\n"));
  }
  out.push(encoder.encode("0\r\n\r\n"));
  return out;
}

/** Reads a whole response slowly (a pause every 256 KiB); returns the body bytes after the head. */
async function slowRead(port: number, path: string): Promise<Uint8Array> {
  const conn = await Deno.connect({ hostname: "127.0.0.1", port });
  try {
    await writeAll(
      conn,
      encoder.encode(`GET ${path} HTTP/1.1\r\nHost: ${SHOP}\r\nConnection: close\r\n\r\n`),
    );
    const parts: Uint8Array[] = [];
    const buffer = new Uint8Array(65536);
    let since = 0;
    for (let n = await conn.read(buffer); n !== null; n = await conn.read(buffer)) {
      parts.push(buffer.slice(0, n));
      since += n;
      if (since >= 256 * 1024) {
        since = 0;
        await new Promise((resolve) => setTimeout(resolve, 5));
      }
    }
    const all = new Uint8Array(parts.reduce((sum, p) => sum + p.length, 0));
    let at = 0;
    for (const part of parts) all.set(part, (at += part.length) - part.length);
    const text = new TextDecoder("latin1").decode(all.subarray(0, 4096));
    const end = text.indexOf("\r\n\r\n");
    assert.ok(end > 0, "a response head");
    const head = text.slice(0, end);
    assert.match(head, /^HTTP\/1\.1 200 /);
    const body = all.subarray(end + 4);
    if (!/transfer-encoding: chunked/i.test(head)) return body;
    const [decoded] = parseResponses(`${head}\r\n\r\n${new TextDecoder("latin1").decode(body)}`);
    return encoder.encode(decoded.body);
  } finally {
    closeQuietly(conn);
  }
}

Deno.test("owned reads: an 8 MiB body read by a slow client arrives byte for byte in both framings", async () => {
  const body = numberedBody(8 * 1024 * 1024);
  const cases: Record<string, Case> = {
    length: { pieces: [`HTTP/1.1 200 OK\r\nContent-Length: ${body.length}\r\n\r\n`, body] },
    chunked: { pieces: chunked(body) },
  };
  await withScript(cases, true, async (_send, _script, p) => {
    const port = p.t.ports.public;
    for (const name of ["length", "chunked"]) {
      const got = await slowRead(port, `/case/${name}`);
      assert.equal(got.length, body.length, `${name}: length`);
      let first = -1;
      for (let i = 0; i < body.length && first === -1; i++) if (got[i] !== body[i]) first = i;
      assert.equal(
        first,
        -1,
        `${name}: first differing byte at ${first}: ${
          utf8(String.fromCharCode(...got.subarray(Math.max(0, first - 20), first + 20)))
        }`,
      );
    }
  });
});

Deno.test("owned reads: a body the upstream cuts short reaches the client cut short", async () => {
  const cases: Record<string, Case> = {
    short: {
      pieces: [
        "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly forty bytes of the hundred promised.",
      ],
      close: true,
    },
    "short-chunked": {
      pieces: ["HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n10\r\nsixteen bytes..."],
      close: true,
    },
  };
  await withScript(cases, true, async (_send, _script, p) => {
    const port = p.t.ports.public;
    for (const name of ["short", "short-chunked"]) {
      const conn = await Deno.connect({ hostname: "127.0.0.1", port });
      try {
        await writeAll(
          conn,
          encoder.encode(
            `GET /case/${name} HTTP/1.1\r\nHost: ${SHOP}\r\nConnection: close\r\n\r\n`,
          ),
        );
        const { text } = await readUntilClosed(conn, 10_000);
        assert.match(text, /^HTTP\/1\.1 200 /, name);
        if (name === "short") {
          assert.match(text, /content-length: 100/i);
          assert.ok(text.endsWith("only forty bytes of the hundred promised."), name);
        } else {
          assert.ok(!text.endsWith("0\r\n\r\n"), `${name}: the chunked body was not completed`);
        }
      } finally {
        closeQuietly(conn);
      }
    }
  });
});

Deno.test("owned reads: the upstream receives the request head node:http's client would write, byte for byte", async () => {
  // A value with obs-text (the byte 0xE9, as a Latin-1 client sends it), odd spacing and many fields.
  const wire = "GET /case/length?q=%C3%A9&x=1 HTTP/1.1\r\nHost: shop.test\r\nX-Latin: caf\xe9\r\n" +
    "X-Spaces:   a  b\t \r\nAccept: */*\r\nUser-Agent: test/1\r\nConnection: close\r\n\r\n";
  const received: Record<string, string> = {};
  for (const [label, owned] of [["owned", true], ["node", false]] as const) {
    await withScript(CASES, owned, async (_send, script, p) => {
      const conn = await Deno.connect({ hostname: "127.0.0.1", port: p.t.ports.public });
      try {
        await writeAll(conn, Uint8Array.from(wire, (c) => c.charCodeAt(0)));
        const { text } = await readUntilClosed(conn, 10_000);
        assert.match(text, /^HTTP\/1\.1 200 /, `${label}: ${text.slice(0, 300)}`);
      } finally {
        closeQuietly(conn);
      }
      assert.equal(script.heads.length, 1, label);
      // Ids differ per request; everything else is the gateway's choice and must not depend on the reader.
      received[label] = script.heads[0].replaceAll(`:${script.port}`, ":<port>").replace(
        /^(x-request-id|x-portcullis-request-id|traceparent): .*\r\n/gim,
        "",
      );
    });
  }
  assert.ok(received.owned.includes("X-Latin: caf\xe9\r\n"), JSON.stringify(received.owned));
  assert.equal(received.owned, received.node);
});

Deno.test("owned reads: a request head that would break framing is never written", () => {
  const ok = requestHead("GET", "/a?b=c", ["Host", "x", "X-Latin", "caf\xe9"]);
  assert.equal(ok[ok.indexOf(0xe9)], 0xe9, "obs-text goes out as the byte it came in as");
  const refused: [string, string, string[]][] = [
    ["GET", "/a", ["X-A", "one\r\nX-Injected: two"]],
    ["GET", "/a", ["X-A", "one\nX-Injected: two"]],
    ["GET", "/a", ["X-A", "nul\u0000"]],
    ["GET", "/a", ["X A", "space in the name"]],
    ["GET", "/a", ["X-A:", "colon in the name"]],
    ["GET", "/a", ["", "empty name"]],
    ["GET", "/a", ["X-A", "wide \u0100 character"]],
    ["GET", "/a b", ["Host", "x"]],
    ["GET", "/a\r\nX: y", ["Host", "x"]],
    ["G T", "/a", ["Host", "x"]],
  ];
  for (const [method, target, headers] of refused) {
    assert.throws(
      () => requestHead(method, target, headers),
      TypeError,
      JSON.stringify([method, target, headers]),
    );
  }
});

Deno.test("owned reads: through a SOCKS instance too, with the same strictness", async () => {
  const seenBy: Record<string, Record<string, string>> = { owned: {}, node: {} };
  for (const [label, ownedReads] of [["owned", true], ["node", false]] as const) {
    await withScript(CASES, { ownedReads, way: "socks" }, async (send, script, p) => {
      for (const name of ["length", "chunked", "close-delimited", "xchunked"]) {
        seenBy[label][name] = await send(name).then(seen, () => "cut short");
      }
      assert.equal(
        (await p.egress()).instances[0].requests > 0,
        true,
        "the exchanges went through SOCKS",
      );
      assert.ok(script.accepted() >= 1);
    });
  }
  for (const name of ["length", "chunked", "close-delimited"]) {
    assert.equal(seenBy.owned[name], seenBy.node[name], name);
    assert.equal(JSON.parse(seenBy.owned[name]).status, 200, name);
  }
  // Only the owned reader refuses this head: proof that SOCKS exchanges are read by the gateway.
  assert.equal(JSON.parse(seenBy.owned.xchunked).status, 502);
  assert.notEqual(seenBy.node.xchunked, seenBy.owned.xchunked);
});
