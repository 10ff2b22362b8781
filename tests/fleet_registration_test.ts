/**
 * Registration and renewal with the hub's fleet CA, as an attacker would try them: every way a
 * registration can be wrong is one and the same answer, a secret works once (also when two
 * registrations race), a certificate is only ever issued for the CN the secret's node asked for,
 * and renewal needs a valid, unrevoked certificate of the same node.
 */
import assert from "node:assert/strict";
import "reflect-metadata";
import * as x509 from "@peculiar/x509";
import { boundedTest } from "./fixtures/bounded_test.ts";
import { type FleetHub, startFleetHub } from "./fixtures/fleet.ts";
import { makeNodeKeyAndCsr } from "../src/trust/csr.ts";
import { revokeNode } from "../src/trust/crl.ts";
import { renewIfDue } from "../src/live/enrol.ts";
import type { HubClientConfig } from "../src/config/runtime_source.ts";

/** A CSR for `cn` with a subjectAltName extension request (the CA must refuse any names). */
async function csrWithNames(cn: string): Promise<string> {
  const alg = { name: "ECDSA", namedCurve: "P-256", hash: "SHA-256" };
  const keys = await crypto.subtle.generateKey(alg, true, ["sign", "verify"]);
  const csr = await x509.Pkcs10CertificateRequestGenerator.create({
    name: `CN=${cn}`,
    keys,
    signingAlgorithm: alg,
    extensions: [new x509.SubjectAlternativeNameExtension([{ type: "dns", value: "evil.test" }])],
  });
  return csr.toString("pem");
}

/** The refusal as a client sees it, without the request id. */
function seen(answer: { status: number; body: { error?: { code: string; message: string } } }) {
  return {
    status: answer.status,
    code: answer.body.error?.code,
    message: answer.body.error?.message,
  };
}

async function withFleet(test: (fleet: FleetHub) => Promise<void>, options = {}): Promise<void> {
  const fleet = await startFleetHub(options);
  try {
    await test(fleet);
  } finally {
    await fleet.dispose();
  }
}

