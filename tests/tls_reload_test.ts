/**
 * Certificate reloads: a file replaced with garbage (or a key that does not match, or an expired
 * certificate) is reported by name and the previous certificate stays in service; a valid
 * replacement is served to new handshakes; `POST /v1/tls/reload` answers `{reloaded, problems,
 * tls}`. Observed by handshakes (fingerprints) and by the local_health lane.
 *
 * @module
 */
import assert from "node:assert/strict";
import { site, withTlsEdge } from "./fixtures/tls_edge.ts";
import {
  certEntry,
  fingerprintOf,
  handshake,
  type IssuedCertificate,
  TestPki,
  tlsTest,
  writeCertificate,
} from "./fixtures/certs.ts";
import { json, request } from "./fixtures/http_client.ts";
import { type TestEdge, waitFor, withEdge } from "./fixtures/in_process.ts";
import { ADMIN_AUTH } from "./fixtures/gateway.ts";

interface ReloadAnswer {
  reloaded: boolean;
  problems: string[];
  tls: {
    bootstrap: boolean;
    certificates: { names: string[]; file: string | null; default: boolean; not_after: string }[];
    last_reload: string | null;
    last_problems: string[];
  };
}

async function reload(t: TestEdge): Promise<ReloadAnswer> {
  const response = await request(t.ports.local_health, {
    method: "POST",
    path: "/v1/tls/reload",
    headers: [ADMIN_AUTH],
  });
  assert.equal(response.status, 200);
  return json<ReloadAnswer>(response);
}

/** An edge with a.test (default) and b.test, watch off: reloads happen when the test asks. */
function withCerts(
  body: (t: TestEdge, pki: TestPki, a: IssuedCertificate, b: IssuedCertificate) => Promise<void>,
  watch = false,
): Promise<void> {
  return withTlsEdge(
    { names: ["a.test", "b.test"], tls: { watch } },
    (t, pki, [a, b]) => body(t, pki, a, b),
  );
}

const servedFingerprint = async (t: TestEdge, pki: TestPki, servername: string) =>
  (await handshake(t.ports.public, { servername, ca: [pki.ca.certPem] })).fingerprint;

tlsTest(
  "tls reload: POST /v1/tls/reload with nothing changed answers {reloaded, problems, tls}",
  async () => {
    await withCerts(async (t, _pki, a, b) => {
      const answer = await reload(t);
      assert.deepEqual(Object.keys(answer).sort(), ["problems", "reloaded", "tls"]);
      assert.equal(answer.reloaded, true);
      assert.deepEqual(answer.problems, []);
      assert.equal(answer.tls.bootstrap, false);
      assert.deepEqual(
        answer.tls.certificates.map((c) => [c.names, c.file, c.default]),
        [[["a.test"], a.certFile, true], [["b.test"], b.certFile, false]],
      );
      assert.equal(
        answer.tls.certificates[0].not_after,
        a.notAfter.toISOString().replace(/\.\d+Z$/, ".000Z"),
      );
      assert.ok(answer.tls.last_reload !== null);
      assert.deepEqual(answer.tls.last_problems, []);
    });
  },
);

tlsTest(
  "tls reload: a certificate replaced with garbage is reported; the old one stays in service",
  async () => {
    await withCerts(async (t, pki, a, b) => {
      const before = await servedFingerprint(t, pki, "b.test");
      assert.equal(before, fingerprintOf(b.certPem));
      await Deno.writeTextFile(b.certFile, "-----BEGIN CERTIFICATE-----\ngarbage\n");
      const answer = await reload(t);
      assert.equal(answer.reloaded, false);
      assert.equal(answer.problems.length, 1);
      assert.ok(answer.problems[0].includes(b.certFile), `names the file: ${answer.problems[0]}`);
      assert.match(answer.problems[0], /previous certificate stays in service/);
      assert.deepEqual(answer.tls.last_problems, answer.problems);
      assert.equal(await servedFingerprint(t, pki, "b.test"), before, "new handshakes: old cert");
      assert.equal(await servedFingerprint(t, pki, "a.test"), fingerprintOf(a.certPem));
      const client = await handshake(t.ports.public, {
        servername: "b.test",
        ca: [pki.ca.certPem],
      });
      assert.equal(client.subject, "b.test");
    });
  },
);

