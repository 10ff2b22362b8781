/**
 * Proxy dataplane, bodies: large responses and request bodies arrive intact in both framings, a
 * broken or idle upstream body cuts the client response short, and a client that leaves
 * mid-download releases its reservation and closes the upstream side.
 *
 * @module
 */
import assert from "node:assert/strict";
import { exchange, writeAll } from "./fixtures/http_client.ts";
import { balancedLedger, waitFor, within } from "./fixtures/in_process.ts";
import {
  egressWhen,
  endlessUpstream,
  type ProxyEdge,
  rawConnection,
  SHOP,
  values,
  withProxyEdge,
} from "./fixtures/proxy_edge.ts";

const encoder = new TextEncoder();
const MiB = 1024 * 1024;

/** A body whose every line is numbered, so a lost, repeated or reordered chunk shows. */
function numberedBody(bytes: number): string {
  const lines: string[] = [];
  for (let i = 0, size = 0; size < bytes; i++) {
    const line = `${String(i).padStart(9, "0")}\n`;
    lines.push(line);
    size += line.length;
  }
  return lines.join("").slice(0, bytes);
}

/** Splits a raw answer into its head lines and body (byte string). */
function split(raw: string): { head: string[]; body: string } {
  const end = raw.indexOf("\r\n\r\n");
  assert.ok(end > 0, `no response head in ${JSON.stringify(raw.slice(0, 100))}`);
  return { head: raw.slice(0, end).split("\r\n"), body: raw.slice(end + 4) };
}

function header(head: string[], name: string): string | undefined {
  const line = head.find((l) => l.toLowerCase().startsWith(`${name}:`));
  return line?.slice(name.length + 1).trim();
}

Deno.test("proxy stream: an 8 MiB response arrives intact", async () => {
  await withProxyEdge({}, async (p) => {
    const { conn, close } = await rawConnection(p);
    let head = "";
    let body = 0;
    let foreign = 0;
    try {
      const target = `/api/bytes/${8 * MiB}`;
      const wire = `GET ${target} HTTP/1.1\r\nHost: ${SHOP}\r\nConnection: close\r\n\r\n`;
      await writeAll(conn, encoder.encode(wire));
      const buffer = new Uint8Array(65536);
      for (let n = await conn.read(buffer); n !== null; n = await conn.read(buffer)) {
        let chunk = buffer.subarray(0, n);
        if (!head.endsWith("\r\n\r\n")) {
          const text = String.fromCharCode(...chunk.subarray(0, 4096));
          const end = (head + text).indexOf("\r\n\r\n");
          if (end === -1) {
            head += text;
            continue;
          }
          chunk = chunk.subarray(end + 4 - head.length);
          head = (head + text).slice(0, end + 4);
        }
        body += chunk.length;
        for (const byte of chunk) if (byte !== 0x78) foreign++;
      }
    } finally {
      close();
    }
    const lines = head.split("\r\n");
    assert.match(lines[0], /^HTTP\/1\.1 200 /);
    assert.equal(header(lines, "content-length"), String(8 * MiB));
    assert.equal(body, 8 * MiB);
    assert.equal(foreign, 0, "the body holds bytes the upstream never sent");
    await balancedLedger(p.t);
  });
});

Deno.test("proxy stream: a 4 MiB Content-Length request body reaches the upstream intact", async () => {
  await withProxyEdge({}, async (p) => {
    const body = numberedBody(4 * MiB);
    const response = await p.send({ method: "POST", path: "/api/status/201", body });
    assert.equal(response.status, 201);
    const seen = p.upstream.seen.at(-1)!;
    assert.equal(seen.method, "POST");
    assert.deepEqual(values(seen.rawHeaders, "content-length"), [String(4 * MiB)]);
    assert.equal(seen.body.length, body.length);
    assert.ok(seen.body === body, "the body changed on the way");
  });
});

