/**
 * Timeouts on TLS connections of the public lane: the HTTP/1.1 head timeout (closed, no reply), a
 * stalled or half-sent handshake (closed by the handshake bound, `timeouts.header_ms`), the
 * keep-alive idle timeout, and several requests on one kept-alive TLS connection.
 *
 * @module
 */
import assert from "node:assert/strict";
import { withTlsEdge } from "./fixtures/tls_edge.ts";
import { TlsClient, tlsTest } from "./fixtures/certs.ts";
import { balancedLedger, type TestEdge, waitFor, within } from "./fixtures/in_process.ts";

/** An edge terminating TLS for a.test with a 1 s head timeout and `idleMs` of idle time. */
function withIdleEdge(
  idleMs: number,
  body: (t: TestEdge, ca: string[]) => Promise<void>,
  http2 = true,
): Promise<void> {
  return withTlsEdge({
    names: ["a.test"],
    tls: { http2 },
    edit: (config) => config.timeouts = { header_ms: 1000, idle_ms: idleMs },
  }, (t, pki) => body(t, [pki.ca.certPem]));
}

/** Reads from a raw TCP connection until the server closes it; resolves the bytes read. */
async function readUntilClosed(conn: Deno.Conn): Promise<number> {
  const buffer = new Uint8Array(4096);
  let total = 0;
  for (;;) {
    let n: number | null;
    try {
      n = await conn.read(buffer);
    } catch {
      return total;
    }
    if (n === null) return total;
    total += n;
  }
}

for (const http2 of [true, false]) {
  tlsTest(
    `tls timeouts: a slow HTTP/1.1 head is closed without a reply (http2: ${http2})`,
    () =>
      withIdleEdge(30_000, async (t, ca) => {
        const client = await TlsClient.open(t.ports.public, { servername: "a.test", ca });
        try {
          const started = Date.now();
          client.write("GET / HTTP/1.1\r\nHost: a.test\r\n"); // the blank line never comes
          const text = await within(client.untilClosed(), 3500);
          assert.notEqual(text, "timeout", "the connection was closed within 3.5 s");
          const elapsed = Date.now() - started;
          assert.ok(elapsed >= 900, `not before the head timeout (${elapsed} ms)`);
          assert.equal(text, "", "closed without a reply, as nginx closes it");
        } finally {
          await client.close();
        }
        const ledger = await waitFor(() => t.ledger(), (l) => l.lanes.public.connections === 0);
        assert.equal(
          ledger.lanes.public.admitted,
          0,
          "a head that never completed was never admitted",
        );
      }, http2),
  );
}

tlsTest("tls timeouts: a TCP connection that never starts its handshake is closed", async () => {
  await withIdleEdge(30_000, async (t) => {
    const conn = await Deno.connect({ hostname: "127.0.0.1", port: t.ports.public });
    try {
      const started = Date.now();
      await waitFor(() => t.snapshot().lanes.public.connections, (n) => n === 1, 1000);
      const read = await within(readUntilClosed(conn), 3500);
      assert.equal(read, 0, "closed without a byte, within 3.5 s");
      const elapsed = Date.now() - started;
      assert.ok(elapsed >= 900, `held for the handshake bound first (${elapsed} ms)`);
    } finally {
      conn.close();
    }
    await waitFor(() => t.snapshot().lanes.public.connections, (n) => n === 0);
  });
});

tlsTest(
  "tls timeouts: a handshake that stops half-way through its ClientHello is closed",
  async () => {
    await withIdleEdge(30_000, async (t) => {
      const conn = await Deno.connect({ hostname: "127.0.0.1", port: t.ports.public });
      try {
        // A handshake record header promising 512 bytes, and 4 of them.
        await conn.write(Uint8Array.of(22, 3, 1, 2, 0, 1, 0, 1, 252));
        const read = await within(readUntilClosed(conn), 3500);
        assert.notEqual(read, "timeout", "closed within 3.5 s");
      } finally {
        conn.close();
      }
      await waitFor(() => t.snapshot().lanes.public.connections, (n) => n === 0);
    });
  },
);

for (const http2 of [true, false]) {
  tlsTest(
    `tls keep-alive: requests share one TLS connection until it idles out (http2: ${http2})`,
    () =>
      withIdleEdge(300, async (t, ca) => {
        const client = await TlsClient.open(t.ports.public, { servername: "a.test", ca });
        try {
          for (let i = 0; i < 3; i++) {
            const response = await client.request({ headers: [["Host", "a.test"]] });
            assert.equal(response.status, 200, `request ${i + 1}`);
            assert.equal(response.body, "tenant a.test");
            assert.equal(client.closed, false, `still open after response ${i + 1}`);
          }
          assert.equal(t.snapshot().lanes.public.connections_accepted, 1, "one connection for all");
          const closed = await within(client.untilClosed(), 3000);
          assert.equal(closed, "", "the idle connection was closed by the server, nothing sent");
        } finally {
          await client.close();
        }
        const ledger = await balancedLedger(t);
        assert.equal(ledger.lanes.public.admitted, 3);
      }, http2),
  );
}
