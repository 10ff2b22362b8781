/**
 * The CA's record of what it issued: one `<serial>.json` per node certificate in the node's own
 * folder, `issued/<node_id>/`, holding the node, its type, the incarnation it was issued to
 * (node_registry.ts) and the validity. The certificate names only the node (csr.ts says why);
 * this record is how a node's certificates are listed for the CRL (crl.ts) and how the hub knows
 * which serials belong to a node's current incarnation.
 *
 * Why a folder per node: issue 31 measured one node's 552 renewals making another node's config
 * poll 50 times slower, because every poll listed and read every record of every node. Keyed by
 * node, the hub reads one node's folder (at boot, or one file when it meets a serial it does not
 * know), never the fleet's; records expired beyond a grace are pruned ({@link pruneRecords}), so a
 * folder holds what is still valid, whatever the node's renewal history. A CA made before keeps
 * the flat `issued/<serial>.json` layout until `portcullis hub migrate-ca` moves it
 * (migrate_issued.ts); the hub refuses to start on a flat layout rather than read it.
 *
 * One file per certificate, created with `link` (pem.ts), so two hubs or a hub and the CLI signing
 * at once never lose a record to a read-modify-write of a shared file, and a serial can be recorded
 * only once. A record that does not read is an error, not a skip: revoking a node must never miss
 * a certificate because its record was damaged.
 *
 * @module
 */
import { join } from "node:path";
import { readRootedText, RootedReadError } from "../config/rooted_read.ts";
import { describeIoError } from "../config/yaml_file.ts";
import { NODE_ID } from "./csr.ts";
import { incarnationOf } from "./node_registry.ts";
import { normaliseSerial, writeFileAtomic } from "./pem.ts";

/** One certificate issued to a node. */
export interface IssuedCertificate {
  serial: string;
  nodeType: string;
  /** The node's incarnation the certificate was issued to (1 for records made before there were). */
  incarnation: number;
  /** ISO 8601. */
  notAfter: string;
  /** ISO 8601. */
  issuedAt: string;
}

/** What is recorded of one issue. */
export interface IssueRecord {
  readonly serial: string;
  readonly nodeId: string;
  readonly nodeType: string;
  readonly incarnation: number;
  readonly notBefore: Date;
  readonly notAfter: Date;
  readonly issuedAt: Date;
}

/** A flat-layout record's name: `<serial>.json` directly in `issued/`. */
export const FLAT_RECORD = /^[0-9a-f]+\.json$/;

/**
 * Records an issue as `<issuedDir>/<node_id>/<serial>.json` (mode 0600, written whole; the node's
 * folder made 0700 when missing).
 *
 * @throws {Deno.errors.AlreadyExists} when the serial was recorded before
 */
export async function recordIssue(issuedDir: string, record: IssueRecord): Promise<void> {
  const json = {
    serial: record.serial,
    node_id: record.nodeId,
    node_type: record.nodeType,
    incarnation: record.incarnation,
    not_before: record.notBefore.toISOString(),
    not_after: record.notAfter.toISOString(),
    issued_at: record.issuedAt.toISOString(),
  };
  const folder = nodeFolder(issuedDir, record.nodeId);
  await Deno.mkdir(folder, { recursive: true, mode: 0o700 });
  await writeFileAtomic(
    join(folder, `${record.serial}.json`),
    `${JSON.stringify(json, null, 2)}\n`,
    {
      mode: 0o600,
      replace: false,
    },
  );
}

/**
 * Every certificate recorded for `nodeId` (every incarnation), by serial.
 *
 * @throws {Error} naming the folder or the record that cannot be read or is malformed
 */
