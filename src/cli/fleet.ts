/**
 * The operator's fleet verbs, run beside (not inside) a hub, on its config:
 *
 * ```
 * portcullis hub init-ca <hub.yaml> [--name <hub host or IP>]...
 * portcullis hub add-node <hub.yaml> <node_id> [--type edge|door] [--reprovision]
 * portcullis hub revoke <hub.yaml> <node_id> [--reason <RFC 5280 reason, e.g. keyCompromise>]
 * portcullis hub migrate-ca <hub.yaml>
 * ```
 *
 * `init-ca` makes the fleet CA in `ca.dir` (a root, an intermediate, the hub's server certificate
 * for each `--name`, an empty CRL); move `root.key` offline afterwards — the hub never reads it.
 * `add-node` makes a node's one-time registration secret (with `ca`) or its token file (with
 * `api.tokens_dir`). With `ca` a node registers once, as the type its secret names: `add-node` on
 * a registered node refuses, and on a revoked one refuses unless `--reprovision` says to start a
 * new incarnation (trust/node_registry.ts) — every certificate of the old one stays refused.
 * `revoke` marks the node revoked, then adds every certificate issued to it to the CRL (the
 * running hub picks both up within `revocation.reload_ms`, at once when it sees a file change), or
 * moves the node's token file to `<tokens_dir>/revoked/` (so a restarted hub still knows it).
 * `migrate-ca` moves a CA made before issue 31 to the per-node layout (trust/migrate_issued.ts).
 *
 * @module
 */
import { ConfigError } from "../config/problems.ts";
import { readYaml } from "../config/yaml_file.ts";
import { writeSecretFile } from "../trust/csr.ts";
import { type CaFiles, initCa } from "../trust/ca.ts";
import { revokeNode } from "../trust/crl.ts";
import { flatRecords } from "../trust/issued_index.ts";
import { migrateFlatIssued } from "../trust/migrate_issued.ts";
import { isRevokedBy, readNodeEntry, readRevokedMarker } from "../trust/node_registry.ts";
import { addNodeSecret } from "../trust/node_secrets.ts";
import { NODE_ID, REVOKED_FOLDER } from "../hub/auth.ts";
import { type HubConfig, isHubFile, loadHubConfig } from "../hub/config.ts";

/** The fleet verbs, as `portcullis hub <verb>` takes them. */
export const FLEET_VERBS: readonly string[] = ["init-ca", "add-node", "revoke", "migrate-ca"];

/** Usage lines for the fleet verbs. */
export const FLEET_USAGE =
  `       portcullis hub init-ca <hub.yaml> [--name <host or IP>]... [--label <CA name>]
       portcullis hub add-node <hub.yaml> <node_id> [--type edge|door] [--reprovision]
       portcullis hub revoke <hub.yaml> <node_id> [--reason keyCompromise|superseded|...]
       portcullis hub migrate-ca <hub.yaml>`;

/**
 * Runs one fleet verb.
 *
 * @param verb one of {@link FLEET_VERBS}
 * @param args what follows the verb: the hub config, then the verb's operands and options
 * @returns the exit status (2 for a usage error)
 * @throws {ConfigError} when the hub config is invalid
 */
export async function runFleetVerb(verb: string, args: readonly string[]): Promise<number> {
  const parsed = parseArgs(args);
  if (typeof parsed === "string") return usage(parsed);
  const { operands, options } = parsed;
  const expected = verb === "init-ca" || verb === "migrate-ca" ? 1 : 2;
  if (operands.length !== expected) {
    return usage(`${verb} takes ${expected === 1 ? "<hub.yaml>" : "<hub.yaml> <node_id>"}`);
  }
  const config = await hubConfig(operands[0]);
  if (typeof config === "string") return usage(config);
  if (verb === "init-ca") {
    return await initFleetCa(config, options.name ?? [], options.label?.at(-1));
  }
  if (verb === "migrate-ca") return await migrateCa(config);
  const nodeId = operands[1];
  if (!NODE_ID.test(nodeId)) {
    return usage(`${JSON.stringify(nodeId)} is not a node id (1-63 letters, digits, . _ -)`);
  }
  if (verb === "add-node") {
    const type = options.type?.at(-1) ?? "edge";
    if (type !== "edge" && type !== "door") return usage(`--type is edge or door, not ${type}`);
    return await addNode(config, nodeId, type, options.reprovision !== undefined);
  }
  return await revoke(config, nodeId, options.reason?.at(-1));
}

