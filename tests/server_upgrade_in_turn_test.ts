/**
 * An `Upgrade` request waits its turn (src/server/connection_state.ts, queued_answers.ts): on one
 * HTTP/1.1 connection it is admitted, answered, tunnelled or refused only once every request
 * pipelined before it was answered, and a client that leaves ends every answer still owed to it,
 * so no upstream socket outlives its connection. Against the real gateway as a subprocess under
 * the flags `main.ts flags` derives, with a tenant proxying to a recording upstream; each test
 * asserts the bytes the client received, in order, and what the upstream was sent.
 *
 * Before this rule (issue 31's transport, attacked from outside): a POST and an Upgrade in one
 * write got the 101 and the tunnel's bytes first and the POST's answer inside the tunnel; eight
 * POSTs and an Upgrade got one `429 per_connection_limit` for the eight answers the upstream had
 * produced; and eight proxied GETs and an Upgrade left with a reset or a FIN kept seven upstream
 * sockets open for good, while the ledger balanced.
 *
 * @module
 */
import assert from "node:assert/strict";
import { AbruptConnection, type Leaving, LEAVINGS } from "./fixtures/abrupt_client.ts";
import { freePorts, Gateway, proofConfig, writeConfig } from "./fixtures/gateway.ts";
import { parseResponses, type RawResponse, writeAll } from "./fixtures/http_client.ts";
import { UpstreamFixture } from "./fixtures/upstream.ts";
import { noneHeld, upstreamSocketsWhen } from "./fixtures/upstream_sockets.ts";

const HOST = "turn.test";
/** The body file two pipelined answers send before an Upgrade: far more than a socket buffers. */
const BIG = 4 * 1024 * 1024;

/**
 * Boots the gateway beside a recording upstream, runs `body`, and stops both.
 *
 * @param perConnection the ledger's `per_connection` (the proof config's 8 by default)
 */
async function withGateway(
  body: (g: Gateway, upstream: UpstreamFixture) => Promise<void>,
  perConnection = 8,
) {
  const upstream = await UpstreamFixture.start();
  try {
    const [publicPort, localPort] = freePorts(2);
    const ports = { public: publicPort, local_health: localPort, provider_health: 0 };
    const config = proofConfig(ports, { egress: { direct: [`127.0.0.1:${upstream.port}`] } });
    // Room for every attacker's requests at once: none is refused for the lane being full.
    Object.assign(config.ledger as object, {
      application_slots: 128,
      per_connection: perConnection,
    });
    const tenant = {
      host: HOST,
      routes: [
        { name: "home", match: { path: "/" }, respond: { status: 200, body: "home" } },
        { name: "big", match: { path: "/big" }, respond: { body_file: "assets/big.bin" } },
        {
          name: "api",
          match: { prefix: "/api/" },
          proxy: {
            backends: [{ url: `http://127.0.0.1:${upstream.port}` }],
            rewrite: { strip_prefix: "/api" },
          },
        },
      ],
    };
    const files = { "assets/big.bin": new Uint8Array(BIG).fill(0x62) };
    const gateway = await Gateway.start(await writeConfig(config, [tenant], files), ports);
    try {
      await body(gateway, upstream);
    } finally {
      await gateway.dispose();
    }
  } finally {
    await upstream.stop();
  }
}

/** A request head for {@link HOST}. */
function head(method: string, path: string, fields: readonly string[] = [], host = HOST): string {
  return `${method} ${path} HTTP/1.1\r\nHost: ${host}\r\n${
    fields.map((f) => `${f}\r\n`).join("")
  }\r\n`;
}

const WEBSOCKET = ["Connection: Upgrade", "Upgrade: websocket", "Sec-WebSocket-Version: 13"];

/** `POST /api/echo/<n>` with a five-byte body. */
const post = (n: number) => head("POST", `/api/echo/${n}`, ["Content-Length: 5"]) + "hello";
/** An Upgrade to the upstream's echo tunnel, and the first tunnel bytes right behind its head. */
const TUNNEL = head("GET", "/api/tunnel", WEBSOCKET) + "ping";

/**
 * Writes `bytes` in one write and reads until `done` says the answer is whole, the gateway closes,
 * or 10 s pass.
 *
 * @returns what arrived, one char per byte
 */
