/**
 * Revocation at the hub: `hub revoke` (the CRL) ends a revoked node's held poll with
 * `node_revoked` as soon as the hub sees the file change, refuses its next poll and its renewal,
 * and leaves every other node alone; a CRL the intermediate did not sign is refused and the last
 * good one kept; a token node whose token file is removed gets the same answer — and only a
 * holder of that token can get it.
 */
import assert from "node:assert/strict";
import { boundedTest } from "./fixtures/bounded_test.ts";
import { answerOf, startFleetHub } from "./fixtures/fleet.ts";
import { startTestHub } from "./fixtures/hub_in_process.ts";
import { waitFor } from "./fixtures/in_process.ts";
import type { IncomingMessage } from "node:http";
import { tokenAuth } from "../src/hub/auth.ts";
import { certificateSerial, initCa, loadIssuer } from "../src/trust/ca.ts";
import { revokeNode, writeCrl } from "../src/trust/crl.ts";

boundedTest(
  "revocation: hub revoke ends the node's held poll, refuses it after, spares others",
  async () => {
    const fleet = await startFleetHub({ holdMs: 20_000 });
    const one = fleet.client(await fleet.enrol("edge-1"));
    const two = fleet.client(await fleet.enrol("edge-2"));
    let twoDone: Promise<unknown> = Promise.resolve();
    try {
      const hash = (await fleet.poll("edge-1", one)).body.hash;
      const heldOne = fleet.poll("edge-1", one, hash);
      const heldTwo = fleet.poll("edge-2", two, hash);
      let twoAnswered = false;
      twoDone = heldTwo.then(() => twoAnswered = true, () => {});
      await waitFor(() => Promise.resolve(fleet.test.hub.feed.waiting), (n) => n === 2, 5000);
      const revokedAt = Date.now();
      const { serials } = await revokeNode(fleet.files.dir, "edge-1", "keyCompromise");
      assert.equal(serials.length, 1);
      // The hub looks every 60 s here; the file watch makes it look at once.
      const answer = await heldOne;
      assert.equal(answer.status, 403);
      assert.equal(answer.body.error.code, "node_revoked");
      assert.ok(Date.now() - revokedAt < 10_000, "the watch saw the new CRL");
      assert.equal(twoAnswered, false, "edge-2's poll is still held");
      assert.equal((await fleet.poll("edge-1", one)).body.error.code, "node_revoked");
      assert.equal((await fleet.poll("edge-2", two)).status, 200);
      // The node's marker (written first) may end the poll a look before the CRL's look logs.
      await waitFor(
        () => fleet.test.lines.some((l) => /CRL .* revokes 1 more certificates/.test(l)),
        (said) => said,
        5000,
      );
    } finally {
      await fleet.dispose();
      await twoDone;
      one.close();
      two.close();
    }
  },
  30_000,
);

