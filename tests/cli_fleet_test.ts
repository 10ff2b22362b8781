/**
 * The operator's fleet verbs as an operator runs them: `hub init-ca` makes the CA once (key files
 * 0600, a second run refuses), `hub add-node` makes one secret per node (or a token file in token
 * mode) and refuses to overwrite one, `hub revoke` lists every certificate of the node in the CRL
 * (or removes its token) and refuses a node it never issued; bad input is a usage error. The first
 * run is the command itself; the rest run the CLI's `main` in this process.
 */
import assert from "node:assert/strict";
import { stringify } from "yaml";
import { runCli, runMain } from "./fixtures/gateway.ts";
import { loadIssuer } from "../src/trust/ca.ts";
import { readRevoked } from "../src/trust/crl.ts";
import { startFleetHub } from "./fixtures/fleet.ts";

const FLAGS = ["--allow-read", "--allow-write", "--ignore-env=LOG_STREAM,LOG_TOKENS"];

/** A hub folder with a config (fleet CA, or token mode) that is never started. */
async function hubFolder(withCa: boolean): Promise<{ dir: string; config: string }> {
  const dir = await Deno.makeTempDir({ prefix: "portcullis-fleet-cli-" });
  await Deno.mkdir(`${dir}/runtime`);
  await Deno.mkdir(`${dir}/tokens`);
  const api: Record<string, unknown> = { listen: [{ hostname: "127.0.0.1", port: 1 }] };
  if (withCa) api.tls = { cert_file: "ca/hub.crt", key_file: "ca/hub.key" };
  else api.tokens_dir = "tokens";
  const config = {
    role: "hub",
    node_id: "hub-1",
    runtime_dir: "runtime",
    api,
    ...(withCa ? { ca: { dir: "ca" } } : {}),
  };
  await Deno.writeTextFile(`${dir}/hub.yaml`, stringify(config));
  return { dir, config: `${dir}/hub.yaml` };
}

Deno.test("hub init-ca makes the CA once, keys 0600, and says to move the root key away", async () => {
  const { dir, config } = await hubFolder(true);
  try {
    const made = await runCli(FLAGS, ["hub", "init-ca", config, "--name", "127.0.0.1"]);
    assert.equal(made.code, 0, made.stderr);
    assert.match(made.stdout, /move .*root\.key offline/);
    for (const key of ["root.key", "intermediate.key", "hub.key"]) {
      assert.equal((await Deno.stat(`${dir}/ca/${key}`)).mode! & 0o777, 0o600, key);
    }
    const issuer = await loadIssuer(`${dir}/ca`);
    assert.equal((await readRevoked(issuer.files.crl, issuer.intermediatePem)).serials.size, 0);
    const again = await runMain(["hub", "init-ca", config, "--name", "127.0.0.1"]);
    assert.equal(again.code, 1);
    assert.match(again.stderr, /exists/);
    const bare = await runMain(["hub", "init-ca", config]);
    assert.equal(bare.code, 2);
    assert.match(bare.stderr, /--name/);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("hub add-node and revoke: one secret per node; revoke refuses a node never issued", async () => {
  const { dir, config } = await hubFolder(true);
  try {
    await runMain(["hub", "init-ca", config, "--name", "127.0.0.1"]);
    const added = await runMain(["hub", "add-node", config, "edge-1"]);
    assert.equal(added.code, 0, added.stderr);
    const secretFile = `${dir}/ca/secrets/edge-1.secret`;
    assert.equal((await Deno.stat(secretFile)).mode! & 0o777, 0o600);
    assert.equal(JSON.parse(await Deno.readTextFile(secretFile)).node_type, "edge");
    const twice = await runMain(["hub", "add-node", config, "edge-1"]);
    assert.equal(twice.code, 1);
    assert.equal(
      (await runMain(["hub", "add-node", config, "door-1", "--type", "door"])).code,
      0,
    );
    for (
      const args of [
        ["add-node", config, "../etc"],
        ["add-node", config, "edge-2", "--type", "hub"],
        ["add-node", config],
        ["revoke", config, "edge-1", "--colour", "red"],
      ]
    ) {
      const refused = await runMain(["hub", ...args]);
      assert.equal(refused.code, 2, args.join(" "));
      assert.match(refused.stderr, /usage:/);
    }
    const never = await runMain(["hub", "revoke", config, "edge-1"]);
    assert.equal(never.code, 1, "no certificate was issued to edge-1 yet");
    assert.match(never.stderr, /edge-1/);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("hub revoke lists every certificate the node was issued, renewals included", async () => {
  const fleet = await startFleetHub();
  try {
    await fleet.enrol("edge-1");
    await fleet.enrol("edge-1"); // provisioned twice: two certificates
    await fleet.enrol("edge-2");
    const revoked = await runMain([
      "hub",
      "revoke",
      `${fleet.test.dir}/hub.yaml`,
      "edge-1",
      "--reason",
      "keyCompromise",
    ]);
    assert.equal(revoked.code, 0, revoked.stderr);
    assert.match(revoked.stdout, /revoked 2 certificate/);
    const issuer = await loadIssuer(fleet.files.dir);
    assert.equal((await readRevoked(fleet.files.crl, issuer.intermediatePem)).serials.size, 2);
  } finally {
    await fleet.dispose();
  }
});

Deno.test("hub add-node and revoke in token mode write the node's token file, then move it aside", async () => {
  const { dir, config } = await hubFolder(false);
  try {
    const added = await runMain(["hub", "add-node", config, "edge-1"]);
    assert.equal(added.code, 0, added.stderr);
    const file = `${dir}/tokens/edge-1.token`;
    assert.equal((await Deno.stat(file)).mode! & 0o777, 0o600);
    assert.match(await Deno.readTextFile(file), /^[0-9a-f]{64}\n$/);
    assert.equal((await runMain(["hub", "add-node", config, "edge-1"])).code, 1);
    assert.equal((await runMain(["hub", "revoke", config, "edge-1"])).code, 0);
    await assert.rejects(Deno.stat(file), Deno.errors.NotFound);
    // Kept aside, owner-only, so a hub that restarts still knows the token was revoked.
    assert.equal((await Deno.stat(`${dir}/tokens/revoked/edge-1.token`)).mode! & 0o777, 0o600);
    assert.equal((await runMain(["hub", "revoke", config, "edge-1"])).code, 1);
    const initCa = await runMain(["hub", "init-ca", config, "--name", "x"]);
    assert.equal(initCa.code, 1);
    assert.match(initCa.stderr, /has no ca/);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
