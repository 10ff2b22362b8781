/**
 * The bootstrap certificate and certificates dropped in place: `tls: {}` serves a self-signed
 * certificate for `tls.name` (or a random name under `.invalid`, never the node_id) valid at most
 * 24 h, and `/v1/health` says so; a
 * configured certificate whose files do not exist yet does not stop the boot, and once its files
 * are written it is served without a restart — after the folder watch fires, or after
 * `POST /v1/tls/reload` — while an open keep-alive connection keeps working.
 *
 * @module
 */
import assert from "node:assert/strict";
import { site } from "./fixtures/tls_edge.ts";
import {
  certEntry,
  fingerprintOf,
  handshake,
  type Served,
  TestPki,
  TlsClient,
  tlsTest,
  writeCertificate,
} from "./fixtures/certs.ts";
import { json, request } from "./fixtures/http_client.ts";
import { type ConfigObject, type TestEdge, waitFor, withEdge } from "./fixtures/in_process.ts";
import { ADMIN_AUTH } from "./fixtures/gateway.ts";
import { BootError } from "../src/boot/boot_error.ts";

const DAY_MS = 24 * 60 * 60 * 1000;

interface TlsHealth {
  bootstrap: boolean;
  certificates: { names: string[]; not_after: string; file: string | null; default: boolean }[];
  last_reload: string | null;
  last_problems: string[];
}

async function tlsHealth(t: TestEdge): Promise<TlsHealth> {
  const response = await request(t.ports.local_health, { path: "/v1/health" });
  assert.equal(response.status, 200);
  return json<{ tls: TlsHealth }>(response).tls;
}

function tlsEdge(tls: ConfigObject, body: (t: TestEdge) => Promise<void>): Promise<void> {
  return withEdge({
    lanes: ["public", "local_health"],
    tenants: [site("a.test")],
    edit(config) {
      config.lanes.public.tls = tls;
    },
  }, body);
}

tlsTest(
  "tls bootstrap: tls {} serves a self-signed certificate for tls.name, valid ≤ 24 h",
  async () => {
    await tlsEdge({ name: "edge.test" }, async (t) => {
      const before = Date.now();
      const served = await handshake(t.ports.public, { servername: "edge.test", insecure: true });
      assert.equal(served.subject, "edge.test");
      assert.equal(served.issuer, "edge.test", "self-signed");
      assert.match(served.altNames, /DNS:edge\.test/);
      assert.ok(served.validTo.getTime() > before, "valid now");
      assert.ok(served.validTo.getTime() <= before + DAY_MS + 1000, `≤ 24 h: ${served.validTo}`);
      assert.ok(served.validTo.getTime() - served.validFrom.getTime() <= DAY_MS + 120_000);
      const anyName = await handshake(t.ports.public, { servername: "a.test", insecure: true });
      assert.equal(anyName.subject, "edge.test", "every name gets the bootstrap certificate");
      await assert.rejects(
        handshake(t.ports.public, { servername: "edge.test" }),
        "no public CA trusts it: a verifying client refuses it",
      );
      const health = await tlsHealth(t);
      assert.equal(health.bootstrap, true);
      assert.deepEqual(health.certificates.map((c) => [c.names, c.file]), [[["edge.test"], null]]);
      assert.deepEqual(health.last_problems, []);
    });
  },
);

/** The bootstrap certificate a prober gets for `servername` (absent: no SNI), and its DER bytes. */
async function probe(port: number, servername?: string): Promise<{ served: Served; der: string }> {
  const client = await TlsClient.open(port, { servername, insecure: true });
  try {
    const der = client.socket.getPeerCertificate(true).raw.toString("latin1");
    return { served: client.served, der };
  } finally {
    await client.close();
  }
}

tlsTest(
  "tls bootstrap: without tls.name the bootstrap certificate names neither the node nor the product, and is new each boot",
  async () => {
    const names: string[] = [];
    for (let boot = 0; boot < 2; boot++) {
      await tlsEdge({}, async (t) => {
        const seen = [
          await probe(t.ports.public),
          await probe(t.ports.public, "a.test"),
          await probe(t.ports.public, "anything.example"),
        ];
        const name = seen[0].served.subject!;
        assert.match(name, /^[0-9a-f]{16}\.invalid$/, "a random label under .invalid (RFC 6761)");
        for (const { served, der } of seen) {
          assert.equal(served.subject, name, "every server name, and none, gets the same one");
          assert.equal(served.issuer, name);
          assert.equal(served.altNames, `DNS:${name}`);
          for (const token of [/proof-edge/i, /portcullis/i]) {
            assert.doesNotMatch(der, token, "the certificate's bytes name neither");
          }
        }
        assert.equal((await tlsHealth(t)).bootstrap, true);
        names.push(name);
      });
    }
    assert.notEqual(names[0], names[1], "each boot draws a new name: no constant to link edges by");
  },
);

