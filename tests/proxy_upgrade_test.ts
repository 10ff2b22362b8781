/**
 * Proxy dataplane, `Upgrade` tunnels end to end: a proxied upgrade gets the upstream's 101 and an
 * echo tunnel through SOCKS that holds one public reservation until the client closes; an
 * upgrade request to a `respond` route gets the ordinary response.
 *
 * @module
 */
import assert from "node:assert/strict";
import { exchange, parseResponses, writeAll } from "./fixtures/http_client.ts";
import { balancedLedger, waitFor } from "./fixtures/in_process.ts";
import {
  apiRoute,
  egressWhen,
  rawConnection,
  SHOP,
  single,
  type Site,
  values,
  withProxyEdge,
} from "./fixtures/proxy_edge.ts";
import { withLegacyHeaders } from "./fixtures/named_headers.ts";

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** Reads from `conn` until `text` holds `until`; returns everything read. */
async function readUntil(conn: Deno.Conn, text: string, until: (text: string) => boolean) {
  const buffer = new Uint8Array(4096);
  while (!until(text)) {
    const n = await conn.read(buffer);
    if (n === null) throw new Error(`connection closed; read ${JSON.stringify(text)}`);
    text += decoder.decode(buffer.subarray(0, n));
  }
  return text;
}

const routes = (site: Site) => [
  apiRoute(site),
  { name: "static", match: { path: "/static" }, respond: { status: 200, body: "plain" } },
];

Deno.test("proxy upgrade: a 101 tunnel echoes through SOCKS and holds one reservation until closed", async () => {
  await withProxyEdge({ routes, edit: withLegacyHeaders }, async (p) => {
    const before = await p.t.ledger();
    const { conn, close } = await rawConnection(p);
    try {
      const head = `GET /api/chat?room=1 HTTP/1.1\r\nHost: ${SHOP}\r\nConnection: Upgrade\r\n` +
        "Upgrade: echo\r\nX-Request-Id: tunnel-1\r\n\r\n";
      // Bytes sent right behind the head must reach the upstream too.
      await writeAll(conn, encoder.encode(`${head}early!`));
      let text = await readUntil(conn, "", (t) => t.includes("\r\n\r\n"));
      const end = text.indexOf("\r\n\r\n");
      const lines = text.slice(0, end).split("\r\n");
      assert.match(lines[0], /^HTTP\/1\.1 101 /);
      const field = (name: string) =>
        lines.slice(1).filter((l) => l.toLowerCase().startsWith(`${name}:`))
          .map((l) => l.slice(name.length + 1).trim());
      assert.deepEqual(field("upgrade"), ["echo"]);
      assert.deepEqual(field("connection").map((v) => v.toLowerCase()), ["upgrade"]);
      assert.deepEqual(field("x-request-id"), ["tunnel-1"]);
      assert.deepEqual(field("x-upstream"), ["yes"]);
      text = await readUntil(conn, text.slice(end + 4), (t) => t.length >= 6);
      assert.equal(text, "early!");

      for (const message of ["ping-1", "a".repeat(100_000), "ping-3"]) {
        await writeAll(conn, encoder.encode(message));
        const echoed = await readUntil(conn, "", (t) => t.length >= message.length);
        assert.equal(echoed, message);
      }

      const open = await p.t.ledger();
      assert.equal(open.lanes.public.in_use, 1);
      assert.equal(open.outstanding, 1);

      const seen = p.upstream.seen.at(-1)!;
      assert.equal(seen.url, "/chat?room=1");
      assert.equal(single(seen.rawHeaders, "host"), `127.0.0.1:${p.upstream.port}`);
      assert.equal(single(seen.rawHeaders, "upgrade"), "echo");
      assert.equal(single(seen.rawHeaders, "connection").toLowerCase(), "upgrade");
      assert.equal(single(seen.rawHeaders, "x-portcullis-route"), "api");
      assert.deepEqual(values(seen.rawHeaders, "x-request-id"), ["tunnel-1"]);
      assert.equal(p.socks[0].connects.length, 1);
    } finally {
      close();
    }
    const after = await waitFor(
      () => p.t.ledger(),
      (l) => l.lanes.public.in_use === 0 && l.outstanding === 0,
    );
    assert.equal(after.lanes.public.admitted, before.lanes.public.admitted + 1);
    assert.equal(after.completed + after.cancelled, after.admitted);
    // The upstream side of the tunnel went with the client side.
    await egressWhen(p, (e) => e.instances[0].active === 0);
  });
});

Deno.test("proxy upgrade: an Upgrade request to a respond route gets the ordinary response", async () => {
  await withProxyEdge({ routes, edit: withLegacyHeaders }, async (p) => {
    const raw = await exchange(
      p.t.ports.public,
      `GET /static HTTP/1.1\r\nHost: ${SHOP}\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n`,
      3000,
    );
    const [response] = parseResponses(raw);
    assert.equal(response.status, 200);
    assert.equal(response.body, "plain");
    assert.equal(response.headers.upgrade, undefined);
    assert.equal(p.upstream.seen.length, 0);
    assert.equal(p.socks[0].accepted, 0);
    await balancedLedger(p.t);
  });
});