boundedTest(
  "revocation: a CRL not signed by the intermediate is refused, the last good one kept",
  async () => {
    const fleet = await startFleetHub();
    const one = fleet.client(await fleet.enrol("edge-1"));
    const other = await Deno.makeTempDir({ prefix: "portcullis-other-ca-" });
    try {
      await revokeNode(fleet.files.dir, "edge-1");
      await fleet.test.hub.lookForRevocations();
      assert.equal((await fleet.poll("edge-1", one)).body.error.code, "node_revoked");
      // An attacker with write access to the folder but not the key: an empty CRL of another CA.
      await initCa(`${other}/ca`, { names: ["127.0.0.1"] });
      const foreign = await loadIssuer(`${other}/ca`);
      await writeCrl(foreign, []);
      await Deno.copyFile(foreign.files.crl, fleet.files.crl);
      await fleet.test.hub.lookForRevocations();
      assert.equal((await fleet.poll("edge-1", one)).body.error.code, "node_revoked");
      assert.ok(fleet.test.lines.some((l) => /Cannot read the fleet CA's CRL \(keeping/.test(l)));
    } finally {
      one.close();
      await fleet.dispose();
      await Deno.remove(other, { recursive: true });
    }
  },
  30_000,
);

boundedTest(
  "revocation: one certificate the CRL lists is refused though its node is not revoked",
  async () => {
    const fleet = await startFleetHub({ renewBeforeDays: 400, renewIntervalSeconds: 0 });
    const first = await fleet.enrol("edge-1");
    const renewed = await fleet.renew("edge-1", first);
    const old = fleet.client(first);
    const current = fleet.client(renewed.credentials);
    try {
      // The superseded certificate alone is withdrawn (no marker: the node stays).
      const issuer = await loadIssuer(fleet.files.dir);
      const serial = certificateSerial(first.chainPem);
      await writeCrl(issuer, [{ serial, at: new Date(), reason: "superseded" }]);
      await fleet.test.hub.lookForRevocations();
      assert.equal((await fleet.poll("edge-1", old)).body.error?.code, "node_revoked");
      assert.equal((await fleet.poll("edge-1", current)).status, 200);
    } finally {
      old.close();
      current.close();
      await fleet.dispose();
    }
  },
  30_000,
);

boundedTest(
  "revocation: a removed token ends the node's held poll; only its holder hears why",
  async () => {
    const hub = await startTestHub({
      edit(config) {
        config.revocation = { reload_ms: 200 };
        config.stream = { hold_ms: 20_000 };
      },
    });
    const url = (query: string) => new URL(`/v1/config/stream?${query}`, hub.url);
    const poll = (node: string, token: string, query = "have=&wait=0") =>
      answerOf(fetch(url(`node_id=${node}&${query}`), {
        headers: { authorization: `Bearer ${token}` },
      }));
    let otherDone: Promise<unknown> = Promise.resolve();
    try {
      const token = await hub.token("edge-1");
      const keep = await hub.token("edge-2");
      const hash = (await poll("edge-1", token)).body.hash;
      const held = poll("edge-1", token, `have=${hash}`);
      const heldOther = poll("edge-2", keep, `have=${hash}`);
      let otherAnswered = false;
      otherDone = heldOther.then(() => otherAnswered = true, () => {});
      await waitFor(() => Promise.resolve(hub.hub.feed.waiting), (n) => n === 2, 5000);
      // Several looks first: each look must look again (a first one alone once sufficed).
      const looks = async () =>
        (await (await fetch(`http://127.0.0.1:${hub.healthPort}/v1/config`)).json()).revocation
          .looks;
      await waitFor(looks, (n) => n >= 3, 5000);
      await Deno.remove(`${hub.dir}/tokens/edge-1.token`);
      const answer = await held;
      assert.equal(answer.status, 403);
      assert.equal(answer.body.error.code, "node_revoked");
      assert.equal(otherAnswered, false);
      // The old token hears "revoked"; a guess at edge-1, or at a node never known, gets the
      // unknown path's 404 (hub_outsider_test.ts).
      assert.equal((await poll("edge-1", token)).body.error.code, "node_revoked");
      assert.equal(
        (await poll("edge-1", crypto.randomUUID())).body.error.code,
        "route_not_allowed",
      );
      assert.equal((await poll("edge-9", token)).body.error.code, "route_not_allowed");
      assert.equal((await poll("edge-2", keep)).status, 200);
      // A new token for the node works again (re-provisioned).
      const fresh = await hub.token("edge-1");
      assert.equal((await poll("edge-1", fresh)).status, 200);
    } finally {
      await hub.dispose();
      await otherDone;
    }
  },
  30_000,
);

Deno.test("revocation: a token hub revoke moved aside is still revoked after a hub restart", async () => {
  const dir = await Deno.makeTempDir({ prefix: "portcullis-tokens-" });
  try {
    await Deno.mkdir(`${dir}/revoked`);
    await Deno.writeTextFile(`${dir}/revoked/edge-1.token`, "old-token\n", { mode: 0o600 });
    await Deno.writeTextFile(`${dir}/edge-2.token`, "live-token\n", { mode: 0o600 });
    // A fresh book: what a restarted hub makes.
    const authenticate = tokenAuth(dir);
    const as = (token: string) =>
      ({ headers: { authorization: `Bearer ${token}` } }) as unknown as IncomingMessage;
    assert.deepEqual(await authenticate(as("old-token"), "edge-1"), {
      ok: false,
      kind: "node_revoked",
    });
    assert.deepEqual(await authenticate(as("a-guess"), "edge-1"), {
      ok: false,
      kind: "unauthenticated",
    });
    assert.equal((await authenticate(as("live-token"), "edge-2")).ok, true);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