async function converse(
  port: number,
  bytes: string,
  done: (text: string) => boolean,
): Promise<string> {
  const conn = await Deno.connect({ hostname: "127.0.0.1", port });
  const timer = setTimeout(() => conn.close(), 10_000);
  let text = "";
  try {
    await writeAll(conn, new TextEncoder().encode(bytes));
    const buffer = new Uint8Array(65536);
    while (!done(text)) {
      const n = await conn.read(buffer).catch(() => null);
      if (n === null) break;
      for (let i = 0; i < n; i += 8192) {
        text += String.fromCharCode(...buffer.subarray(i, Math.min(n, i + 8192)));
      }
    }
    return text;
  } finally {
    clearTimeout(timer);
    try {
      conn.close();
    } catch { /* closed by the timer or the peer */ }
  }
}

/**
 * Each response as its status and what it is: the upstream path an echo names, a failure's code,
 * the tunnel's bytes after a 101, `-` for anything else.
 */
function summary(responses: readonly RawResponse[]): string[] {
  return responses.map((r) => {
    if (r.status === 101) return `101 ${r.body}`;
    const body = r.body.startsWith("{") ? JSON.parse(r.body) : {};
    return `${r.status} ${body.url ?? body.error?.code ?? "-"}`;
  });
}

/** The requests the upstream received whole, as `METHOD url body`. */
function seen(upstream: UpstreamFixture): string[] {
  return upstream.seen.map((s) => `${s.method} ${s.url} ${s.body}`.trimEnd());
}

Deno.test("upgrade in turn: a POST's answer comes before the 101 of the Upgrade pipelined behind it", async () => {
  await withGateway(async (g, upstream) => {
    // The upstream answers the POST 300 ms late: long after it could answer the Upgrade.
    const slowPost = head("POST", "/api/slow/300", ["Content-Length: 5"]) + "hello";
    const text = await converse(g.ports.public, slowPost + TUNNEL, (t) => t.endsWith("ping"));
    assert.match(text, /^HTTP\/1\.1 200 /, JSON.stringify(text.slice(0, 120)));
    assert.deepEqual(summary(parseResponses(text)), ["200 /slow/300", "101 ping"]);
    assert.deepEqual(seen(upstream).sort(), ["GET /tunnel", "POST /slow/300 hello"]);
  });
});

Deno.test("upgrade in turn: eight POSTs (per_connection 8) then an Upgrade get eight answers in order, then the 101", async () => {
  await withGateway(async (g, upstream) => {
    const posts = [1, 2, 3, 4, 5, 6, 7, 8];
    const wire = posts.map(post).join("") + TUNNEL;
    const text = await converse(g.ports.public, wire, (t) => t.endsWith("ping"));
    const expected = [...posts.map((n) => `200 /echo/${n}`), "101 ping"];
    assert.deepEqual(summary(parseResponses(text)), expected);
    const sent = posts.map((n) => `POST /echo/${n} hello`);
    assert.deepEqual(seen(upstream).sort(), [...sent, "GET /tunnel"].sort());
  });
});

Deno.test("upgrade in turn: nine requests over per_connection 8, then an Upgrade: nine answers, then the 101", async () => {
  await withGateway(async (g, upstream) => {
    const gets = [1, 2, 3, 4, 5, 6, 7, 8, 9];
    const wire = gets.map((n) => head("GET", `/api/echo/${n}`)).join("") + TUNNEL;
    const text = await converse(g.ports.public, wire, (t) => t.endsWith("ping"));
    const expected = [...gets.map((n) => `200 /echo/${n}`), "101 ping"];
    assert.deepEqual(summary(parseResponses(text)), expected);
    assert.equal(upstream.seen.filter((s) => s.url === "/tunnel").length, 1);
  });
});

Deno.test("upgrade in turn: with per_connection 1, an Upgrade behind a GET is admitted once the GET's answer released its slot", async () => {
  await withGateway(async (g) => {
    const text = await converse(
      g.ports.public,
      head("GET", "/api/echo/1") + TUNNEL,
      (t) => t.endsWith("ping"),
    );
    assert.deepEqual(summary(parseResponses(text)), ["200 /echo/1", "101 ping"]);
  }, 1);
});

Deno.test("upgrade in turn: an Upgrade's refusal (421 unknown host, 400 h2c with a body) comes after the answer before it", async () => {
  await withGateway(async (g, upstream) => {
    const slow = head("GET", "/api/slow/300");
    const unknown = head("GET", "/", WEBSOCKET, "nobody.test");
    const h2c = head("POST", "/api/echo/2", [
      "Connection: Upgrade, HTTP2-Settings",
      "Upgrade: h2c",
      "HTTP2-Settings: AAMAAABkAAQAAP__",
      "Content-Length: 5",
    ]) + "hello";
    for (
      const [upgrade, refusal] of [[unknown, "421 misdirected_request"], [h2c, "400 bad_request"]]
    ) {
      const text = await converse(g.ports.public, slow + upgrade, () => false);
      assert.deepEqual(summary(parseResponses(text)), ["200 /slow/300", refusal]);
    }
    assert.deepEqual(seen(upstream), ["GET /slow/300", "GET /slow/300"]);
  });
});