boundedTest(
  "registration: a good CSR and secret get a chain for the node, usable at once",
  () =>
    withFleet(async (fleet) => {
      const credentials = await fleet.enrol("edge-1");
      const leaf = new x509.X509Certificate(credentials.chainPem);
      assert.equal(leaf.subject, "CN=edge-1");
      const client = fleet.client(credentials);
      try {
        const answer = await fleet.poll("edge-1", client);
        assert.equal(answer.status, 200);
        assert.equal(answer.body.type, "snapshot");
        // The same certificate may not speak for another node.
        assert.equal(seen(await fleet.poll("edge-2", client)).code, "wrong_node");
      } finally {
        client.close();
      }
      // Without a certificate the stream is refused (registration is the only way in), as an
      // unknown path is (hub_outsider_test.ts).
      const bare = fleet.client();
      try {
        assert.equal(seen(await fleet.poll("edge-1", bare)).code, "route_not_allowed");
      } finally {
        bare.close();
      }
      assert.ok(fleet.test.lines.some((l) => /registered edge edge-1 \(certificate/.test(l)));
    }),
  20_000,
);

boundedTest(
  "registration: every wrong request gets the same answer, and a secret works once",
  () =>
    withFleet(async (fleet) => {
      const refusals: { why: string; answer: ReturnType<typeof seen> }[] = [];
      const attempt = async (why: string, body: Record<string, unknown>) => {
        refusals.push({ why, answer: seen(await fleet.register(body)) });
      };
      const good = await makeNodeKeyAndCsr("edge-1");
      const other = await makeNodeKeyAndCsr("edge-2");
      await attempt("wrong secret", {
        node_id: "edge-1",
        node_type: "edge",
        csr: good.csrPem,
        secret: "A".repeat(43),
      });
      await attempt("unknown node", {
        node_id: "edge-9",
        node_type: "edge",
        csr: (await makeNodeKeyAndCsr("edge-9")).csrPem,
        secret: await fleet.secret("edge-8"),
      });
      await attempt("malformed node id", {
        node_id: "../edge",
        node_type: "edge",
        csr: good.csrPem,
        secret: "x",
      });
      await attempt("CN of another node", {
        node_id: "edge-1",
        node_type: "edge",
        csr: other.csrPem,
        secret: await fleet.secret("edge-1"),
      });
      await attempt("extra names", {
        node_id: "edge-3",
        node_type: "edge",
        csr: await csrWithNames("edge-3"),
        secret: await fleet.secret("edge-3"),
      });
      await attempt("wrong node type", {
        node_id: "edge-4",
        node_type: "door",
        csr: (await makeNodeKeyAndCsr("edge-4")).csrPem,
        secret: await fleet.secret("edge-4"),
      });
      await attempt("not a CSR", {
        node_id: "edge-5",
        node_type: "edge",
        csr: "-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n",
        secret: await fleet.secret("edge-5"),
      });
      const secret = await fleet.secret("edge-6");
      const six = await makeNodeKeyAndCsr("edge-6");
      const body = { node_id: "edge-6", node_type: "edge", csr: six.csrPem, secret };
      assert.equal((await fleet.register(body)).status, 200);
      // Asked again with the same key it is the same registration (a retry); another key is not.
      const sixAgain = await makeNodeKeyAndCsr("edge-6");
      await attempt("reused secret", { ...body, csr: sixAgain.csrPem });
      const expected = {
        status: 403,
        code: "registration_refused",
        message: "The registration was refused",
      };
      for (const { why, answer } of refusals) assert.deepEqual(answer, expected, why);
      // The hub's log (not the answer) says which it was.
      const log = fleet.test.lines.join("\n");
      assert.match(log, /"edge-1" refused: csr_subject/);
      assert.match(log, /"edge-3" refused: csr_names/);
      assert.match(log, /"edge-4" refused: the secret was made for a edge/);
      // A secret spent by a refused request does not come back.
      const retry = await makeNodeKeyAndCsr("edge-1");
      assert.deepEqual(
        seen(await fleet.register({ ...body, node_id: "edge-1", csr: retry.csrPem })),
        expected,
      );
    }),
  20_000,
);

boundedTest(
  "registration: two registrations racing with one secret get one certificate",
  () =>
    withFleet(async (fleet) => {
      const secret = await fleet.secret("edge-1");
      const attempts = await Promise.all(
        [0, 1, 2, 3].map(async () => {
          const { csrPem } = await makeNodeKeyAndCsr("edge-1");
          return await fleet.register({
            node_id: "edge-1",
            node_type: "edge",
            csr: csrPem,
            secret,
          });
        }),
      );
      assert.deepEqual(attempts.map((a) => a.status).sort(), [200, 403, 403, 403]);
    }),
  20_000,
);

boundedTest(
  "registration: bodies that are not one small JSON object are refused as such",
  () =>
    withFleet(async (fleet) => {
      const client = fleet.client();
      try {
        for (const body of ["[]", "not json", JSON.stringify({ pad: "x".repeat(40_000) })]) {
          const response = await fetch(new URL("/v1/nodes/register", fleet.test.url), {
            method: "POST",
            body,
            client,
          });
          const answer = await response.json();
          assert.equal(response.status, 400, body.slice(0, 20));
          assert.equal(answer.error.code, "payload_not_json");
        }
        // Any other method, from a caller without a certificate, is an unknown path's 404.
        const get = await fetch(new URL("/v1/nodes/register", fleet.test.url), { client });
        assert.equal(get.status, 404);
        await get.body?.cancel();
      } finally {
        client.close();
      }
    }),
  20_000,
);

/** The edge's hub settings for files in `dir` holding `credentials`. */
async function edgeFiles(
  fleet: FleetHub,
  dir: string,
  credentials: { keyPem: string; chainPem: string },
): Promise<HubClientConfig> {
  await Deno.writeTextFile(`${dir}/ca.pem`, fleet.rootPem);
  await Deno.writeTextFile(`${dir}/node.crt`, credentials.chainPem, { mode: 0o600 });
  await Deno.writeTextFile(`${dir}/node.key`, credentials.keyPem, { mode: 0o600 });
  return {
    url: fleet.test.url,
    address: new URL(fleet.test.url).host,
    tls: { caFile: `${dir}/ca.pem`, certFile: `${dir}/node.crt`, keyFile: `${dir}/node.key` },
    renewBeforeDays: 30,
    graceSeconds: 30,
    pollTimeoutMs: 10_000,
    backoffInitialMs: 100,
    backoffMaxMs: 1000,
  };
}

boundedTest(
  "renewal: a certificate inside its renewal window is replaced; outside it is kept",
  () =>
    withFleet(async (fleet) => {
      const dir = await Deno.makeTempDir({ prefix: "portcullis-node-" });
      try {
        const hub = await edgeFiles(fleet, dir, await fleet.enrol("edge-1"));
        const before = new x509.X509Certificate(await Deno.readTextFile(hub.tls!.certFile));
        const log: string[] = [];
        const far = { nodeId: "edge-1", hub, log: log.push.bind(log) };
        assert.equal(await renewIfDue(far), false, "365 days left is not due 30 days before");
        const near = { ...far, hub: { ...hub, renewBeforeDays: 400 } };
        assert.equal(await renewIfDue(near), true, "365 days left is due 400 days before");
        const after = new x509.X509Certificate(await Deno.readTextFile(hub.tls!.certFile));
        assert.notEqual(after.serialNumber, before.serialNumber);
        assert.equal(after.subject, "CN=edge-1");
        assert.equal((await Deno.stat(hub.tls!.keyFile)).mode! & 0o777, 0o600);
        assert.equal((await Deno.stat(hub.tls!.certFile)).mode! & 0o777, 0o600);
        // The new pair works; the hub logged the renewal.
        const client = fleet.client({
          keyPem: await Deno.readTextFile(hub.tls!.keyFile),
          chainPem: await Deno.readTextFile(hub.tls!.certFile),
        });
        try {
          assert.equal((await fleet.poll("edge-1", client)).status, 200);
        } finally {
          client.close();
        }
        assert.ok(fleet.test.lines.some((l) => /renewed edge-1/.test(l)));
        // Once revoked, the node cannot renew its way back.
        await revokeNode(fleet.files.dir, "edge-1", "keyCompromise");
        await fleet.test.hub.lookForRevocations();
        await assert.rejects(renewIfDue(near), /node_revoked/);
      } finally {
        await Deno.remove(dir, { recursive: true });
      }
    }, { renewBeforeDays: 400, renewIntervalSeconds: 0 }),
  20_000,
);
