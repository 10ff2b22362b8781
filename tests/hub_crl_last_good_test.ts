/**
 * Issue 32, finding 6: a hub restarted on a damaged CRL refused to boot, leaving its fleet without
 * a hub. Now it keeps a verified copy of the last good list and serves with it, saying so in its
 * log, in `/v1/config` and in `/metrics`; without a copy that verifies it still refuses. And
 * `hub revoke` replaces the CRL whole, so a revocation killed half way leaves no damaged list.
 *
 * A real hub process under the flags `main.ts flags` derives; nodes poll it with their
 * certificates.
 */
import assert from "node:assert/strict";
import "reflect-metadata";
import * as x509 from "@peculiar/x509";
import { boundedTest } from "./fixtures/bounded_test.ts";
import { CLI_FLAGS, FleetProcess } from "./fixtures/fleet_process.ts";
import { MAIN } from "./fixtures/gateway.ts";
import { request } from "./fixtures/http_client.ts";
import { waitFor } from "./fixtures/in_process.ts";
import { certificateSerial, initCa, loadIssuer } from "../src/trust/ca.ts";
import { readRevoked, writeCrl } from "../src/trust/crl.ts";

/** Ways a CRL is found damaged: each writes `crl` from the good text. */
const DAMAGES: readonly [string, (crl: string, good: string) => Promise<void>][] = [
  ["half written", (crl, good) => Deno.writeTextFile(crl, good.slice(0, good.length / 2))],
  ["empty", (crl) => Deno.writeTextFile(crl, "")],
  ["gone", (crl) => Deno.remove(crl)],
  ["its signature altered", async (crl, good) => {
    const der = new Uint8Array(x509.PemConverter.decodeFirst(good));
    der[der.length - new x509.X509Crl(der).signature.byteLength + 8] ^= 0x01;
    await Deno.writeTextFile(crl, x509.PemConverter.encode(der.buffer, "X509 CRL"));
  }],
  ["signed by another CA", async (crl) => await Deno.writeTextFile(crl, await foreignCrl())],
];