Deno.test("upgrade in turn: an Upgrade after a request refused with a close is dropped unserved", async () => {
  await withGateway(async (g, upstream) => {
    // The second request is refused at once (two Host fields: 400, and the connection closes
    // after it), in its turn behind the first; the Upgrade came after the close was decided.
    const slow = head("GET", "/api/slow/300");
    const refused = head("GET", "/api/echo/2", ["Host: other.test"]);
    const text = await converse(g.ports.public, slow + refused + TUNNEL, () => false);
    const responses = parseResponses(text);
    assert.deepEqual(summary(responses), ["200 /slow/300", "400 bad_request"]);
    assert.equal(responses[1].headers.connection, "close");
    assert.deepEqual(seen(upstream), ["GET /slow/300"]);
  });
});

Deno.test("upgrade in turn: answers before an Upgrade go out in full past the socket's buffer, then the 101", async () => {
  await withGateway(async (g) => {
    const wire = head("GET", "/big").repeat(2) + TUNNEL;
    const text = await converse(g.ports.public, wire, (t) => t.endsWith("ping"));
    const responses = parseResponses(text);
    assert.deepEqual(responses.map((r) => [r.status, r.body.length]), [
      [200, BIG],
      [200, BIG],
      [101, 4],
    ]);
  });
});

/**
 * One attacker's connection: `wire` in one write, then it leaves with `leaving` — after `ms`,
 * once the first answer byte arrived, or once `ready()` holds (polled; at most 5 s).
 */
async function leaveAfter(
  port: number,
  wire: string,
  leaving: Leaving,
  after: { ms: number } | "first-byte" | (() => boolean),
): Promise<void> {
  // Half-open: the gateway's own end of the connection does not end the client's before it leaves.
  const connection = await AbruptConnection.plain(port, true);
  await connection.write(wire);
  if (after === "first-byte") await connection.receive(1);
  else if (typeof after === "function") {
    const until = Date.now() + 5000;
    while (!after() && Date.now() < until) await new Promise((resolve) => setTimeout(resolve, 10));
  } else await new Promise((resolve) => setTimeout(resolve, after.ms));
  await connection.leave(leaving);
}

for (const leaving of LEAVINGS) {
  Deno.test(`upgrade in turn: clients leaving (${leaving}) answers pipelined before an Upgrade hold no upstream socket`, async () => {
    await withGateway(async (g, upstream) => {
      const port = g.ports.public;
      const paths = (c: string) => Array.from({ length: 8 }, (_, i) => `/echo/${c}-${i}`);
      const gets = (c: string) => paths(c).map((path) => head("GET", `/api${path}`)).join("");
      const answered = (c: string) => () => {
        const urls = new Set(upstream.seen.map((s) => s.url));
        return paths(c).every((path) => urls.has(path));
      };
      const long = head("GET", "/api/bytes/4000000");
      const attacks: Promise<void>[] = [];
      for (let c = 0; c < 4; c++) {
        // The attacker's: eight proxied GETs and an Upgrade, left 20 ms later …
        attacks.push(leaveAfter(port, gets(`a${c}`) + TUNNEL, leaving, { ms: 20 }));
        // … or once the upstream answered all eight (their answers then wait for the client).
        attacks.push(leaveAfter(port, gets(`b${c}`) + TUNNEL, leaving, answered(`b${c}`)));
        // Long answers queued behind the first, with and without an Upgrade behind them.
        attacks.push(leaveAfter(port, long.repeat(3) + TUNNEL, leaving, "first-byte"));
        attacks.push(leaveAfter(port, long.repeat(3), leaving, "first-byte"));
      }
      await Promise.all(attacks);
      const sockets = await upstreamSocketsWhen(g.ports.local_health, noneHeld);
      assert.ok(noneHeld(sockets), `upstream sockets still held: ${JSON.stringify(sockets)}`);
      const reading = await g.ledgerWhen((r) =>
        r.outstanding === 0 && r.lanes.public.connections === 0
      );
      assert.equal(reading.completed + reading.cancelled, reading.admitted);
      // Each request reached the upstream at most once.
      const heads = upstream.heads.filter((h) => h.startsWith("GET /echo/"));
      assert.equal(new Set(heads).size, heads.length, heads.join(", "));
    });
  });
}
