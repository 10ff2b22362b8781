/**
 * What the CA knows about each node apart from its certificates: `nodes/<node_id>.json`, written
 * when the node registers (its type, fixed by the secret `hub add-node` wrote, and its
 * incarnation), and `revoked/<node_id>.json`, written by `hub revoke` (the incarnation revoked,
 * when, why). Both are keyed by node id, so the hub learns a node's standing from two small files
 * instead of from its certificates' records.
 *
 * Why a node record: issue 31 found the hub taking a node's type from the issued record with the
 * highest (random) serial, revoked or not, so a node re-provisioned as a door was served tenants
 * half the time. The type is now written once per incarnation, at registration, from the secret,
 * and renewals never change it.
 *
 * Why a marker beside the CRL: the CRL lists serials, and a certificate issued while `hub revoke`
 * collected serials escaped it (issue 31: 8–12 of ~110 in a race). The marker revokes the node,
 * whatever its serials; the hub reads it before any serial check (hub/node_standing.ts).
 *
 * Why incarnations: re-provisioning a revoked id (`hub add-node --reprovision`) writes a secret
 * for the next incarnation; the node registers into it, and only certificates recorded for the
 * current incarnation (issued_index.ts) are accepted — every certificate of an earlier one is
 * useless, listed in the CRL or not. A marker revokes its incarnation and every earlier one.
 *
 * Records are written whole (pem.ts's atomic write) and read strictly: a record that does not read
 * is an error naming the file, never a skip.
 *
 * @module
 */
import { join } from "node:path";
import { readRootedText, RootedReadError } from "../config/rooted_read.ts";
import { describeIoError } from "../config/yaml_file.ts";
import { NODE_ID } from "./csr.ts";
import { writeFileAtomic } from "./pem.ts";

/** The kinds of node the CA registers. */
export type RegisteredType = "edge" | "door";

/** A node as registered: `nodes/<node_id>.json`. */
export interface NodeEntry {
  readonly nodeId: string;
  readonly nodeType: RegisteredType;
  /** 1 at the first registration, one more at each re-provisioning. */
  readonly incarnation: number;
  /** ISO 8601. */
  readonly registeredAt: string;
}

/** A revocation of a node: `revoked/<node_id>.json`. */
export interface RevokedMarker {
  readonly nodeId: string;
  /** The incarnation revoked (and every earlier one). */
  readonly incarnation: number;
  /** ISO 8601. */
  readonly revokedAt: string;
  readonly reason?: string;
}

const MAX_RECORD = 4096;

/** True when `marker` revokes the node `entry` registered (no entry: any marker does). */
export function isRevokedBy(
  entry: NodeEntry | undefined,
  marker: RevokedMarker | undefined,
): boolean {
  return marker !== undefined && marker.incarnation >= (entry?.incarnation ?? 0);
}

/** Writes a node's record (replacing the one of an earlier incarnation). */
export async function writeNodeEntry(nodesDir: string, entry: NodeEntry): Promise<void> {
  const json = {
    node_id: entry.nodeId,
    node_type: entry.nodeType,
    incarnation: entry.incarnation,
    registered_at: entry.registeredAt,
  };
  await Deno.mkdir(nodesDir, { recursive: true, mode: 0o700 });
  await writeFileAtomic(join(nodesDir, `${entry.nodeId}.json`), `${JSON.stringify(json)}\n`, {
    mode: 0o600,
    replace: true,
  });
}

/** Writes a revocation marker (replacing one of an earlier incarnation). */
export async function writeRevokedMarker(revokedDir: string, marker: RevokedMarker): Promise<void> {
  const json = {
    node_id: marker.nodeId,
    incarnation: marker.incarnation,
    revoked_at: marker.revokedAt,
    ...(marker.reason === undefined ? {} : { reason: marker.reason }),
  };
  await Deno.mkdir(revokedDir, { recursive: true, mode: 0o700 });
  await writeFileAtomic(join(revokedDir, `${marker.nodeId}.json`), `${JSON.stringify(json)}\n`, {
    mode: 0o600,
    replace: true,
  });
}

/**
 * A node's record, or undefined when it has none.
 *
 * @throws {Error} naming the file when it cannot be read or is malformed
 */
