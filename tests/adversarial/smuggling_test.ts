/**
 * Request smuggling through a body the upstream does not expect, as an attacker found it: a `GET`
 * (or `HEAD`, `OPTIONS`, `DELETE`) with `Transfer-Encoding: chunked` was accepted, the encoding
 * dropped by header hygiene, and the body still written — unframed, because node's client frames
 * no body on those methods — onto the pooled upstream connection, where the upstream read it as
 * requests of its own: a `GET /admin` past a deny route, or an unfinished `POST` that swallowed
 * the next client's request, cookies and all.
 *
 * Now a body on GET, HEAD or TRACE is refused (`body_not_allowed`), and every other body travels
 * inside a frame the gateway writes itself. Each case checks what the client got and what the
 * upstream — the recording fixture, or real nginx — received, request by request.
 *
 * @module
 */
import assert from "node:assert/strict";
import { parseResponses, type RawResponse } from "../fixtures/http_client.ts";
import { NginxUpstream } from "../fixtures/nginx.ts";
import { peerTest } from "../fixtures/require.ts";
import { type Arena, arenaTest, SHOP, withArena } from "./arena.ts";

/** A request hidden in a body: a route the tenant would never let through as itself. */
const HIDDEN = `GET /api/admin HTTP/1.1\r\nHost: ${SHOP}\r\n\r\n`;
/** An unfinished request hidden in a body: the next request on the connection becomes its body. */
const CAPTURE = `POST /api/capture HTTP/1.1\r\nHost: ${SHOP}\r\nContent-Length: 120\r\n\r\n`;

/** `body` as a chunked body in two chunks. */
function chunked(body: string): string {
  const cut = Math.floor(body.length / 2);
  const chunk = (text: string) => `${text.length.toString(16)}\r\n${text}\r\n`;
  return chunk(body.slice(0, cut)) + chunk(body.slice(cut)) + "0\r\n\r\n";
}

/** A request with `body` in the given framing, kept alive. */
function withBody(method: string, path: string, body: string, framing: "chunked" | "length") {
  const head = `${method} ${path} HTTP/1.1\r\nHost: ${SHOP}\r\n`;
  return framing === "chunked"
    ? `${head}Transfer-Encoding: chunked\r\n\r\n${chunked(body)}`
    : `${head}Content-Length: ${body.length}\r\n\r\n${body}`;
}

/**
 * Opens a connection to `port`, writes `bytes` and reads until `count` complete responses arrived
 * (or the gateway closed, or 8 s passed); the connection is left open until then.
 */
async function responsesOn(
  port: number,
  bytes: string,
  count: number,
  methods: readonly string[],
): Promise<RawResponse[]> {
  const conn = await Deno.connect({ hostname: "127.0.0.1", port });
  const timer = setTimeout(() => conn.close(), 8000);
  let text = "";
  try {
    await conn.write(new TextEncoder().encode(bytes));
    const buffer = new Uint8Array(65536);
    for (;;) {
      try {
        const responses = parseResponses(text, methods);
        if (responses.length >= count) return responses;
      } catch { /* incomplete: read on */ }
      let n: number | null;
      try {
        n = await conn.read(buffer);
      } catch {
        n = null;
      }
      if (n === null) break;
      text += new TextDecoder("latin1").decode(buffer.subarray(0, n));
    }
    return parseResponses(text, methods);
  } finally {
    clearTimeout(timer);
    try {
      conn.close();
    } catch { /* closed */ }
  }
}

/** Every URL the recording upstream received a head for. */
function urlsSeen(arena: Arena): string[] {
  return arena.upstream.heads.map((head) => head.split(" ")[1]);
}