export async function recordedFor(issuedDir: string, nodeId: string): Promise<IssuedCertificate[]> {
  const folder = nodeFolder(issuedDir, nodeId);
  const names: string[] = [];
  try {
    for await (const entry of Deno.readDir(folder)) {
      if (entry.isFile && FLAT_RECORD.test(entry.name)) names.push(entry.name);
    }
  } catch (error) {
    if (error instanceof Deno.errors.NotFound) return [];
    throw new Error(`Cannot read issued folder "${folder}": ${describeIoError(error)}`);
  }
  const found: IssuedCertificate[] = [];
  for (const name of names.sort()) found.push(await readRecord(folder, name, nodeId));
  return found;
}

/**
 * The record of one serial of `nodeId`, or undefined when there is none.
 *
 * @throws {Error} naming the record when it exists but cannot be read or is malformed
 */
export async function recordOf(
  issuedDir: string,
  nodeId: string,
  serial: string,
): Promise<IssuedCertificate | undefined> {
  const folder = nodeFolder(issuedDir, nodeId);
  try {
    return await readRecord(folder, `${normaliseSerial(serial)}.json`, nodeId);
  } catch (error) {
    const cause = (error as Error).cause;
    if (cause instanceof RootedReadError && cause.reason === "missing") return undefined;
    if (cause instanceof Deno.errors.NotFound) return undefined;
    throw error;
  }
}

/**
 * Removes the records of `serials` from the node's folder (certificates expired beyond the
 * caller's grace); a record already gone is no error.
 *
 * @returns how many were removed
 */
export async function pruneRecords(
  issuedDir: string,
  nodeId: string,
  serials: readonly string[],
): Promise<number> {
  const folder = nodeFolder(issuedDir, nodeId);
  let removed = 0;
  for (const serial of serials) {
    await Deno.remove(join(folder, `${normaliseSerial(serial)}.json`)).then(
      () => removed++,
      (error) => {
        if (!(error instanceof Deno.errors.NotFound)) throw error;
      },
    );
  }
  return removed;
}

/**
 * The flat-layout records left directly in `issued/` (a CA made before records were kept per
 * node), by name; none when the folder does not exist.
 */
export async function flatRecords(issuedDir: string): Promise<string[]> {
  const names: string[] = [];
  try {
    for await (const entry of Deno.readDir(issuedDir)) {
      if (entry.isFile && FLAT_RECORD.test(entry.name)) names.push(entry.name);
    }
  } catch (error) {
    if (error instanceof Deno.errors.NotFound) return [];
    throw new Error(`Cannot read issued folder "${issuedDir}": ${describeIoError(error)}`);
  }
  return names.sort();
}

/** The node's folder of records. */
function nodeFolder(issuedDir: string, nodeId: string): string {
  if (!NODE_ID.test(nodeId)) throw new RangeError(`Node id "${nodeId}" is not a node id`);
  return join(issuedDir, nodeId);
}

/**
 * One `<serial>.json`, its fields checked (`nodeId` undefined: any node, as the flat layout
 * holds).
 */
export async function readRecord(
  folder: string,
  name: string,
  nodeId: string | undefined,
): Promise<IssuedCertificate & { nodeId: string }> {
  const path = join(folder, name);
  let record: Record<string, unknown>;
  try {
    record = JSON.parse(await readRootedText(folder, name, { maxBytes: 4096 }));
  } catch (error) {
    throw new Error(`Cannot read issued record "${path}": ${(error as Error).message}`, {
      cause: error,
    });
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
  const dates = ["not_after", "issued_at"].map((field) => {
    const value = text(field);
    if (Number.isNaN(Date.parse(value))) {
      throw new Error(`Issued record "${path}" has field "${field}" "${value}", not a date`);
    }
    return value;
  });
  const owner = text("node_id");
  if (nodeId !== undefined && owner !== nodeId) {
    throw new Error(`Issued record "${path}" names node "${owner}", not its folder's`);
  }
  return {
    serial,
    nodeId: owner,
    nodeType: text("node_type"),
    incarnation: record.incarnation === undefined ? 1 : incarnationOf(record, path),
    notAfter: dates[0],
    issuedAt: dates[1],
  };
}