export async function readNodeEntry(
  nodesDir: string,
  nodeId: string,
): Promise<NodeEntry | undefined> {
  const json = await readRecord(nodesDir, nodeId);
  return json && entryOf(json, join(nodesDir, `${nodeId}.json`), nodeId);
}

/**
 * A node's revocation marker, or undefined when it has none.
 *
 * @throws {Error} naming the file when it cannot be read or is malformed
 */
export async function readRevokedMarker(
  revokedDir: string,
  nodeId: string,
): Promise<RevokedMarker | undefined> {
  const json = await readRecord(revokedDir, nodeId);
  return json && markerOf(json, join(revokedDir, `${nodeId}.json`), nodeId);
}

/**
 * Every `<node_id>.json` in `folder` (none when the folder does not exist), read with `read`.
 *
 * @throws {Error} naming the folder or the record that cannot be read
 */
export async function readAll<T>(
  folder: string,
  read: (folder: string, nodeId: string) => Promise<T | undefined>,
): Promise<Map<string, T>> {
  const found = new Map<string, T>();
  const ids: string[] = [];
  try {
    for await (const entry of Deno.readDir(folder)) {
      const id = entry.name.endsWith(".json") ? entry.name.slice(0, -5) : "";
      if (entry.isFile && NODE_ID.test(id)) ids.push(id);
    }
  } catch (error) {
    if (error instanceof Deno.errors.NotFound) return found;
    throw new Error(`Cannot read folder "${folder}": ${describeIoError(error)}`);
  }
  for (const id of ids.sort()) {
    const value = await read(folder, id);
    if (value !== undefined) found.set(id, value);
  }
  return found;
}

/** One record's JSON object, or undefined when the file does not exist. */
async function readRecord(
  folder: string,
  nodeId: string,
): Promise<Record<string, unknown> | undefined> {
  if (!NODE_ID.test(nodeId)) throw new RangeError(`Node id "${nodeId}" is not a node id`);
  const path = join(folder, `${nodeId}.json`);
  let text: string;
  try {
    text = await readRootedText(folder, `${nodeId}.json`, { maxBytes: MAX_RECORD });
  } catch (error) {
    if (error instanceof RootedReadError && error.reason === "missing") return undefined;
    if (error instanceof Deno.errors.NotFound) return undefined;
    throw new Error(`Cannot read "${path}": ${(error as Error).message}`);
  }
  try {
    const json = JSON.parse(text);
    if (typeof json === "object" && json !== null && !Array.isArray(json)) return json;
  } catch { /* reported below */ }
  throw new Error(`Record "${path}" is not a JSON object`);
}

function entryOf(json: Record<string, unknown>, path: string, nodeId: string): NodeEntry {
  const type = json.node_type;
  if (type !== "edge" && type !== "door") {
    throw new Error(
      `Record "${path}" has field "node_type" ${JSON.stringify(type)}, not edge/door`,
    );
  }
  return {
    nodeId: sameNode(json, path, nodeId),
    nodeType: type,
    incarnation: incarnationOf(json, path),
    registeredAt: dateOf(json, "registered_at", path),
  };
}

function markerOf(json: Record<string, unknown>, path: string, nodeId: string): RevokedMarker {
  const reason = json.reason;
  return {
    nodeId: sameNode(json, path, nodeId),
    incarnation: incarnationOf(json, path),
    revokedAt: dateOf(json, "revoked_at", path),
    ...(typeof reason === "string" ? { reason } : {}),
  };
}

function sameNode(json: Record<string, unknown>, path: string, nodeId: string): string {
  if (json.node_id !== nodeId) {
    throw new Error(`Record "${path}" names node ${JSON.stringify(json.node_id)}, not its file's`);
  }
  return nodeId;
}

/** The `incarnation` field: a whole number ≥ 1. */
export function incarnationOf(json: Record<string, unknown>, path: string): number {
  const value = json.incarnation;
  if (typeof value === "number" && Number.isSafeInteger(value) && value >= 1) return value;
  throw new Error(
    `Record "${path}" has field "incarnation" ${JSON.stringify(value)}, not 1 or more`,
  );
}

function dateOf(json: Record<string, unknown>, field: string, path: string): string {
  const value = json[field];
  if (typeof value === "string" && !Number.isNaN(Date.parse(value))) return value;
  throw new Error(`Record "${path}" has field "${field}" ${JSON.stringify(value)}, not a date`);
}
