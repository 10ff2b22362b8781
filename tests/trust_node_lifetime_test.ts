/**
 * Rule 10 of issue 33, for the fleet CA (src/trust/ca.ts, `signNodeCsr`): a node certificate never
 * outlives the intermediate that signed it. A leaf valid past its issuer's end is one no verifier
 * accepts after that end, so a node that believes its certificate (and plans its renewal by it)
 * would find itself locked out of its hub without warning. Through a real hub under its derived
 * flags whose intermediate ends in 3 days while `ca.lifetime_days` is 30: registration and renewal
 * each return a certificate that ends no later than the intermediate (and that the hub still
 * accepts). The other side in process: with an intermediate that outlives the lifetime, the leaf
 * lasts exactly `lifetime_days` — the intermediate's end is a cap, not the answer.
 *
 * @module
 */
import assert from "node:assert/strict";
import { X509Certificate } from "node:crypto";
import { boundedTest } from "./fixtures/bounded_test.ts";
import { FleetProcess } from "./fixtures/fleet_process.ts";
import { initCa, loadIssuer, signNodeCsr } from "../src/trust/ca.ts";
import { makeNodeKeyAndCsr } from "../src/trust/csr.ts";

const DAY_MS = 86_400_000;

/** The PEM blocks of a chain, parsed (leaf first). */
function chainOf(pem: string): X509Certificate[] {
  const blocks = pem.match(/-----BEGIN CERTIFICATE-----[^-]+-----END CERTIFICATE-----/g) ?? [];
  return blocks.map((block) => new X509Certificate(block));
}

function notAfter(cert: X509Certificate): number {
  return new Date(cert.validTo).getTime();
}

/** Asserts a chain's leaf ends no later than its intermediate (and the CA's), and is still useful. */
function withinIntermediate(what: string, chainPem: string, intermediate: X509Certificate): void {
  const [leaf, issuer] = chainOf(chainPem);
  assert.ok(leaf && issuer, `${what}: a leaf and its intermediate`);
  assert.equal(
    issuer.fingerprint256,
    intermediate.fingerprint256,
    `${what}: the CA's intermediate`,
  );
  assert.ok(leaf.checkIssued(issuer), `${what}: signed by it`);
  const end = notAfter(intermediate);
  assert.ok(
    notAfter(leaf) <= end,
    `${what}: the leaf ends ${leaf.validTo}, after its intermediate (${intermediate.validTo})`,
  );
  // Capped, not refused or cut to nothing: it ends with the intermediate, days from now.
  assert.ok(notAfter(leaf) > Date.now() + 2 * DAY_MS, `${what}: ends ${leaf.validTo}`);
}

boundedTest(
  "rule 10: a node certificate never outlives the intermediate that signed it (registration and renewal, real hub)",
  async () => {
    const fleet = await FleetProcess.start({
      intermediateDays: 3,
      ca: { lifetime_days: 30, renew_before_days: 30, renew_interval_seconds: 0 },
    });
    try {
      const intermediate = new X509Certificate(
        await Deno.readTextFile(fleet.files.intermediateCert),
      );
      assert.ok(notAfter(intermediate) < Date.now() + 4 * DAY_MS, intermediate.validTo);

      const registered = await fleet.enrol("edge-1");
      withinIntermediate("registration", registered.chainPem, intermediate);
      // The hub takes what it issued: the certificate authenticates the node.
      assert.equal((await fleet.get("config", "edge-1", registered)).status, 200);

      const renewal = await fleet.renew("edge-1", registered);
      assert.equal(renewal.status, 200, JSON.stringify(renewal.body));
      withinIntermediate("renewal", renewal.credentials!.chainPem, intermediate);
      assert.equal((await fleet.get("config", "edge-1", renewal.credentials!)).status, 200);
    } finally {
      await fleet.dispose();
    }
  },
  60_000,
);

Deno.test(
  "rule 10: with an intermediate that outlives lifetime_days, the node certificate lasts exactly lifetime_days",
  async () => {
    const dir = await Deno.makeTempDir({ prefix: "portcullis-ca-" });
    try {
      const now = new Date();
      await initCa(`${dir}/ca`, { names: ["127.0.0.1"], now, intermediateDays: 40 });
      const issuer = await loadIssuer(`${dir}/ca`);
      const { csrPem } = await makeNodeKeyAndCsr("edge-2");
      for (const lifetimeDays of [30, 39]) {
        const signed = await signNodeCsr(issuer, {
          csrPem,
          nodeId: "edge-2",
          nodeType: "edge",
          lifetimeDays,
          now,
        });
        assert.ok(signed.ok, JSON.stringify(signed));
        const [leaf] = chainOf(signed.chainPem);
        // X.509 times have whole seconds.
        const expected = Math.floor((now.getTime() + lifetimeDays * DAY_MS) / 1000) * 1000;
        assert.equal(notAfter(leaf), expected, `lifetime ${lifetimeDays} days`);
        assert.ok(notAfter(leaf) < notAfter(new X509Certificate(issuer.intermediatePem)));
      }
      // And one day past the intermediate's end asks for more than it has: capped to its end.
      const capped = await signNodeCsr(issuer, {
        csrPem,
        nodeId: "edge-2",
        nodeType: "edge",
        lifetimeDays: 41,
        now,
      });
      assert.ok(capped.ok);
      const [leaf] = chainOf(capped.chainPem);
      assert.equal(notAfter(leaf), notAfter(new X509Certificate(issuer.intermediatePem)));
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
);
