/**
 * A registration whose answer the node could not store can be asked again without a new secret
 * (issue 31: a door's first registration spent its one-time secret and then could not write its
 * key). The hub answers the same certificate to the same secret and the same key while
 * `ca.registration_retry_seconds` last; another key, a node revoked since, or a later ask is
 * refused — one certificate per secret, for the key that asked first. The node writes its key
 * before it asks, so a retry has it. A real hub process under its derived flags.
 */
import assert from "node:assert/strict";
import { boundedTest } from "./fixtures/bounded_test.ts";
import { FleetProcess } from "./fixtures/fleet_process.ts";
import { ensureNodeCertificate } from "../src/live/enrol.ts";
import { makeNodeKeyAndCsr } from "../src/trust/csr.ts";
import { certificateSerial } from "../src/trust/pem.ts";

const REFUSED = "registration_refused";

boundedTest(
  "registration retry: the same key gets the same certificate within the window; another key, a revoked node, a late ask do not",
  async () => {
    const fleet = await FleetProcess.start({ ca: { registration_retry_seconds: 3 } });
    try {
      assert.equal((await fleet.addNode("edge-1")).code, 0);
      const secret = await fleet.secretOf("edge-1");
      const { keyPem } = await makeNodeKeyAndCsr("edge-1");
      const first = await fleet.register("edge-1", "edge", { secret, keyPem });
      assert.equal(first.status, 200);
      const again = await fleet.register("edge-1", "edge", { secret, keyPem });
      assert.equal(again.status, 200, JSON.stringify(again.body));
      assert.equal(again.body.certificate, first.body.certificate, "the same certificate");
      assert.match(fleet.hub.stderr, /asked again with the same key/);
      const other = await fleet.register("edge-1", "edge", { secret });
      assert.equal(other.body.error?.code, REFUSED, "another key");
      const asDoor = await fleet.register("edge-1", "door", { secret, keyPem });
      assert.equal(asDoor.body.error?.code, REFUSED, "another type");
      // The retried certificate works like the first.
      assert.equal((await fleet.get("config", "edge-1", again.credentials!)).status, 200);

      // Revoked since: refused, even within the window.
      assert.equal((await fleet.addNode("edge-2")).code, 0);
      const secret2 = await fleet.secretOf("edge-2");
      const key2 = (await makeNodeKeyAndCsr("edge-2")).keyPem;
      assert.equal(
        (await fleet.register("edge-2", "edge", { secret: secret2, keyPem: key2 })).status,
        200,
      );
      assert.equal((await fleet.revoke("edge-2")).code, 0);
      const afterRevoke = await fleet.register("edge-2", "edge", { secret: secret2, keyPem: key2 });
      assert.equal(afterRevoke.body.error?.code, REFUSED, "revoked");

      // After the window: refused.
      await new Promise((resolve) => setTimeout(resolve, 3200));
      const late = await fleet.register("edge-1", "edge", { secret, keyPem });
      assert.equal(late.body.error?.code, REFUSED, "after the window");
      await assert.rejects(
        Deno.stat(`${fleet.files.secretsDir}/edge-1.spent`),
        Deno.errors.NotFound,
      );
    } finally {
      await fleet.dispose();
    }
  },
  60_000,
);

boundedTest(
  "registration retry: a node that could not write its certificate registers on the next try with the same secret",
  async () => {
    const fleet = await FleetProcess.start();
    const dir = await Deno.makeTempDir({ prefix: "portcullis-node-" });
    try {
      assert.equal((await fleet.addNode("edge-1")).code, 0);
      await Deno.mkdir(`${dir}/keys`);
      await Deno.mkdir(`${dir}/certs`);
      await Deno.writeTextFile(`${dir}/ca.pem`, fleet.rootPem);
      await Deno.copyFile(`${fleet.files.secretsDir}/edge-1.secret`, `${dir}/node.secret`);
      await Deno.chmod(`${dir}/node.secret`, 0o600);
      const hub = {
        url: fleet.hub.url,
        caFile: `${dir}/ca.pem`,
        certFile: `${dir}/certs/node.crt`,
        keyFile: `${dir}/keys/node.key`,
        secretFile: `${dir}/node.secret`,
      };
      const options = { nodeId: "edge-1", nodeType: "edge" as const, hub, log: () => {} };
      // The certificate cannot be stored (a folder stands where it is written first): the answer
      // is lost after the secret was spent.
      await Deno.mkdir(`${hub.certFile}.new/in-the-way`, { recursive: true });
      await assert.rejects(ensureNodeCertificate(options));
      await Deno.remove(`${hub.certFile}.new`, { recursive: true });
      assert.equal(await ensureNodeCertificate(options), "registered");
      const issued = [...Deno.readDirSync(`${fleet.files.issuedDir}/edge-1`)];
      assert.equal(issued.length, 1, "one certificate for one secret");
      const serial = certificateSerial(await Deno.readTextFile(hub.certFile));
      assert.equal(issued[0].name, `${serial}.json`);
      await assert.rejects(Deno.stat(hub.secretFile), Deno.errors.NotFound);
      await assert.rejects(Deno.stat(`${hub.keyFile}.new`), Deno.errors.NotFound);
      assert.equal((await Deno.stat(hub.keyFile)).mode! & 0o777, 0o600);
    } finally {
      await fleet.dispose();
      await Deno.remove(dir, { recursive: true });
    }
  },
  60_000,
);
