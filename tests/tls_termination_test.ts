/**
 * TLS termination on the public lane, as a client sees it: the certificate each SNI name gets on
 * one port (exact, wildcard, default, none), and the minimum protocol version. Every certificate is
 * issued at test time by a throwaway CA, and every client verifies the chain against that CA.
 *
 * @module
 */
import assert from "node:assert/strict";
import { withTlsEdge } from "./fixtures/tls_edge.ts";
import { handshake, type IssuedCertificate, type TestPki, tlsTest } from "./fixtures/certs.ts";
import { type ConfigObject, type TestEdge, waitFor } from "./fixtures/in_process.ts";

interface Certs {
  readonly a: IssuedCertificate;
  readonly b: IssuedCertificate;
  readonly wild: IssuedCertificate;
}

/**
 * Boots an edge whose public lane terminates TLS with certificates for a.test (the default unless
 * `noDefault`), b.test and *.wild.test, then runs `body` with the CA.
 */
function withThreeCerts(
  options: { noDefault?: boolean; tls?: ConfigObject },
  body: (t: TestEdge, pki: TestPki, certs: Certs) => Promise<void>,
): Promise<void> {
  return withTlsEdge({
    names: ["a.test", "b.test", "*.wild.test"],
    tenants: ["a.test", "b.test", "x.wild.test"],
    ...options,
  }, (t, pki, [a, b, wild]) => body(t, pki, { a, b, wild }));
}

tlsTest(
  "tls: two tenants on one port each get their own certificate, verified by the CA",
  async () => {
    await withThreeCerts({}, async (t, pki, certs) => {
      const ca = [pki.ca.certPem];
      const a = await handshake(t.ports.public, { servername: "a.test", ca });
      assert.equal(a.subject, "a.test");
      assert.equal(a.issuer, "Portcullis Test CA");
      assert.match(a.altNames, /DNS:a\.test/);
      assert.equal(a.validTo.getTime(), Math.floor(certs.a.notAfter.getTime() / 1000) * 1000);
      const b = await handshake(t.ports.public, { servername: "b.test", ca });
      assert.equal(b.subject, "b.test");
      assert.match(b.altNames, /DNS:b\.test/);
      const upper = await handshake(t.ports.public, { servername: "B.TEST", ca });
      assert.equal(upper.subject, "b.test", "SNI names match case-insensitively");
    });
  },
);

tlsTest("tls: a wildcard certificate serves a name one label under it, not deeper", async () => {
  await withThreeCerts({ noDefault: true }, async (t, pki) => {
    const ca = [pki.ca.certPem];
    const served = await handshake(t.ports.public, { servername: "x.wild.test", ca });
    assert.equal(served.subject, "*.wild.test");
    assert.match(served.altNames, /DNS:\*\.wild\.test/);
    await assert.rejects(
      handshake(t.ports.public, { servername: "y.x.wild.test", ca, insecure: true }),
      "two labels deep is no match, and there is no default",
    );
    await assert.rejects(
      handshake(t.ports.public, { servername: "wild.test", ca, insecure: true }),
      "the wildcard does not cover its own base name",
    );
  });
});

tlsTest(
  "tls: an unknown SNI name and a client without SNI get the default certificate",
  async () => {
    await withThreeCerts({}, async (t, pki) => {
      const unknown = await handshake(t.ports.public, {
        servername: "nobody.test",
        ca: [pki.ca.certPem],
        insecure: true,
      });
      assert.equal(unknown.subject, "a.test", "the default certificate");
      const none = await handshake(t.ports.public, { ca: [pki.ca.certPem], insecure: true });
      assert.equal(none.subject, "a.test");
      // Verified against the CA with the default's own name, the same certificate passes.
      assert.equal(
        (await handshake(t.ports.public, { servername: "a.test", ca: [pki.ca.certPem] })).subject,
        "a.test",
      );
    });
  },
);

tlsTest(
  "tls: an unknown SNI name with no default certificate is refused at the handshake",
  async () => {
    await withThreeCerts({ noDefault: true }, async (t, pki) => {
      const ca = [pki.ca.certPem];
      await assert.rejects(
        handshake(t.ports.public, { servername: "nobody.test", ca, insecure: true }),
        (error: Error) => {
          assert.ok(error instanceof Error);
          return true;
        },
      );
      await assert.rejects(handshake(t.ports.public, { ca, insecure: true }), "no SNI, no default");
      const a = await handshake(t.ports.public, { servername: "a.test", ca });
      assert.equal(a.subject, "a.test", "named clients still get their certificate");
      const ledger = await waitFor(() => t.ledger(), (l) => l.lanes.public.connections === 0);
      assert.equal(ledger.lanes.public.admitted, 0, "a refused handshake never reaches a request");
      assert.equal(
        ledger.lanes.public.connections_accepted,
        3,
        "each was accounted, then released",
      );
    });
  },
);

tlsTest("tls: min_version TLSv1.3 refuses a TLS 1.2-only client and serves a 1.3 one", async () => {
  await withThreeCerts({ tls: { min_version: "TLSv1.3" } }, async (t, pki) => {
    const ca = [pki.ca.certPem];
    await assert.rejects(
      handshake(t.ports.public, { servername: "a.test", ca, maxVersion: "TLSv1.2" }),
    );
    const modern = await handshake(t.ports.public, { servername: "a.test", ca });
    assert.equal(modern.protocol, "TLSv1.3");
  });
});

tlsTest("tls: the default min_version TLSv1.2 still serves a TLS 1.2-only client", async () => {
  await withThreeCerts({}, async (t, pki) => {
    const old = await handshake(t.ports.public, {
      servername: "b.test",
      ca: [pki.ca.certPem],
      maxVersion: "TLSv1.2",
    });
    assert.equal(old.protocol, "TLSv1.2");
    assert.equal(old.subject, "b.test");
  });
});
