/**
 * Renewal is limited per node (issue 31: nothing limited renewals, so a seized edge renewed from
 * four connections as fast as the hub answered): the hub answers a renewal only while the
 * certificate presented has at most `ca.renew_before_days` left, at most once per
 * `ca.renew_interval_seconds` (registration included), and never for a revoked node. Too early
 * is 429 `renewal_too_early` with a Retry-After that says when; the node believes it and does not
 * ask again before. Real hub processes under their derived flags.
 */
import assert from "node:assert/strict";
import { boundedTest } from "./fixtures/bounded_test.ts";
import { FleetProcess, type NodeCredentials } from "./fixtures/fleet_process.ts";
import { CertificateRenewal, RenewalDeferred, renewIfDue } from "../src/live/enrol.ts";
import type { HubClientConfig } from "../src/config/runtime_source.ts";

const DAY_S = 86_400;

/** The node's hub settings for files in `dir` holding `credentials`. */
async function nodeFiles(
  fleet: FleetProcess,
  dir: string,
  credentials: NodeCredentials,
  renewBeforeDays: number,
): Promise<HubClientConfig> {
  await Deno.writeTextFile(`${dir}/ca.pem`, fleet.rootPem);
  await Deno.writeTextFile(`${dir}/node.crt`, credentials.chainPem, { mode: 0o600 });
  await Deno.writeTextFile(`${dir}/node.key`, credentials.keyPem, { mode: 0o600 });
  return {
    url: fleet.hub.url,
    address: new URL(fleet.hub.url).host,
    tls: { caFile: `${dir}/ca.pem`, certFile: `${dir}/node.crt`, keyFile: `${dir}/node.key` },
    renewBeforeDays,
    graceSeconds: 30,
    pollTimeoutMs: 10_000,
    backoffInitialMs: 100,
    backoffMaxMs: 1000,
  };
}

boundedTest(
  "renewal limits: a certificate with more than ca.renew_before_days left is 429 with Retry-After; the node waits",
  async () => {
    const fleet = await FleetProcess.start({
      ca: { lifetime_days: 30, renew_before_days: 10, renew_interval_seconds: 0 },
    });
    const dir = await Deno.makeTempDir({ prefix: "portcullis-node-" });
    try {
      const credentials = await fleet.enrol("edge-1");
      const early = await fleet.renew("edge-1", credentials);
      assert.equal(early.status, 429);
      assert.equal(early.body.error.code, "renewal_too_early");
      // 30 days left, due at 10: twenty days to wait (less the seconds since it was issued).
      const wait = Number(early.retryAfter);
      assert.ok(wait > 20 * DAY_S - 120 && wait <= 20 * DAY_S, `Retry-After ${early.retryAfter}`);
      assert.match(fleet.hub.stderr, /renewal for edge-1 too early: 29 days left/);

      // The node (renew_before_days 40: due by its own count) hears it and waits.
      const hub = await nodeFiles(fleet, dir, credentials, 40);
      const log: string[] = [];
      const deferred = await renewIfDue({ nodeId: "edge-1", hub, log: log.push.bind(log) }).then(
        () => undefined,
        (error) => error,
      );
      assert.ok(deferred instanceof RenewalDeferred, String(deferred));
      assert.ok(deferred.retryAfterMs > 19 * DAY_S * 1000);
      const asked = () => fleet.hub.stderr.match(/renewal for edge-1 too early/g)?.length ?? 0;
      const renewal = new CertificateRenewal({ nodeId: "edge-1", hub, log: log.push.bind(log) });
      assert.equal(await renewal.check(), false);
      const after = asked();
      assert.equal(await renewal.check(), false);
      assert.equal(await renewal.check(), false);
      assert.equal(asked(), after, "no second ask before the Retry-After");
      assert.equal(await Deno.readTextFile(hub.tls!.certFile), credentials.chainPem, "kept");
      assert.match(String(renewal.status()?.outcome), /too early/);
    } finally {
      await fleet.dispose();
      await Deno.remove(dir, { recursive: true });
    }
  },
  60_000,
);

boundedTest(
  "renewal limits: at most once per ca.renew_interval_seconds, registration included, and never once revoked",
  async () => {
    const fleet = await FleetProcess.start({
      reloadMs: 500,
      ca: { lifetime_days: 30, renew_before_days: 30, renew_interval_seconds: 2 },
    });
    try {
      const credentials = await fleet.enrol("edge-1");
      const tooSoon = await fleet.renew("edge-1", credentials);
      assert.equal(tooSoon.status, 429, "just registered");
      assert.equal(tooSoon.body.error.code, "renewal_too_early");
      const wait = Number(tooSoon.retryAfter);
      assert.ok(wait >= 1 && wait <= 2, `Retry-After ${tooSoon.retryAfter}`);
      await new Promise((resolve) => setTimeout(resolve, wait * 1000 + 50));
      const renewed = await fleet.renew("edge-1", credentials);
      assert.equal(renewed.status, 200, JSON.stringify(renewed.body));
      // Any certificate of the node counts: the new one and the old one are both too soon now.
      for (const held of [renewed.credentials!, credentials]) {
        const again = await fleet.renew("edge-1", held);
        assert.equal(again.status, 429);
        assert.equal(again.body.error.code, "renewal_too_early");
      }
      // From four connections at once, after the interval: one certificate, three 429s.
      await new Promise((resolve) => setTimeout(resolve, 2100));
      const burst = await Promise.all(
        [0, 1, 2, 3].map(() => fleet.renew("edge-1", renewed.credentials!)),
      );
      assert.deepEqual(burst.map((a) => a.status).sort(), [200, 429, 429, 429]);

      // Revoked: refused as such, whatever the limits say.
      await new Promise((resolve) => setTimeout(resolve, 2100));
      assert.equal((await fleet.revoke("edge-1")).code, 0);
      const revoked = await fleet.renew("edge-1", renewed.credentials!);
      assert.equal(revoked.status, 403);
      assert.equal(revoked.body.error.code, "node_revoked");
    } finally {
      await fleet.dispose();
    }
  },
  60_000,
);
