/**
 * The edge's own replies have one byte shape: a reply the gateway writes straight onto a socket
 * (a head the parser gave up on, a 431, a reply to a request carrying `Connection: Upgrade`), the
 * 417 for an unknown `Expect`, and a refusal after which the gateway closes the connection read
 * like the gateway's ordinary 404 to a client that asked to close — the same header names, in the
 * same casing and order, with `Date`, and a fixed body framed by `Content-Length`, never chunked.
 * A connection that sends no head (or half of one) within `header_ms` is closed with no reply at
 * all. The reference is the gateway's own 404, not another server's: the rule is self-consistency,
 * so that no one kind of request singles the software out. The edge runs as `main.ts serve` under
 * the flags `main.ts flags` derives.
 *
 * @module
 */
import assert from "node:assert/strict";
import { freePorts, Gateway, proofConfig, writeConfig } from "./fixtures/gateway.ts";
import { exchange } from "./fixtures/http_client.ts";

/** A reply as bytes say it: status, header names and values in wire order, body. */
interface Wire {
  readonly status: number;
  readonly fields: readonly [string, string][];
  readonly body: string;
}

function parseWire(text: string, label: string): Wire {
  const end = text.indexOf("\r\n\r\n");
  assert.ok(end > 0, `${label}: a whole reply head: ${JSON.stringify(text.slice(0, 200))}`);
  const [statusLine, ...lines] = text.slice(0, end).split("\r\n");
  const status = Number(/^HTTP\/1\.1 (\d{3}) /.exec(statusLine)?.[1]);
  const fields = lines.map((line): [string, string] => {
    const colon = line.indexOf(":");
    return [line.slice(0, colon), line.slice(colon + 1).trim()];
  });
  return { status, fields, body: text.slice(end + 4) };
}

/** The names of a reply's fields, as written. */
function names(wire: Wire): string[] {
  return wire.fields.map(([name]) => name);
}

function field(wire: Wire, name: string): string | undefined {
  return wire.fields.find(([n]) => n.toLowerCase() === name)?.[1];
}

/**
 * The shape every own reply shares: the gateway's fields in lower case (its Content-Type among
 * them), then `content-length`, `Date`, `Connection: close`; a Date within a minute of now; a
 * body exactly as long as the length says; no Transfer-Encoding.
 */
function assertOwnShape(wire: Wire, label: string): void {
  const all = names(wire);
  const tail = all.slice(-3);
  assert.deepEqual(tail, ["content-length", "Date", "Connection"], `${label}: ${all}`);
  for (const name of all.slice(0, -3)) {
    assert.equal(name, name.toLowerCase(), `${label}: own field ${name} in lower case`);
  }
  assert.ok(all.includes("content-type"), `${label}: a content-type`);
  assert.equal(field(wire, "transfer-encoding"), undefined, `${label}: not chunked`);
  assert.equal(field(wire, "connection"), "close", label);
  assert.equal(Number(field(wire, "content-length")), new TextEncoder().encode(wire.body).length);
  const date = Date.parse(field(wire, "date")!);
  assert.ok(Math.abs(date - Date.now()) < 60_000, `${label}: a current Date`);
}

const TENANT = {
  host: "shop.test",
  routes: [{ name: "home", match: { path: "/" }, respond: { body: "shop" } }],
};

/** Each request kind whose reply the gateway writes on a path of its own, and the status. */
const PROBES: readonly [string, string, number][] = [
  ["garbage", "garbage\r\n\r\n", 400],
  ["NUL in the request line", "GET /\0 HTTP/1.1\r\nHost: shop.test\r\n\r\n", 400],
  [
    "Content-Length with Transfer-Encoding",
    "POST / HTTP/1.1\r\nHost: shop.test\r\n" +
    "Content-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    400,
  ],
  [
    "headers over the cap",
    `GET / HTTP/1.1\r\nHost: shop.test\r\nX-Big: ${"b".repeat(20_000)}\r\n\r\n`,
    431,
  ],
  [
    "Connection: Upgrade, no route",
    "GET /zz HTTP/1.1\r\nHost: shop.test\r\n" +
    "Connection: Upgrade\r\nUpgrade: foo\r\n\r\n",
    404,
  ],
  [
    "Connection: Upgrade, unknown host",
    "GET / HTTP/1.1\r\nHost: nobody.test\r\n" +
    "Connection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
    421,
  ],
  [
    "h2c upgrade with a body",
    "POST / HTTP/1.1\r\nHost: shop.test\r\n" +
    "Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAoAAAAAIAAAAA\r\n" +
    "Content-Length: 3\r\n\r\nabc",
    400,
  ],
  [
    "unknown Expect, closing",
    "POST / HTTP/1.1\r\nHost: shop.test\r\nExpect: foo\r\n" +
    "Content-Length: 3\r\nConnection: close\r\n\r\nabc",
    417,
  ],
  [
    "unknown Expect, keep-alive",
    "POST / HTTP/1.1\r\nHost: shop.test\r\nExpect: bar\r\n" +
    "Content-Length: 3\r\n\r\nabc",
    417,
  ],
];

Deno.test("own replies: every reply the edge writes itself has the shape of its ordinary 404, and a silent head is closed unanswered", async () => {
  const [pub, local, provider] = freePorts(3);
  const lanes = { public: pub, local_health: local, provider_health: provider };
  const config = proofConfig(lanes, { timeouts: { header_ms: 600, idle_ms: 30000 } });
  delete config.errors;
  // One token on the provider lane: its second request is refused by the ledger, which closes.
  const ledger = config.ledger as { lanes: { provider_health: Record<string, unknown> } };
  ledger.lanes.provider_health.rate = { per_second: 0.01, burst: 1 };
  const gateway = await Gateway.start(await writeConfig(config, [TENANT]), lanes);
  try {
    const reference = parseWire(
      await exchange(pub, "GET /nothing HTTP/1.1\r\nHost: shop.test\r\nConnection: close\r\n\r\n"),
      "reference 404",
    );
    assert.equal(reference.status, 404);
    assertOwnShape(reference, "reference 404");
    for (const [label, wire, status] of PROBES) {
      const reply = parseWire(await exchange(pub, wire, 5000), label);
      assert.equal(reply.status, status, label);
      assert.deepEqual(names(reply), names(reference), `${label}: the 404's names, case, order`);
      assertOwnShape(reply, label);
    }

    // A refusal after which the gateway itself closes (the ledger's rate budget).
    const first = parseWire(
      await exchange(provider, "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"),
      "first",
    );
    assert.equal(first.status, 200);
    const refused = parseWire(
      await exchange(provider, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"),
      "provider rate refusal",
    );
    assert.equal(refused.status, 429);
    assertOwnShape(refused, "provider rate refusal");

    // No head, or half a head, by header_ms: closed without a byte, as nginx closes it.
    for (const [label, wire] of [["silent", ""], ["half a head", "GET / HTTP/1.1\r\nHost: sh"]]) {
      const started = Date.now();
      const text = await exchange(pub, wire, 10_000);
      assert.equal(text, "", `${label}: no reply at all`);
      const took = Date.now() - started;
      assert.ok(took >= 500 && took < 9000, `${label}: closed at header_ms, not held (${took} ms)`);
    }
  } finally {
    await gateway.stop();
  }
});