tlsTest(
  "tls reload: a valid replacement is served to new handshakes after the reload",
  async () => {
    await withCerts(async (t, pki, _a, b) => {
      const old = fingerprintOf(b.certPem);
      const renewed = await pki.issue("b.test", { file: "renewed-b", unwritten: true });
      await writeCertificate(renewed, b);
      assert.equal(await servedFingerprint(t, pki, "b.test"), old, "not before the reload");
      const answer = await reload(t);
      assert.equal(answer.reloaded, true);
      assert.deepEqual(answer.problems, []);
      assert.equal(await servedFingerprint(t, pki, "b.test"), fingerprintOf(renewed.certPem));
    });
  },
);

tlsTest(
  "tls reload: a certificate with someone else's key is refused, naming the key file",
  async () => {
    await withCerts(async (t, pki, a, b) => {
      const stranger = await pki.issue("b.test", { file: "stranger", unwritten: true });
      await Deno.writeTextFile(b.certFile, stranger.certPem); // the key file stays the old one
      const answer = await reload(t);
      assert.equal(answer.reloaded, false);
      assert.ok(answer.problems[0].includes(b.keyFile), answer.problems[0]);
      assert.match(answer.problems[0], /does not match/);
      assert.equal(await servedFingerprint(t, pki, "b.test"), fingerprintOf(b.certPem));
      assert.equal(await servedFingerprint(t, pki, "a.test"), fingerprintOf(a.certPem));
    });
  },
);

tlsTest(
  "tls reload: an expired certificate is refused at boot; the bootstrap one is served",
  async () => {
    const pki = await TestPki.create();
    try {
      const old = await pki.issue("old.test", { lifetimeMs: -60_000 });
      assert.ok(old.notAfter.getTime() < Date.now(), "made already expired");
      await withEdge({
        lanes: ["public", "local_health"],
        tenants: [site("old.test")],
        edit(config) {
          config.lanes.public.tls = { name: "edge.test", certificates: [certEntry(old, true)] };
        },
      }, async (t) => {
        const served = await handshake(t.ports.public, { servername: "old.test", insecure: true });
        assert.equal(served.subject, "edge.test", "the bootstrap certificate, not the expired one");
        const answer = await reload(t);
        assert.equal(answer.tls.bootstrap, true);
        assert.ok(answer.problems[0].includes(old.certFile), answer.problems[0]);
        assert.match(answer.problems[0], /expired/);
      });
    } finally {
      await pki.dispose();
    }
  },
);

tlsTest(
  "tls reload: the folder watch reloads a replaced file; garbage keeps the old certificate",
  async () => {
    await withCerts(async (t, pki, _a, b) => {
      const renewed = await pki.issue("b.test", { file: "renewed-b", unwritten: true });
      await writeCertificate(renewed, b);
      await waitFor(
        () => servedFingerprint(t, pki, "b.test"),
        (f) => f === fingerprintOf(renewed.certPem),
      );
      await Deno.writeTextFile(b.certFile, "not a certificate\n");
      const health = await waitFor(
        async () =>
          json<{ tls: ReloadAnswer["tls"] }>(
            await request(t.ports.local_health, { path: "/v1/health" }),
          ).tls,
        (tls) => tls.last_problems.length > 0,
      );
      assert.ok(health.last_problems[0].includes(b.certFile), health.last_problems[0]);
      assert.equal(await servedFingerprint(t, pki, "b.test"), fingerprintOf(renewed.certPem));
    }, true);
  },
);