/** Makes the CA in `ca.dir`, its certificates named `<label> root` and `<label> intermediate`. */
async function initFleetCa(
  config: HubConfig,
  names: readonly string[],
  label: string | undefined,
): Promise<number> {
  if (!config.ca) return refuse(`${config.file} has no ca: add ca: {dir: ...} first`);
  if (names.length === 0) return usage("init-ca needs at least one --name (the hub's host or IP)");
  let files;
  try {
    files = await initCa(config.ca.files.dir, { names, label });
  } catch (error) {
    if (error instanceof RangeError && label !== undefined) {
      return usage(`--label: ${error.message}`);
    }
    throw error;
  }
  console.log([
    `portcullis: fleet CA made in ${files.dir}`,
    `  root ${files.rootCert} (give it to nodes as hub.ca_file)`,
    `  intermediate ${files.intermediateCert}; hub certificate ${files.hubCert} for ${
      names.join(", ")
    }`,
    `  CRL ${files.crl}`,
    `  move ${files.rootKey} offline: the hub runs with the intermediate only`,
  ].join("\n"));
  return 0;
}

/** Makes a node's registration secret (CA) or token file (tokens). */
async function addNode(
  config: HubConfig,
  nodeId: string,
  type: "edge" | "door",
  reprovision: boolean,
): Promise<number> {
  if (config.ca) {
    const incarnation = await nextIncarnation(config, nodeId, type, reprovision);
    if (typeof incarnation === "string") return refuse(incarnation);
    const made = await addNodeSecret(config.ca.files.secretsDir, nodeId, type, incarnation);
    console.log(
      `portcullis: registration secret for ${type} ${nodeId} (incarnation ${incarnation}) ` +
        `written to ${made.file}\n` +
        `  copy it to the node (mode 0600) as hub.register.secret_file; it works once`,
    );
    return 0;
  }
  const file = `${config.api.tokensDir}/${nodeId}.token`;
  if (await exists(file)) return refuse(`${file} exists: revoke the node first`);
  const token = Array.from(crypto.getRandomValues(new Uint8Array(32)), hex).join("");
  await writeSecretFile(file, `${token}\n`);
  console.log(
    `portcullis: token for ${nodeId} written to ${file}\n` +
      `  copy it to the node (mode 0600) as hub.token_file`,
  );
  return 0;
}

/**
 * The incarnation a new secret registers: 1 for a node never registered; the next one, with
 * `--reprovision`, for a revoked node; or why no secret is made.
 */
async function nextIncarnation(
  config: HubConfig,
  nodeId: string,
  type: string,
  reprovision: boolean,
): Promise<number | string> {
  const files = config.ca!.files;
  const flat = await flatLayout(config, files);
  if (flat) return flat;
  const entry = await readNodeEntry(files.nodesDir, nodeId);
  const marker = await readRevokedMarker(files.revokedDir, nodeId);
  const again = `portcullis hub add-node ${config.file} ${nodeId} --type ${type} --reprovision`;
  if (marker && isRevokedBy(entry, marker)) {
    if (reprovision) return Math.max(entry?.incarnation ?? 0, marker.incarnation) + 1;
    return `Node ${nodeId} is revoked (${files.revokedDir}/${nodeId}.json); to register it anew ` +
      `(its old certificates stay refused) run: ${again}`;
  }
  if (entry) {
    return `Node ${nodeId} is registered as a ${entry.nodeType} (incarnation ` +
      `${entry.incarnation}); its registration and type are fixed: run "portcullis hub revoke ` +
      `${config.file} ${nodeId}" first, then: ${again}`;
  }
  if (reprovision) return `Node ${nodeId} was never registered: add it without --reprovision`;
  return 1;
}

/** Why a verb refuses a CA still in the flat issued layout, or undefined. */
async function flatLayout(config: HubConfig, files: CaFiles): Promise<string | undefined> {
  if ((await flatRecords(files.issuedDir)).length === 0) return undefined;
  return `The CA in ${files.dir} keeps issued records in the old flat layout: run ` +
    `"portcullis hub migrate-ca ${config.file}" first`;
}

