/**
 * SNI passthrough end to end: a client's TLS connection to the passthrough listener is spliced,
 * through the SOCKS fixture (which resolves `shop.onion` itself), to a TLS upstream that holds its
 * own certificate. The client verifies the UPSTREAM's certificate — proof that the gateway never
 * terminated the connection — and gets the upstream's answer. Unknown names are closed; the public
 * lane's ledger holds the connection while it is open and releases it after.
 *
 * @module
 */
import assert from "node:assert/strict";
import {
  certEntry,
  fingerprintOf,
  handshake,
  TestPki,
  TlsClient,
  tlsTest,
} from "./fixtures/certs.ts";
import { freePorts } from "./fixtures/gateway.ts";
import { isBalanced, type TestEdge, waitFor, withEdge } from "./fixtures/in_process.ts";
import { SocksFixture } from "./fixtures/socks5.ts";
import { TlsUpstream } from "./fixtures/tls_upstream.ts";

interface Passthrough {
  readonly t: TestEdge;
  readonly port: number;
  readonly ca: string[];
  readonly upstream: TlsUpstream;
  readonly socks: SocksFixture;
  /** The certificate the gateway itself terminates with (a.test, the default). */
  readonly gatewayCert: string;
}

/**
 * Boots an edge with a terminating public listener (a.test), a passthrough listener, and the
 * passthrough tenant shop.test → `shop.onion:443`, reached through a SOCKS fixture that resolves
 * `shop.onion` to a TLS upstream serving its own shop.test certificate.
 */
async function withPassthrough(body: (p: Passthrough) => Promise<void>): Promise<void> {
  const pki = await TestPki.create();
  const upstream = await TlsUpstream.start(await pki.issue("shop.test", { file: "upstream" }));
  const socks = await SocksFixture.start({
    resolve: { "shop.onion": { hostname: "127.0.0.1", port: upstream.port } },
  });
  const [port] = freePorts(1);
  try {
    const a = await pki.issue("a.test");
    await withEdge({
      lanes: ["public", "local_health"],
      tenants: [
        { host: "a.test", routes: [{ match: { path: "/" }, respond: { body: "tenant a.test" } }] },
        { host: "shop.test", passthrough: { backends: ["shop.onion:443"] } },
      ],
      edit(config) {
        config.egress = { socks: [{ hostname: "127.0.0.1", port: socks.port }] };
        config.lanes.public.tls = { certificates: [certEntry(a, true)] };
        config.lanes.public.passthrough = {
          listen: [{ hostname: "127.0.0.1", port }],
          hello_timeout_ms: 1000,
        };
      },
    }, (t) => body({ t, port, ca: [pki.ca.certPem], upstream, socks, gatewayCert: a.certPem }));
  } finally {
    await socks.stop();
    await upstream.stop();
    await pki.dispose();
  }
}

tlsTest(
  "passthrough: the client verifies the upstream's own certificate and gets its answer",
  async () => {
    await withPassthrough(async ({ port, ca, upstream, socks, gatewayCert }) => {
      const client = await TlsClient.open(port, { servername: "shop.test", ca });
      try {
        assert.equal(client.served.subject, "shop.test");
        assert.equal(client.served.fingerprint, fingerprintOf(upstream.certificate.certPem));
        assert.notEqual(client.served.fingerprint, fingerprintOf(gatewayCert));
        const response = await client.request({ headers: [["Host", "shop.test"]], path: "/cart" });
        assert.equal(response.status, 200);
        assert.equal(response.body, TlsUpstream.body("shop.test"));
        assert.equal(response.headers["x-upstream"], "tls");
        assert.equal(response.headers["x-request-id"], undefined, "the gateway added nothing");
        assert.match(upstream.heads[0], /^GET \/cart HTTP\/1\.1\r\n/);
        assert.deepEqual(upstream.servernames, ["shop.test"], "the upstream saw the client's SNI");
        const again = await client.request({ headers: [["Host", "shop.test"]] });
        assert.equal(again.status, 200, "the pipe carries a kept-alive connection");
      } finally {
        await client.close();
      }
      assert.deepEqual(socks.connects, [{ host: "shop.onion", port: 443, atyp: "domain" }]);
    });
  },
);

tlsTest(
  "passthrough: the ledger holds the connection while it is open and releases it after",
  async () => {
    await withPassthrough(async ({ t, port, ca }) => {
      const client = await TlsClient.open(port, { servername: "shop.test", ca });
      try {
        const open = await waitFor(() => t.ledger(), (l) => l.lanes.public.in_use === 1);
        assert.equal(open.lanes.public.admitted, 1, "admitted at ClientHello time");
        assert.equal(open.lanes.public.connections, 1);
        assert.equal(open.outstanding, 1);
        await client.request({ headers: [["Host", "shop.test"]] });
        assert.equal((await t.ledger()).lanes.public.admitted, 1, "requests in the pipe are not");
      } finally {
        await client.close();
      }
      const after = await waitFor(
        () => t.ledger(),
        (l) => isBalanced(l) && l.lanes.public.connections === 0,
      );
      assert.equal(after.lanes.public.in_use, 0);
      assert.equal(after.lanes.public.admitted, 1);
      assert.equal(after.cancelled, 0, "a pipe that ended normally completes its reservation");
    });
  },
);

tlsTest(
  "passthrough: an unknown SNI name, or none, is closed without reaching the upstream",
  async () => {
    await withPassthrough(async ({ t, port, ca, upstream, socks }) => {
      for (const servername of ["a.test", "nobody.test", undefined]) {
        await assert.rejects(
          handshake(port, { servername, ca, insecure: true }),
          `${servername ?? "no SNI"} is closed`,
        );
      }
      assert.equal(socks.accepted, 0, "no backend connection was attempted");
      assert.deepEqual(upstream.servernames, []);
      const ledger = await waitFor(() => t.ledger(), (l) => l.lanes.public.connections === 0);
      assert.equal(ledger.lanes.public.admitted, 0, "refused before admission");
    });
  },
);

tlsTest(
  "passthrough: the terminating listener still serves its own tenants with its own certificate",
  async () => {
    await withPassthrough(async ({ t, ca, gatewayCert }) => {
      const served = await handshake(t.ports.public, { servername: "a.test", ca });
      assert.equal(served.fingerprint, fingerprintOf(gatewayCert));
      const shop = await TlsClient.open(t.ports.public, {
        servername: "shop.test",
        ca,
        insecure: true,
      });
      try {
        assert.equal(shop.served.subject, "a.test", "the default: shop.test is never terminated");
        const response = await shop.request({ headers: [["Host", "shop.test"]] });
        assert.equal(response.status, 421, "a passthrough tenant is not served by termination");
      } finally {
        await shop.close();
      }
    });
  },
);

tlsTest(
  "passthrough: a connection that sends no ClientHello is closed after hello_timeout_ms",
  async () => {
    await withPassthrough(async ({ t, port }) => {
      const conn = await Deno.connect({ hostname: "127.0.0.1", port });
      try {
        const started = Date.now();
        const read = await conn.read(new Uint8Array(16)).catch(() => null);
        assert.equal(read, null, "closed without a byte");
        const elapsed = Date.now() - started;
        assert.ok(elapsed >= 900 && elapsed < 3000, `after the hello timeout (${elapsed} ms)`);
      } finally {
        conn.close();
      }
      await waitFor(() => t.ledger(), (l) => l.lanes.public.connections === 0);
    });
  },
);
