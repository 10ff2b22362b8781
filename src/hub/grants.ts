/**
 * The permissions a hub config needs, each with why: what `portcullis flags hub.yaml` prints and
 * the boot audit holds the hub to.
 *
 * @module
 */
import type { Grant } from "../boot/flags.ts";
import { CODE_GRANTS, LOCAL_MACHINE_GRANTS } from "../boot/flags.ts";
import { formatAddress, type ListenerAddress } from "../config/load.ts";
import { templateFiles } from "../config/errors_schema.ts";
import type { CaFiles } from "../trust/ca.ts";
import { poolGrants } from "../torpool/config.ts";
import { doorsGrants } from "./mirrors/config.ts";
import { type HubConfig, TRANSPORTS } from "./config.ts";

/**
 * Every permission a hub needs: net for its listeners, read for its config, runtime folder and
 * credentials; with the SOCKS relay or the HTTPS tunnel, read for its credentials and net for each
 * pool instance (the only outbound net); with an embedded Tor pool, the pool's own set (run for its Tor binary only,
 * its ports, its folders). No env, and no run or write without the pool.
 */
export function hubGrants(config: HubConfig): Grant[] {
  const grants: Grant[] = [];
  const transports = TRANSPORTS.flatMap((role) => {
    const listener = role === "socks5_tls" ? config.socks5Tls : config.httpsTunnel;
    return listener ? [{ role, listener }] : [];
  });
  const listeners: [string, ListenerAddress][] = [
    ...config.api.listen.map((a): [string, ListenerAddress] => ["hub api listener", a]),
    ...config.health.map((a): [string, ListenerAddress] => ["hub health listener", a]),
    ...transports.map(({ role, listener }): [string, ListenerAddress] => [
      `hub ${role} listener`,
      listener.listen,
    ]),
  ];
  for (const [purpose, address] of listeners) {
    grants.push({ name: "net", value: formatAddress(address), purpose });
    if (address.kind === "unix") {
      grants.push({ name: "read", value: address.path, purpose });
      grants.push({ name: "write", value: address.path, purpose });
    }
  }
  grants.push({ name: "read", value: config.file, purpose: "config file" });
  grants.push({ name: "read", value: config.runtimeDir, purpose: "runtime folder" });
  for (const file of templateFiles(config.errors)) {
    grants.push({ name: "read", value: file, purpose: "error template" });
  }
  const tls = config.api.tls;
  for (const file of tls ? [tls.certFile, tls.keyFile, tls.clientCaFile] : []) {
    if (config.ca && file === config.ca.files.rootCert) continue; // the CA's grants name it
    grants.push({ name: "read", value: file, purpose: "hub TLS files" });
  }
  if (config.api.tokensDir) {
    grants.push({ name: "read", value: config.api.tokensDir, purpose: "node tokens folder" });
  }
  if (config.ca) grants.push(...caGrants(config.ca.files));
  for (const { role, listener } of transports) {
    for (const file of [listener.certFile, listener.keyFile, listener.clientCaFile]) {
      if (config.ca && file === config.ca.files.rootCert) continue;
      grants.push({ name: "read", value: file, purpose: `hub ${role} TLS files` });
    }
  }
  if (transports.length > 0) {
    for (const port of config.pool?.ports ?? []) {
      const value = formatAddress({ kind: "tcp", hostname: config.pool!.hostname, port });
      grants.push({ name: "net", value, purpose: "pool SOCKS instance" });
    }
  }
  // The embedded Tor pool: its Tor binary (the one run grant), its ports, its folders, its API.
  for (const grant of config.torpool ? poolGrants(config.torpool) : []) {
    grants.push({ ...grant, purpose: `embedded Tor pool: ${grant.purpose}` });
  }
  if (config.doors) grants.push(...doorsGrants(config.doors));
  // What the check of its tenant sets against its own listeners reads of the machine.
  return [...grants, ...LOCAL_MACHINE_GRANTS, ...CODE_GRANTS];
}

/**
 * What a hub with the fleet CA reads and writes: the root certificate and the intermediate (its
 * key a secret), the CRL and `revoked/` (the markers `hub revoke` writes), read; `issued/` (the
 * record of what was signed), `secrets/` (one registration secret per node, removed when spent,
 * and the spent records a retry reads), `nodes/` (each node's type and incarnation, written at
 * registration) and `hub-state/` (its last good copy of the CRL, served when the CRL is damaged:
 * hub/enforced_crl.ts), read and written. Not `root.key`: the hub runs without it; and it never
 * writes a revocation — `crl.pem` stays read-only to it.
 */
function caGrants(files: CaFiles): Grant[] {
  const purpose = "fleet CA";
  const written = [files.issuedDir, files.secretsDir, files.nodesDir, files.hubStateDir];
  return [
    ...[files.rootCert, files.intermediateCert, files.intermediateKey, files.crl, files.revokedDir]
      .map((value): Grant => ({ name: "read", value, purpose })),
    ...written.flatMap((value): Grant[] => [
      { name: "read", value, purpose },
      { name: "write", value, purpose },
    ]),
  ];
}
