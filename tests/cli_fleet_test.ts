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
import { readRevoked, writeCrl } from "../src/trust/crl.ts";
import { parseYaml } from "../src/config/yaml_file.ts";
import { resolveHubConfig } from "../src/hub/config.ts";
import { loadFleetTrust } from "../src/hub/fleet_trust.ts";
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

Deno.test("hub add-node and revoke: one secret per node; revoke refuses a node never added", async () => {
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
    const never = await runMain(["hub", "revoke", config, "edge-9"]);
    assert.equal(never.code, 1, "edge-9 was never added");
    assert.match(never.stderr, /edge-9/);
    // A node added but not registered yet: revoked, its waiting secret removed.
    const waiting = await runMain(["hub", "revoke", config, "edge-1"]);
    assert.equal(waiting.code, 0, waiting.stderr);
    await assert.rejects(Deno.stat(secretFile), Deno.errors.NotFound);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("hub revoke marks the node and lists every certificate it was issued, renewals included", async () => {
  const fleet = await startFleetHub({ renewBeforeDays: 400, renewIntervalSeconds: 0 });
  try {
    const first = await fleet.enrol("edge-1");
    assert.equal((await fleet.renew("edge-1", first)).status, 200); // two certificates
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
    assert.match(revoked.stdout, /revoked node edge-1 \(incarnation 1;.* and 2 certificate/);
    const issuer = await loadIssuer(fleet.files.dir);
    assert.equal((await readRevoked(fleet.files.crl, issuer.intermediatePem)).serials.size, 2);
    const marker = JSON.parse(await Deno.readTextFile(`${fleet.files.revokedDir}/edge-1.json`));
    assert.deepEqual([marker.node_id, marker.incarnation, marker.reason], [
      "edge-1",
      1,
      "keyCompromise",
    ]);
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

Deno.test("hub migrate-ca moves flat issued records per node, types only what they agree on; the hub refuses the flat layout", async () => {
  const { dir, config } = await hubFolder(true);
  try {
    await runMain(["hub", "init-ca", config, "--name", "127.0.0.1"]);
    const issuer = await loadIssuer(`${dir}/ca`);
    const files = issuer.files;
    // The layout of a CA made before: issued/<serial>.json, the type copied into each record.
    const flat = async (serial: string, node: string, type: string) => {
      const record = {
        serial,
        node_id: node,
        node_type: type,
        not_before: "2026-12-01T00:00:00.000Z",
        not_after: "2027-12-01T00:00:00.000Z",
        issued_at: "2026-12-01T00:05:00.000Z",
      };
      await Deno.writeTextFile(`${files.issuedDir}/${serial}.json`, JSON.stringify(record));
    };
    await flat("11", "edge-a", "edge");
    await flat("12", "edge-a", "edge");
    await flat("21", "door-b", "edge"); // revoked, then re-provisioned as a door
    await flat("22", "door-b", "door");
    await flat("31", "mix-c", "edge"); // both types live: cannot tell
    await flat("32", "mix-c", "door");
    await flat("41", "gone-d", "edge"); // revoked
    const at = new Date();
    await writeCrl(issuer, [{ serial: "21", at }, { serial: "41", at }]);
    // The hub refuses to start on it, naming the command.
    const parsed = parseYaml(config, await Deno.readTextFile(config));
    if (Array.isArray(parsed)) throw new Error("unparsable");
    const refused = await loadFleetTrust(resolveHubConfig(parsed), () => {}).then(
      () => undefined,
      (error: Error) => error.message,
    );
    assert.match(String(refused), /flat layout.*portcullis hub migrate-ca/);
    // So do add-node and revoke.
    const add = await runMain(["hub", "add-node", config, "edge-z"]);
    assert.equal(add.code, 1);
    assert.match(add.stderr, /migrate-ca/);

    const migrated = await runMain(["hub", "migrate-ca", config]);
    assert.equal(migrated.code, 0, migrated.stderr);
    assert.match(migrated.stdout, /moved 7 issued record/);
    assert.match(migrated.stdout, /mix-c: NOT recorded/);
    assert.match(migrated.stdout, /revoke again each node/);
    const entry = async (node: string) =>
      JSON.parse(await Deno.readTextFile(`${files.nodesDir}/${node}.json`).catch(() => "null"));
    assert.deepEqual((await entry("edge-a"))?.node_type, "edge");
    assert.deepEqual((await entry("door-b"))?.node_type, "door");
    assert.equal(await entry("mix-c"), null);
    assert.deepEqual((await entry("gone-d"))?.node_type, "edge");
    assert.ok(await Deno.stat(`${files.revokedDir}/gone-d.json`));
    await assert.rejects(Deno.stat(`${files.revokedDir}/door-b.json`), Deno.errors.NotFound);
    assert.deepEqual([...Deno.readDirSync(`${files.issuedDir}/edge-a`)].map((e) => e.name).sort(), [
      "11.json",
      "12.json",
    ]);
    assert.equal([...Deno.readDirSync(files.issuedDir)].filter((e) => e.isFile).length, 0);
    // Run again: nothing left to do.
    assert.match((await runMain(["hub", "migrate-ca", config])).stdout, /moved 0/);
    assert.equal(
      (await loadFleetTrust(resolveHubConfig(parsed), () => {})).standing.nodeTypeOf("door-b"),
      "door",
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