/** Moves the CA's flat issued records into per-node folders and records each node. */
async function migrateCa(config: HubConfig): Promise<number> {
  if (!config.ca) return refuse(`${config.file} has no ca: nothing to migrate`);
  const { moved, nodes } = await migrateFlatIssued(config.ca.files.dir);
  const lines = [`portcullis: moved ${moved} issued record(s) into per-node folders`];
  for (const node of nodes) {
    const what = node.kept
      ? "had a node record already"
      : node.nodeType
      ? `recorded as a ${node.nodeType}`
      : "NOT recorded: its certificates name both types; revoke it and add it --reprovision";
    lines.push(`  ${node.nodeId}: ${what}${node.revoked ? "; revoked (all in the CRL)" : ""}`);
  }
  if (nodes.some((node) => node.revoked)) {
    lines.push(
      "  revoke again each node you revoked before (hub revoke): the old revoke listed serials " +
        "only, and certificates issued while it ran may be in no CRL",
    );
  }
  console.log(lines.join("\n"));
  return 0;
}

/** Revokes the node and every certificate of it (CA), or moves its token file aside (tokens). */
async function revoke(config: HubConfig, nodeId: string, reason?: string): Promise<number> {
  if (config.ca) {
    const flat = await flatLayout(config, config.ca.files);
    if (flat) return refuse(flat);
    const { serials, incarnation, rebuilt } = await revokeNode(config.ca.files.dir, nodeId, reason);
    if (rebuilt) {
      console.error(
        `portcullis: warning: ${rebuilt}; the CRL was rebuilt from the hub's last good copy ` +
          `(${config.ca.files.lastGoodCrl}) and this node's certificates`,
      );
    }
    console.log(
      `portcullis: revoked node ${nodeId} (incarnation ${incarnation}; ` +
        `${config.ca.files.revokedDir}/${nodeId}.json) and ${serials.length} certificate(s) ` +
        `in ${config.ca.files.crl}` +
        `\n  the hub stops it within revocation.reload_ms (at once when it sees the file change)`,
    );
    return 0;
  }
  // Moved aside, not deleted: a hub that restarts still tells the token's holder node_revoked.
  const file = `${config.api.tokensDir}/${nodeId}.token`;
  const kept = `${config.api.tokensDir}/${REVOKED_FOLDER}/${nodeId}.token`;
  await Deno.mkdir(`${config.api.tokensDir}/${REVOKED_FOLDER}`, { mode: 0o700 }).catch(() => {});
  try {
    await Deno.rename(file, kept);
  } catch (error) {
    if (error instanceof Deno.errors.NotFound) return refuse(`${file} does not exist`);
    throw error;
  }
  console.log(
    `portcullis: moved ${file} to ${kept}; the hub stops ${nodeId} within revocation.reload_ms`,
  );
  return 0;
}

/** A hub config, or why the file is not one. */
async function hubConfig(file: string): Promise<HubConfig | string> {
  const source = await readYaml(file);
  if (Array.isArray(source)) throw new ConfigError(source);
  if (!isHubFile(source)) return `${file} is not a hub config (a hub config says role: hub)`;
  return await loadHubConfig(source);
}

/** Operands and `--name value` options (repeatable), or what is wrong with them. */
function parseArgs(
  args: readonly string[],
): { operands: string[]; options: Record<string, string[]> } | string {
  const operands: string[] = [];
  const options: Record<string, string[]> = {};
  for (let i = 0; i < args.length; i++) {
    const arg = args[i];
    if (!arg.startsWith("--")) {
      operands.push(arg);
      continue;
    }
    const name = arg.slice(2);
    if (name === "reprovision") {
      (options[name] ??= []).push("");
      continue;
    }
    if (!["name", "type", "reason", "label"].includes(name)) return `Unknown option ${arg}`;
    if (i + 1 >= args.length) return `${arg} needs a value`;
    (options[name] ??= []).push(args[++i]);
  }
  return { operands, options };
}

function usage(message: string): number {
  console.error(`portcullis: ${message}`);
  console.error(`usage: ${FLEET_USAGE.trimStart()}`);
  return 2;
}

function refuse(message: string): number {
  console.error(`portcullis: ${message}`);
  return 1;
}

async function exists(path: string): Promise<boolean> {
  return await Deno.lstat(path).then(() => true, () => false);
}

function hex(byte: number): string {
  return byte.toString(16).padStart(2, "0");
}
