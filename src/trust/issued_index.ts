/**
 * The CA's record of what it issued: one `<serial>.json` per node certificate in the CA's
 * `issued/` folder, holding the node, its type and the validity. The certificate names only the
 * node (csr.ts says why); this record is how a node is revoked by id (crl.ts) and how the hub
 * learns a node's type.
 *
 * One file per certificate, created with `link` (pem.ts), so two hubs or a hub and the CLI signing
 * at once never lose a record to a read-modify-write of a shared file, and a serial can be recorded
 * only once. A record that does not read is an error, not a skip: revoking a node must never miss
 * a certificate because its record was damaged.
 *
 * @module
 */
import { join } from "node:path";
import { readRootedText } from "../config/rooted_read.ts";
import { describeIoError } from "../config/yaml_file.ts";
import { normaliseSerial, writeFileAtomic } from "./pem.ts";

/** One certificate issued to a node. */
export interface IssuedCertificate {
  serial: string;
  nodeType: string;
  /** ISO 8601. */
  notAfter: string;
}

/** What is recorded of one issue. */
export interface IssueRecord {
  readonly serial: string;
  readonly nodeId: string;
  readonly nodeType: string;
  readonly notBefore: Date;
  readonly notAfter: Date;
  readonly issuedAt: Date;
}

/**
 * Records an issue as `<folder>/<serial>.json` (mode 0600, written whole).
 *
 * @throws {Deno.errors.AlreadyExists} when the serial was recorded before
 */
export async function recordIssue(folder: string, record: IssueRecord): Promise<void> {
  const json = {
    serial: record.serial,
    node_id: record.nodeId,
    node_type: record.nodeType,
    not_before: record.notBefore.toISOString(),
    not_after: record.notAfter.toISOString(),
    issued_at: record.issuedAt.toISOString(),
  };
  const path = join(folder, `${record.serial}.json`);
  await writeFileAtomic(path, `${JSON.stringify(json, null, 2)}\n`, {
    mode: 0o600,
    replace: false,
  });
}

/**
 * Every certificate recorded in `folder` for `nodeId`, by serial.
 *
 * @throws {Error} naming the folder or the record that cannot be read or is malformed
 */
export async function recordedFor(folder: string, nodeId: string): Promise<IssuedCertificate[]> {
  const names: string[] = [];
  try {
    for await (const entry of Deno.readDir(folder)) {
      if (entry.isFile && /^[0-9a-f]+\.json$/.test(entry.name)) names.push(entry.name);
    }
  } catch (error) {
    throw new Error(`Cannot read issued folder "${folder}": ${describeIoError(error)}`);
  }
  const found: IssuedCertificate[] = [];
  for (const name of names.sort()) {
    const record = await readRecord(folder, name);
    if (record.node_id === nodeId) {
      found.push({ serial: record.serial, nodeType: record.node_type, notAfter: record.not_after });
    }
  }
  return found;
}

/** One `<serial>.json`, its fields checked. */
async function readRecord(
  folder: string,
  name: string,
): Promise<{ serial: string; node_id: string; node_type: string; not_after: string }> {
  const path = join(folder, name);
  let record: Record<string, unknown>;
  try {
    record = JSON.parse(await readRootedText(folder, name, { maxBytes: 4096 }));
  } catch (error) {
    throw new Error(`Cannot read issued record "${path}": ${(error as Error).message}`);
  }
  const text = (field: string) => {
    const value = record?.[field];
    if (typeof value === "string" && value !== "") return value;
    throw new Error(`Issued record "${path}" has no field "${field}"`);
  };
  const serial = text("serial");
  if (!/^[0-9a-f]+$/.test(serial) || `${normaliseSerial(serial)}.json` !== name) {
    throw new Error(`Issued record "${path}" names serial "${serial}", not its file's`);
  }
  const notAfter = text("not_after");
  if (Number.isNaN(Date.parse(notAfter))) {
    throw new Error(`Issued record "${path}" has field "not_after" "${notAfter}", not a date`);
  }
  return { serial, node_id: text("node_id"), node_type: text("node_type"), not_after: notAfter };
}
