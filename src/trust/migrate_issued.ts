/**
 * `portcullis hub migrate-ca`: moves a CA made before issue 31 to the layout the hub now reads —
 * `issued/<serial>.json` into `issued/<node_id>/<serial>.json`, and a `nodes/<node_id>.json` for
 * each node — once, run by the operator, so the hub never has to guess a node's standing from its
 * certificates while it serves (it refuses to start on the flat layout and names this command).
 *
 * What the old records can and cannot say: each names a node type, and the old hub copied the type
 * of the record with the highest serial into every renewal, so a node re-provisioned as a door can
 * hold records of both types. The type written is the one every record the CRL does not list
 * agrees on (all records when the CRL lists every one); a node whose records disagree gets no
 * record and must be re-provisioned (`hub revoke`, then `hub add-node --reprovision`). A node every
 * certificate of which the CRL lists is marked revoked. Every migrated node is incarnation 1.
 * The old revoke listed serials only, so certificates issued while it ran may be in no CRL: run
 * `hub revoke` again for each node revoked before the migration (the command says which).
 *
 * Records are grouped and the node records written first, then each record is renamed into its
 * folder; a run cut short is finished by running it again.
 *
 * @module
 */
import { join } from "node:path";
import { loadIssuer } from "./ca.ts";
import { readRevoked } from "./crl.ts";
import { flatRecords, type IssuedCertificate, readRecord } from "./issued_index.ts";
import {
  readNodeEntry,
  readRevokedMarker,
  writeNodeEntry,
  writeRevokedMarker,
} from "./node_registry.ts";

/** What became of one node. */
export interface MigratedNode {
  readonly nodeId: string;
  /** The type recorded, or undefined when its records disagreed (re-provision it). */
  readonly nodeType?: "edge" | "door";
  /** Every certificate of it was in the CRL: marked revoked. */
  readonly revoked: boolean;
  /** It had a node record already (left as it was). */
  readonly kept: boolean;
}

/**
 * Migrates the CA in `dir` from the flat issued layout (nothing to do when there is none).
 *
 * @returns how many records were moved, and each node's outcome
 * @throws {Error} naming the record or folder that cannot be read or written
 */
export async function migrateFlatIssued(
  dir: string,
): Promise<{ moved: number; nodes: MigratedNode[] }> {
  const issuer = await loadIssuer(dir);
  const files = issuer.files;
  const names = await flatRecords(files.issuedDir);
  if (names.length === 0) return { moved: 0, nodes: [] };
  const listed = (await readRevoked(files.crl, issuer.intermediatePem)).serials;
  const byNode = new Map<string, (IssuedCertificate & { name: string })[]>();
  for (const name of names) {
    const record = await readRecord(files.issuedDir, name, undefined);
    byNode.set(record.nodeId, [...byNode.get(record.nodeId) ?? [], { ...record, name }]);
  }
  const nodes: MigratedNode[] = [];
  for (const [nodeId, records] of byNode) {
    nodes.push(await migrateNode(files, nodeId, records, listed));
  }
  let moved = 0;
  for (const [nodeId, records] of byNode) {
    const folder = join(files.issuedDir, nodeId);
    await Deno.mkdir(folder, { recursive: true, mode: 0o700 });
    for (const record of records) {
      await Deno.rename(join(files.issuedDir, record.name), join(folder, record.name));
      moved++;
    }
  }
  return { moved, nodes };
}

/** Writes one node's record (and marker) from its flat records, unless it has a record. */
async function migrateNode(
  files: { nodesDir: string; revokedDir: string },
  nodeId: string,
  records: readonly IssuedCertificate[],
  listed: ReadonlySet<string>,
): Promise<MigratedNode> {
  if (await readNodeEntry(files.nodesDir, nodeId)) {
    return { nodeId, revoked: false, kept: true };
  }
  const live = records.filter((record) => !listed.has(record.serial));
  const types = new Set((live.length > 0 ? live : records).map((record) => record.nodeType));
  const revoked = live.length === 0;
  const first = records.map((record) => record.issuedAt).sort()[0];
  const nodeType = types.size === 1 ? [...types][0] : undefined;
  if (nodeType === "edge" || nodeType === "door") {
    await writeNodeEntry(files.nodesDir, { nodeId, nodeType, incarnation: 1, registeredAt: first });
  }
  if (revoked && !await readRevokedMarker(files.revokedDir, nodeId)) {
    await writeRevokedMarker(files.revokedDir, {
      nodeId,
      incarnation: 1,
      revokedAt: new Date().toISOString(),
      reason: "migrated",
    });
  }
  return {
    nodeId,
    nodeType: nodeType === "edge" || nodeType === "door" ? nodeType : undefined,
    revoked,
    kept: false,
  };
}