Deno.test("proxy stream: a chunked request body reaches the upstream intact", async () => {
  await withProxyEdge({}, async (p) => {
    const body = numberedBody(MiB + 12_345);
    let wire = `POST /api/status/200 HTTP/1.1\r\nHost: ${SHOP}\r\nTransfer-Encoding: chunked\r\n` +
      "Connection: close\r\n\r\n";
    for (let at = 0; at < body.length; at += 100_000) {
      const piece = body.slice(at, at + 100_000);
      wire += `${piece.length.toString(16)}\r\n${piece}\r\n`;
    }
    wire += "0\r\n\r\n";
    const { head } = split(await exchange(p.t.ports.public, wire));
    assert.match(head[0], /^HTTP\/1\.1 200 /);
    const seen = p.upstream.seen.at(-1)!;
    assert.equal(seen.method, "POST");
    assert.deepEqual(values(seen.rawHeaders, "transfer-encoding"), ["chunked"]);
    assert.deepEqual(values(seen.rawHeaders, "content-length"), []);
    assert.equal(seen.body.length, body.length);
    assert.ok(seen.body === body, "the body changed on the way");
  });
});

/**
 * GETs `path` (an upstream that promises 128 KiB and delivers 64 KiB), asserts the client response
 * was cut short, and returns how long the gateway took to cut it.
 */
async function cutShort(p: ProxyEdge, path: string): Promise<number> {
  const started = Date.now();
  const raw = await exchange(
    p.t.ports.public,
    `GET ${path} HTTP/1.1\r\nHost: ${SHOP}\r\n\r\n`,
    4000,
  );
  const elapsed = Date.now() - started;
  const { head, body } = split(raw);
  assert.match(head[0], /^HTTP\/1\.1 200 /);
  assert.equal(header(head, "content-length"), "131072");
  assert.ok(body.length < 131072, `got the whole body (${body.length} bytes)`);
  return elapsed;
}

Deno.test("proxy stream: an upstream that breaks mid-body cuts the client response short", async () => {
  await withProxyEdge({}, async (p) => {
    const elapsed = await cutShort(p, "/api/break/65536");
    assert.ok(elapsed < 3000, `the gateway kept the connection open (${elapsed} ms)`);
    const egress = await egressWhen(p, (e) => e.instances[0].failures === 1);
    assert.equal(egress.instances[0].requests, 1);
    await balancedLedger(p.t);
  });
});

Deno.test("proxy stream: an upstream body idle past body_idle_ms cuts the client response short", async () => {
  await withProxyEdge({ egress: () => ({ body_idle_ms: 300 }) }, async (p) => {
    const elapsed = await cutShort(p, "/api/stall/65536");
    assert.ok(elapsed >= 250 && elapsed < 3000, `cut after ${elapsed} ms, want ~300`);
    const egress = await egressWhen(p, (e) => e.instances[0].failures === 1);
    assert.equal(egress.instances[0].active, 0);
    await balancedLedger(p.t);
  });
});

Deno.test("proxy stream: a client leaving mid-download cancels its reservation and the upstream side", async () => {
  const upstream = endlessUpstream();
  try {
    const routes = () => [{
      name: "big",
      match: { prefix: "/big" },
      proxy: { backends: [{ url: `http://127.0.0.1:${upstream.port}` }] },
    }];
    await withProxyEdge({ routes }, async (p) => {
      const before = await p.t.ledger();
      const { conn, close } = await rawConnection(p);
      let received = 0;
      try {
        await writeAll(conn, encoder.encode(`GET /big HTTP/1.1\r\nHost: ${SHOP}\r\n\r\n`));
        const buffer = new Uint8Array(65536);
        while (received < 512 * 1024) {
          const n = await conn.read(buffer);
          assert.notEqual(n, null, "the gateway closed first");
          received += n!;
        }
        const during = await p.t.ledger();
        assert.equal(during.lanes.public.in_use, 1);
      } finally {
        close();
      }
      const sent = await within(upstream.closed, 3000);
      assert.notEqual(sent, "timeout", "the upstream connection stayed open");
      // Closed, not drained: the upstream got nowhere near its 1 GiB (socket buffers only).
      assert.ok(Number(sent) < 64 * MiB, `the upstream wrote ${sent} bytes after the client left`);
      const after = await waitFor(() => p.t.ledger(), (l) => l.outstanding === 0);
      assert.equal(after.cancelled, before.cancelled + 1);
      assert.equal(after.lanes.public.in_use, 0);
      assert.equal(after.completed + after.cancelled, after.admitted);
      const egress = await egressWhen(p, (e) => e.instances[0].active === 0);
      // The client left; that is no failure of the instance.
      assert.equal(egress.instances[0].failures, 0);
    });
  } finally {
    await upstream.stop();
  }
});