/** The CRL of a CA made for the purpose (well formed, signed by another intermediate). */
async function foreignCrl(): Promise<string> {
  const dir = await Deno.makeTempDir({ prefix: "portcullis-other-ca-" });
  try {
    const files = await initCa(`${dir}/ca`, { names: ["127.0.0.1"] });
    return await Deno.readTextFile(files.crl);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

// deno-lint-ignore no-explicit-any
async function crlState(fleet: FleetProcess): Promise<Record<string, any>> {
  // deno-lint-ignore no-explicit-any
  return ((await fleet.hub.status()) as any).revocation;
}

async function metrics(fleet: FleetProcess): Promise<string> {
  const response = await request(fleet.hub.healthPort, { path: "/metrics" });
  assert.equal(response.status, 200);
  return response.body;
}

boundedTest(
  "a hub restarted on a damaged CRL serves with its last good copy and says so in its log, /v1/config and /metrics",
  async () => {
    const fleet = await FleetProcess.start();
    try {
      const flags = fleet.hub.flags.join(" ");
      assert.match(flags, /--allow-write=[^ ]*\/ca\/hub-state/, "a place to keep the copy");
      const writes = fleet.hub.flags.find((f) => f.startsWith("--allow-write="))!;
      assert.ok(!writes.split(/[=,]/).some((p) => p.endsWith("/ca") || p.endsWith("crl.pem")));
      const one = await fleet.enrol("edge-1");
      const three = await fleet.enrol("edge-3");
      // edge-3 is revoked by its serial alone (no node marker): only the list refuses it.
      const issuer = await loadIssuer(fleet.files.dir);
      await writeCrl(issuer, [{ serial: certificateSerial(three.chainPem), at: new Date() }]);
      await waitFor(() => fleet.get("config", "edge-3", three), (r) => r.status === 403, 10_000);
      const good = await Deno.readTextFile(fleet.files.crl);
      await waitFor(
        () => Deno.readTextFile(fleet.files.lastGoodCrl).catch(() => ""),
        (copy) => copy === good,
        10_000,
      );
      assert.equal((await crlState(fleet)).crl_state.origin, "crl");
      assert.match(await metrics(fleet), /^portcullis_hub_crl_readable 1$/m);

      for (const [damage, write] of DAMAGES) {
        await fleet.hub.stop();
        await write(fleet.files.crl, good);
        await fleet.hub.restart().catch((error) => {
          throw new Error(`CRL ${damage}: the hub did not start: ${error.message}`);
        });
        const state = await crlState(fleet);
        assert.equal(state.crl_state.origin, "last_good_copy", damage);
        assert.equal(typeof state.crl_state.damaged.reason, "string", damage);
        assert.equal(state.revoked_certificates, 1, damage);
        const page = await metrics(fleet);
        assert.match(page, /^portcullis_hub_crl_from_last_good_copy 1$/m, damage);
        assert.match(page, /^portcullis_hub_crl_readable 0$/m, damage);
        assert.match(page, /^portcullis_hub_crl_revoked_certificates 1$/m, damage);
        const said = fleet.hub.stderr.split("\n").filter((l) =>
          /serving with its last good/.test(l)
        );
        assert.ok(said.length > 0 && said.every((l) => JSON.parse(l).level === "error"), damage);
        assert.equal((await fleet.get("config", "edge-1", one)).status, 200, damage);
        assert.equal((await fleet.get("config", "edge-3", three)).status, 403, damage);
      }

      // Repaired by a revocation: rebuilt from the copy (edge-3 stays listed) plus edge-4.
      const four = await fleet.enrol("edge-4");
      const revoked = await fleet.revoke("edge-4", { asProcess: true });
      assert.equal(revoked.code, 0, revoked.stderr);
      assert.match(revoked.stderr, /rebuilt from the hub's last good copy/);
      await waitFor(() => crlState(fleet), (s) => s.crl_state.origin === "crl", 10_000);
      assert.match(await metrics(fleet), /^portcullis_hub_crl_readable 1$/m);
      assert.match(fleet.hub.stderr, /CRL .* reads again/);
      assert.equal((await fleet.get("config", "edge-3", three)).status, 403);
      assert.equal((await fleet.get("config", "edge-4", four)).status, 403);
      assert.equal((await fleet.get("config", "edge-1", one)).status, 200);
      const repaired = await Deno.readTextFile(fleet.files.crl);
      await waitFor(
        () => Deno.readTextFile(fleet.files.lastGoodCrl),
        (c) => c === repaired,
        10_000,
      );
    } finally {
      await fleet.dispose();
    }
  },
  120_000,
);

boundedTest(
  "a hub with no last good copy that verifies refuses to boot on a damaged CRL; one made since the folder was missing serves",
  async () => {
    const fleet = await FleetProcess.start();
    try {
      const good = await Deno.readTextFile(fleet.files.crl);
      await fleet.hub.stop();
      await Deno.writeTextFile(fleet.files.crl, good.slice(0, good.length / 2));
      await Deno.remove(fleet.files.lastGoodCrl);
      await assert.rejects(fleet.hub.restart(), /no last good copy to serve with/);
      // A copy is believed only when the intermediate signed it.
      await Deno.writeTextFile(fleet.files.lastGoodCrl, await foreignCrl());
      await assert.rejects(fleet.hub.restart(), /not signed by intermediate/);

      // A CA from before the copy (no hub-state folder): the hub makes it at the first good read.
      await Deno.writeTextFile(fleet.files.crl, good);
      await Deno.remove(fleet.files.hubStateDir, { recursive: true });
      await fleet.hub.restart();
      await waitFor(
        () => Deno.readTextFile(fleet.files.lastGoodCrl).catch(() => ""),
        (copy) => copy === good,
        10_000,
      );
      await fleet.hub.stop();
      await Deno.writeTextFile(fleet.files.crl, "");
      await fleet.hub.restart();
      assert.equal((await crlState(fleet)).crl_state.origin, "last_good_copy");
    } finally {
      await fleet.dispose();
    }
  },
  60_000,
);

boundedTest(
  "hub revoke never writes into the CRL: a whole new list is renamed over it",
  async () => {
    const fleet = await FleetProcess.start();
    const trace = await Deno.makeTempFile({ prefix: "portcullis-strace-" });
    try {
      await fleet.enrol("edge-1");
      const output = await new Deno.Command("strace", {
        args: [
          "-f",
          "-qq",
          "-o",
          trace,
          "-e",
          "trace=openat,open,creat,truncate,rename,renameat,renameat2,link,linkat",
          Deno.execPath(),
          "run",
          "--no-prompt",
          ...CLI_FLAGS,
          MAIN,
          "hub",
          "revoke",
          fleet.hub.config,
          "edge-1",
        ],
        stdout: "piped",
        stderr: "piped",
        env: { NO_COLOR: "1" },
      }).output();
      assert.equal(output.code, 0, new TextDecoder().decode(output.stderr));
      // Every call naming crl.pem (strace's -P matches only a rename's source, so filter here).
      const calls = (await Deno.readTextFile(trace)).split("\n")
        .filter((l) => l.includes(`"${fleet.files.crl}"`));
      const writes = calls.filter((l) => /O_WRONLY|O_RDWR|O_TRUNC|O_CREAT|truncate\(/.test(l));
      assert.deepEqual(writes, [], "crl.pem itself is never opened for writing");
      const renames = calls.filter((l) => /rename/.test(l));
      assert.equal(renames.length, 1, calls.join("\n"));
      const issuer = await loadIssuer(fleet.files.dir);
      const listed = await readRevoked(fleet.files.crl, issuer.intermediatePem);
      assert.equal(listed.serials.size, 1, "the renamed list is the new one");
    } finally {
      await fleet.dispose();
      await Deno.remove(trace);
    }
  },
  60_000,
);