tlsTest(
  "tls bootstrap: a bootstrap certificate that cannot be made refuses the boot, stopping the rest",
  async () => {
    // "1.2.3" passes as a host name, but the certificate would carry it as an IP address, which it
    // is not. The runtime folder watch and the egress's idle sweep start before the certificates:
    // the sanitizers of tlsTest fail this test if the refused boot leaves their watchFs or timers.
    const error = await tlsEdge({ name: "1.2.3" }, () => Promise.resolve()).then(
      () => undefined,
      (e) => e,
    );
    assert.ok(error instanceof BootError, `expected a BootError, got ${error}`);
    assert.deepEqual(error.reasons, [
      'Cannot load the TLS certificates (bootstrap name "1.2.3"): Invalid IPv6 address',
    ]);
  },
);

/**
 * Boots with a certificate entry for a.test whose files do not exist yet (so the bootstrap
 * certificate is served), opens a keep-alive connection, drops the files in place, runs `pickUp`,
 * and checks that the new certificate is served without a restart and the open connection lives.
 */
async function dropInPlace(
  tls: ConfigObject,
  pickUp: (t: TestEdge) => Promise<void>,
): Promise<void> {
  const pki = await TestPki.create();
  try {
    const a = await pki.issue("a.test", { unwritten: true });
    await tlsEdge({ name: "edge.test", certificates: [certEntry(a, true)], ...tls }, async (t) => {
      const health = await tlsHealth(t);
      assert.equal(health.bootstrap, true, "booted on the bootstrap certificate");
      assert.equal(health.last_problems.length, 1);
      assert.ok(health.last_problems[0].includes(a.certFile), health.last_problems[0]);
      assert.match(health.last_problems[0], /does not exist/);
      const kept = await TlsClient.open(t.ports.public, { servername: "a.test", insecure: true });
      try {
        assert.equal(kept.served.subject, "edge.test");
        assert.equal((await kept.request({ headers: [["Host", "a.test"]] })).status, 200);

        await writeCertificate(a);
        await pickUp(t);

        const served = await handshake(t.ports.public, {
          servername: "a.test",
          ca: [pki.ca.certPem],
        });
        assert.equal(served.subject, "a.test");
        assert.equal(served.fingerprint, fingerprintOf(a.certPem));
        const after = await tlsHealth(t);
        assert.equal(after.bootstrap, false);
        assert.deepEqual(after.certificates.map((c) => [c.names, c.file]), [[
          ["a.test"],
          a.certFile,
        ]]);
        assert.deepEqual(after.last_problems, []);

        const again = await kept.request({ headers: [["Host", "a.test"]] });
        assert.equal(again.status, 200, "the connection opened before the reload still serves");
        assert.equal(again.body, "tenant a.test");
        assert.equal(t.snapshot().lanes.public.connections_accepted, 2, "no reconnect happened");
      } finally {
        await kept.close();
      }
    });
  } finally {
    await pki.dispose();
  }
}

tlsTest(
  "tls bootstrap: a certificate dropped in place is picked up by the folder watch",
  async () => {
    await dropInPlace({}, async (t) => {
      await waitFor(() => tlsHealth(t), (h) => !h.bootstrap, 3000);
    });
  },
);

tlsTest(
  "tls bootstrap: with watch off, POST /v1/tls/reload picks up a dropped certificate",
  async () => {
    await dropInPlace({ watch: false }, async (t) => {
      await new Promise((resolve) => setTimeout(resolve, 400));
      assert.equal((await tlsHealth(t)).bootstrap, true, "nothing reloads by itself");
      const response = await request(t.ports.local_health, {
        method: "POST",
        path: "/v1/tls/reload",
        headers: [ADMIN_AUTH],
      });
      assert.equal(response.status, 200);
      const body = json<{ reloaded: boolean; problems: string[]; tls: TlsHealth }>(response);
      assert.deepEqual(Object.keys(body).sort(), ["problems", "reloaded", "tls"]);
      assert.equal(body.reloaded, true);
      assert.deepEqual(body.problems, []);
      assert.equal(body.tls.bootstrap, false);
      assert.deepEqual(body.tls.certificates[0].names, ["a.test"]);
    });
  },
);