/** Waits until the recording upstream has seen `count` whole requests (or 5 s passed). */
async function seenAtLeast(arena: Arena, count: number): Promise<void> {
  const until = Date.now() + 5000;
  while (arena.upstream.seen.length < count && Date.now() < until) {
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

arenaTest("adversarial: bodies the upstream does not expect", {}, {
  "a body on GET, HEAD or TRACE is 400 body_not_allowed in either framing; nothing goes upstream":
    async (arena) => {
      for (const method of ["GET", "HEAD", "TRACE"]) {
        for (const framing of ["chunked", "length"] as const) {
          const bytes = withBody(method, "/api/echo", HIDDEN, framing) +
            `GET /api/after HTTP/1.1\r\nHost: ${SHOP}\r\n\r\n`;
          const responses = await responsesOn(arena.ports.public, bytes, 2, [method]);
          const label = `${method} ${framing}`;
          assert.equal(responses.length, 1, `${label}: one answer, then the connection closes`);
          assert.equal(responses[0].status, 400, label);
          assert.equal(responses[0].headers.connection, "close", label);
          if (method !== "HEAD") {
            assert.equal(JSON.parse(responses[0].body).error.code, "body_not_allowed", label);
          }
        }
      }
      assert.deepEqual(arena.upstream.heads, [], "nothing reached the upstream");
    },

  "OPTIONS and DELETE carry a body upstream inside the gateway's own framing, nothing smuggled":
    async (arena) => {
      for (const method of ["OPTIONS", "DELETE"]) {
        for (const framing of ["chunked", "length"] as const) {
          arena.upstream.seen.length = 0;
          arena.upstream.heads.length = 0;
          const bytes = withBody(method, "/api/echo", HIDDEN, framing) +
            `GET /api/after HTTP/1.1\r\nHost: ${SHOP}\r\nConnection: close\r\n\r\n`;
          const responses = await responsesOn(arena.ports.public, bytes, 2, [method, "GET"]);
          const label = `${method} ${framing}`;
          assert.deepEqual(responses.map((r) => r.status), [200, 200], label);
          const echoed = JSON.parse(responses[0].body);
          assert.equal(echoed.method, method, label);
          assert.equal(echoed.body, HIDDEN, `${label}: the body arrived as a body, byte for byte`);
          await seenAtLeast(arena, 2);
          // Pipelined requests run side by side (up to per_connection), so in either order.
          assert.deepEqual(urlsSeen(arena).sort(), ["/after", "/echo"], `${label}: nothing else`);
          const index = arena.upstream.seen.findIndex((seen) => seen.url === "/echo");
          const headers = arena.upstream.headersOf(index);
          // The gateway's framing, whatever the client used: a length for a length, chunks for
          // chunks — never a body without either.
          if (framing === "length") {
            assert.deepEqual(headers.get("content-length"), [String(HIDDEN.length)], label);
            assert.equal(headers.get("transfer-encoding"), undefined, label);
          } else {
            assert.deepEqual(headers.get("transfer-encoding"), ["chunked"], label);
            assert.equal(headers.get("content-length"), undefined, label);
          }
        }
      }
    },

  "an unfinished request hidden in a DELETE body never swallows the next client's request": async (
    arena,
  ) => {
    const attacker = await responsesOn(
      arena.ports.public,
      withBody("DELETE", "/api/echo", CAPTURE, "chunked"),
      1,
      ["DELETE"],
    );
    assert.equal(attacker[0]?.status, 200);
    assert.equal(JSON.parse(attacker[0].body).body, CAPTURE);
    // The victim reuses the gateway's pooled upstream connection.
    const victim = await arena.send({ path: "/api/victim", headers: [["Cookie", "secret=1"]] });
    assert.equal(victim.status, 200);
    const echoed = JSON.parse(victim.body);
    assert.equal(echoed.url, "/victim", "the victim got its own answer");
    assert.ok(echoed.headers.includes("secret=1"));
    await seenAtLeast(arena, 2);
    assert.deepEqual(urlsSeen(arena), ["/echo", "/victim"], "no /capture request upstream");
  },

  "a declared length is written by the gateway, in its canonical spelling": async (arena) => {
    const bytes = `PUT /api/echo HTTP/1.1\r\nHost: ${SHOP}\r\nContent-Length: 0005\r\n` +
      "Connection: close\r\n\r\nhello";
    const [response] = await responsesOn(arena.ports.public, bytes, 1, ["PUT"]);
    assert.equal(response.status, 200);
    assert.equal(JSON.parse(response.body).body, "hello");
    assert.deepEqual(arena.upstream.headersOf(0).get("content-length"), ["5"]);
  },
});

peerTest(
  "adversarial: a chunked OPTIONS body never reaches real nginx as a request of its own",
  ["nginx"],
  async (peers) => {
    const nginx = await NginxUpstream.start(peers.nginx);
    let entries: Awaited<ReturnType<NginxUpstream["stop"]>> = [];
    let responses: RawResponse[] = [];
    try {
      const routes = () => [{
        name: "all",
        match: { prefix: "/" },
        proxy: { backends: [{ url: `http://127.0.0.1:${nginx.port}` }] },
      }, {
        name: "admin",
        match: { prefix: "/admin" },
        respond: { status: 403, body: "denied" },
      }];
      const edit = (config: Record<string, unknown>) => {
        (config.egress as { direct: string[] }).direct.push(`127.0.0.1:${nginx.port}`);
      };
      await withArena({ routes, edit }, async (arena) => {
        const hidden = `GET /admin/ HTTP/1.1\r\nHost: ${SHOP}\r\n\r\n`;
        responses = await responsesOn(
          arena.ports.public,
          withBody("OPTIONS", "/opts", hidden, "chunked") +
            withBody("DELETE", "/del", hidden, "length") +
            `GET /last HTTP/1.1\r\nHost: ${SHOP}\r\nConnection: close\r\n\r\n`,
          3,
          ["OPTIONS", "DELETE", "GET"],
        );
      });
    } finally {
      entries = await nginx.stop();
    }
    assert.deepEqual(responses.map((r) => r.status), [200, 200, 200]);
    assert.deepEqual(
      entries.map((e) => `${e.method} ${e.uri} ${e.status}`).sort(),
      ["DELETE /del 200", "GET /last 200", "OPTIONS /opts 200"],
      "nginx parsed exactly the three requests the client sent (in any order), and no /admin/",
    );
    for (const entry of entries.filter((e) => e.method !== "GET")) {
      assert.equal(entry.body, `GET /admin/ HTTP/1.1\r\nHost: ${SHOP}\r\n\r\n`);
    }
  },
);
