/**
 * ALPN and the SNI/Host agreement on the TLS public lane: h2 and http/1.1 on one port with
 * `http2: true`, `http2: false` offering http/1.1 only, and a Host naming another tenant than the
 * SNI answered 421 over both protocols — never with the other tenant's body. Every edge here sets
 * `http2` explicitly, so the tests do not depend on its default.
 *
 * @module
 */
import assert from "node:assert/strict";
import { withTlsEdge } from "./fixtures/tls_edge.ts";
import { h2Request, handshake, TlsClient, tlsTest } from "./fixtures/certs.ts";
import { json } from "./fixtures/http_client.ts";
import {
  balancedLedger,
  type ConfigObject,
  envelope,
  type TestEdge,
} from "./fixtures/in_process.ts";

/** An edge terminating TLS for a.test (default) and b.test, h2 on; `tls` is merged over that. */
function withH2Edge(
  tls: ConfigObject,
  body: (t: TestEdge, ca: string[]) => Promise<void>,
): Promise<void> {
  return withTlsEdge(
    { names: ["a.test", "b.test"], tls: { http2: true, ...tls } },
    (t, pki) => body(t, [pki.ca.certPem]),
  );
}

tlsTest("tls alpn: h2 is negotiated and serves the SNI's tenant over HTTP/2", async () => {
  await withH2Edge({}, async (t, ca) => {
    const response = await h2Request(t.ports.public, {
      servername: "a.test",
      authority: "a.test",
      ca,
    });
    assert.equal(response.alpn, "h2");
    assert.equal(response.status, 200);
    assert.equal(response.body, "tenant a.test");
    const b = await h2Request(t.ports.public, { servername: "b.test", authority: "b.test", ca });
    assert.equal(b.body, "tenant b.test");
    const ledger = await balancedLedger(t);
    assert.equal(ledger.lanes.public.admitted, 2);
  });
});

tlsTest(
  "tls alpn: http/1.1 (offered, or no ALPN at all) serves HTTP/1.1 on the same port",
  async () => {
    await withH2Edge({}, async (t, ca) => {
      for (const alpn of [["http/1.1"], undefined]) {
        const client = await TlsClient.open(t.ports.public, { servername: "b.test", ca, alpn });
        try {
          assert.equal(client.served.alpn, alpn ? "http/1.1" : false);
          const first = await client.request({ headers: [["Host", "b.test"]] });
          assert.equal(first.status, 200);
          assert.equal(first.body, "tenant b.test");
          const second = await client.request({ headers: [["Host", "b.test"]], path: "/healthz" });
          assert.deepEqual(json(second), { status: "ok" }, "kept alive for a second request");
        } finally {
          await client.close();
        }
      }
    });
  },
);

tlsTest("tls alpn: with http2 on, a client offering h2 and http/1.1 gets h2", async () => {
  await withH2Edge({}, async (t, ca) => {
    const served = await handshake(t.ports.public, {
      servername: "a.test",
      ca,
      alpn: ["h2", "http/1.1"],
    });
    assert.equal(served.alpn, "h2");
  });
});

tlsTest("tls alpn: http2 false offers http/1.1 only; an h2-only client never gets h2", async () => {
  await withH2Edge({ http2: false }, async (t, ca) => {
    const both = await handshake(t.ports.public, {
      servername: "a.test",
      ca,
      alpn: ["h2", "http/1.1"],
    });
    assert.equal(both.alpn, "http/1.1");
    const h2Only = await handshake(t.ports.public, { servername: "a.test", ca, alpn: ["h2"] })
      .then((served) => served.alpn, (error: Error) => `refused: ${error.message}`);
    assert.notEqual(h2Only, "h2");
    await assert.rejects(
      h2Request(t.ports.public, { servername: "a.test", authority: "a.test", ca }),
      "an HTTP/2 client gets no HTTP/2 session",
    );
    const client = await TlsClient.open(t.ports.public, { servername: "a.test", ca });
    try {
      const response = await client.request({ headers: [["Host", "a.test"]] });
      assert.equal(response.body, "tenant a.test", "HTTP/1.1 still works");
    } finally {
      await client.close();
    }
  });
});

tlsTest("tls sni/host: HTTP/1.1 with Host naming another tenant than the SNI is 421", async () => {
  await withH2Edge({}, async (t, ca) => {
    const client = await TlsClient.open(t.ports.public, { servername: "a.test", ca });
    try {
      const other = await client.request({ headers: [["Host", "b.test"]] });
      assert.equal(other.status, 421);
      assert.equal(envelope(other).code, "misdirected_request");
      assert.doesNotMatch(other.body, /tenant b\.test/);
      const unknown = await client.request({ headers: [["Host", "nobody.test"]] });
      assert.equal(unknown.status, 421);
      const same = await client.request({ headers: [["Host", "A.test:443"]] });
      assert.equal(same.status, 200, "the SNI's own tenant, case and port aside");
      assert.equal(same.body, "tenant a.test");
    } finally {
      await client.close();
    }
    const ledger = await balancedLedger(t);
    assert.equal(ledger.lanes.public.admitted, 3);
  });
});

tlsTest(
  "tls sni/host: HTTP/2 with :authority naming another tenant than the SNI is 421",
  async () => {
    await withH2Edge({}, async (t, ca) => {
      const other = await h2Request(t.ports.public, {
        servername: "a.test",
        authority: "b.test",
        ca,
      });
      assert.equal(other.alpn, "h2");
      assert.equal(other.status, 421);
      const error = JSON.parse(other.body).error;
      assert.equal(error.code, "misdirected_request");
      assert.doesNotMatch(other.body, /tenant b\.test/);
      const reverse = await h2Request(t.ports.public, {
        servername: "b.test",
        authority: "a.test",
        ca,
        insecure: true,
      });
      assert.equal(reverse.status, 421);
      assert.doesNotMatch(reverse.body, /tenant a\.test/);
    });
  },
);

tlsTest(
  "tls sni/host: a client without SNI is served by Host alone (nothing to disagree with)",
  async () => {
    await withH2Edge({}, async (t, ca) => {
      const client = await TlsClient.open(t.ports.public, { ca, insecure: true });
      try {
        assert.equal(client.served.subject, "a.test", "the default certificate");
        const response = await client.request({ headers: [["Host", "b.test"]] });
        assert.equal(response.status, 200);
        assert.equal(response.body, "tenant b.test");
      } finally {
        await client.close();
      }
    });
  },
);
