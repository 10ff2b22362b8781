/**
 * Fleet trust in the configs and the flags: a hub's `ca` needs TLS and stands in for every client
 * CA; its grants name the CA's files but never the root key; an edge that registers needs an https
 * hub and is granted exactly the files registration and renewal write.
 */
import assert from "node:assert/strict";
import { stringify } from "yaml";
import { formatFlags, requiredGrants } from "../src/boot/flags.ts";
import { loadConfig } from "../src/config/load.ts";
import { formatPath } from "../src/config/problems.ts";
import { parseYaml } from "../src/config/yaml_file.ts";
import { resolveHubConfig } from "../src/hub/config.ts";
import { hubGrants } from "../src/hub/grants.ts";
import { configErrorOf, MINIMAL, writeConfigText } from "./fixtures/config_files.ts";

const HUB = {
  role: "hub",
  node_id: "hub-1",
  runtime_dir: "runtime",
  api: {
    listen: [{ hostname: "127.0.0.1", port: 9443 }],
    tls: { cert_file: "ca/hub.crt", key_file: "ca/hub.key" },
  },
  ca: { dir: "ca" },
};

function resolveHub(config: Record<string, unknown>) {
  const parsed = parseYaml("/etc/portcullis/hub.yaml", stringify(config));
  if (Array.isArray(parsed)) throw new Error("unparsable");
  return resolveHubConfig(parsed);
}

async function hubProblems(config: Record<string, unknown>): Promise<string[]> {
  const error = await configErrorOf(Promise.resolve().then(() => resolveHub(config)), "accepted");
  return error.problems.map((p) => `${formatPath(p.path)}: ${p.message}`);
}

Deno.test("hub config: ca defaults every client CA to the fleet root; without ca one is needed", async () => {
  const config = resolveHub(HUB);
  assert.equal(config.api.tls!.clientCaFile, "/etc/portcullis/ca/root.crt");
  assert.equal(config.ca!.lifetimeDays, 365);
  // Renewal within 30 days of the end (the nodes' default), at most hourly; retry for 10 min.
  assert.deepEqual(
    [config.ca!.renewBeforeDays, config.ca!.renewIntervalMs, config.ca!.retryWindowMs],
    [30, 3_600_000, 600_000],
  );
  assert.equal(config.revocationReloadMs, 60_000);
  const withoutCa = { ...HUB, ca: undefined };
  assert.deepEqual(await hubProblems(withoutCa), [
    "api.tls.client_ca_file: Set client_ca_file (the CA nodes' certificates chain to), or ca " +
    "(the hub's fleet CA)",
  ]);
  const tokens = {
    ...HUB,
    api: { listen: HUB.api.listen, tokens_dir: "tokens" },
  };
  assert.deepEqual(await hubProblems(tokens), [
    "ca: The fleet CA registers nodes over TLS: set api.tls (cert_file, key_file)",
  ]);
  assert.deepEqual(await hubProblems({ ...HUB, ca: { dir: "ca", lifetime_days: 0 } }), [
    "ca.lifetime_days: Expected a whole number from 1 to 3650",
  ]);
});

Deno.test("hub flags: the CA's certificates, intermediate key and CRL; issued/ and secrets/; no root key", () => {
  const flags = formatFlags(hubGrants(resolveHub(HUB)));
  for (const file of ["root.crt", "intermediate.crt", "intermediate.key", "crl.pem"]) {
    assert.match(flags, new RegExp(`--allow-read=[^ ]*/etc/portcullis/ca/${file}`), file);
  }
  for (const folder of ["issued", "secrets", "nodes"]) {
    assert.match(flags, new RegExp(`--allow-write=[^ ]*/etc/portcullis/ca/${folder}`), folder);
  }
  // The markers hub revoke writes: read, never written by the hub.
  assert.match(flags, /--allow-read=[^ ]*\/etc\/portcullis\/ca\/revoked/);
  assert.doesNotMatch(flags, /--allow-write=[^ ]*\/etc\/portcullis\/ca\/revoked/);
  assert.doesNotMatch(flags, /root\.key/);
  assert.doesNotMatch(flags, /\/etc\/portcullis\/ca(,| |$)/, "never the whole CA folder");
});

const REMOTE = `${
  MINIMAL.replace("mode: local", "mode: remote").replace("tenants_dir: tenants\n", "")
}cache_dir: cache
hub:
  url: https://127.0.0.1:9443
  ca_file: hub-ca.pem
  cert_file: node.crt
  key_file: node.key
`;

Deno.test("edge config: register needs an https hub; renewal and grace default to 30", async () => {
  const file = await writeConfigText(`${REMOTE}  register: { secret_file: node.secret }\n`);
  const config = await loadConfig(file);
  assert.equal(config.runtime.kind, "remote");
  const hub = config.runtime.kind === "remote" ? config.runtime.hub : undefined;
  assert.equal(hub!.secretFile, file.replace("config.yaml", "node.secret"));
  assert.deepEqual([hub!.renewBeforeDays, hub!.graceSeconds], [30, 30]);
  const plain = `${
    MINIMAL.replace("mode: local", "mode: remote").replace("tenants_dir: tenants\n", "")
  }cache_dir: cache
hub:
  url: http://127.0.0.1:9443
  token_file: node.token
  register: { secret_file: node.secret }
`;
  const error = await configErrorOf(loadConfig(await writeConfigText(plain)), "accepted");
  assert.deepEqual(error.problems.map((p) => `${formatPath(p.path)}: ${p.message}`), [
    "hub.register: Registration gives a client certificate: it needs an https hub",
  ]);
});

Deno.test("edge flags: exactly the files registration and renewal write", async () => {
  const file = await writeConfigText(`${REMOTE}  register: { secret_file: node.secret }\n`);
  const dir = file.replace("/config.yaml", "");
  const grants = requiredGrants(await loadConfig(file));
  const writes = grants.filter((g) => g.name === "write").map((g) => g.value).sort();
  assert.deepEqual(writes, [
    `${dir}/cache`,
    `${dir}/node.crt`,
    `${dir}/node.crt.new`,
    `${dir}/node.key`,
    `${dir}/node.key.new`,
    `${dir}/node.secret`,
  ]);
  const without = requiredGrants(await loadConfig(await writeConfigText(REMOTE)));
  assert.ok(!without.some((g) => g.value.endsWith("node.secret")));
});
