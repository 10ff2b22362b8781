/**
 * The fleet's certificate revocation list: `crl.pem` in the CA folder, signed by the intermediate.
 * The hub reads it ({@link readRevoked}) to refuse revoked node certificates; `portcullis hub
 * revoke` marks the node revoked and adds its certificates to it ({@link revokeNode}).
 *
 * A CRL is only believed when the intermediate's key signed it: a hub that took any well-formed
 * CRL would let whoever can write `crl.pem` un-revoke a node by replacing the list (or revoke the
 * fleet). It is rewritten whole (pem.ts's atomic write: a temporary file, synced, renamed over the
 * list), so a hub re-reading it mid-rewrite — or after a `revoke` killed at any step — sees the old
 * list or the new one, never a part. Revocation keeps every earlier entry, including entries for
 * certificates that have since expired: the list only grows (see `revokeNode`).
 *
 * The hub keeps a copy of the last list it read and verified ({@link keepLastGoodCrl}, in the
 * CA's `hub-state/`, the one place of the CA the hub may write) and serves with it when `crl.pem`
 * is damaged at boot (hub/revocation.ts). The copy is believed on the same terms as the list: only
 * when the intermediate signed it. `revokeNode` starts from it too when `crl.pem` cannot be read,
 * so a revocation also repairs a damaged list.
 *
 * @module
 */
import "reflect-metadata";
import * as x509 from "@peculiar/x509";
import { readNamedFile } from "../config/rooted_read.ts";
import { dirname, join } from "node:path";
import { issuedFor, type Issuer, loadIssuer } from "./ca.ts";
import { readNodeEntry, readRevokedMarker, writeRevokedMarker } from "./node_registry.ts";
import { readNodeSecretFile } from "./node_secrets.ts";
import { normaliseSerial, pemOf, writeFileAtomic } from "./pem.ts";
import { CRL_DAYS, type CrlEntry, parseCertificate, signCrl } from "./signing.ts";

/** One certificate to list as revoked. */
export interface Revocation {
  /** Hex, any case. */
  readonly serial: string;
  readonly at: Date;
  /** An RFC 5280 reason code name: `keyCompromise`, `superseded`, `cessationOfOperation`, … */
  readonly reason?: string;
}

/** What {@link writeCrl} may be told. */
export interface WriteCrlOptions {
  readonly now?: Date;
  /** Days until `nextUpdate`; 7 by default. */
  readonly nextUpdateDays?: number;
}

const DAY_MS = 86_400_000;
const MAX_CRL_BYTES = 8 * 1024 * 1024;

/** The reason code names a revocation may give (RFC 5280 §5.3.1, less `removeFromCRL`). */
const REASONS: Readonly<Record<string, x509.X509CrlReason>> = {
  unspecified: x509.X509CrlReason.unspecified,
  keyCompromise: x509.X509CrlReason.keyCompromise,
  cACompromise: x509.X509CrlReason.cACompromise,
  affiliationChanged: x509.X509CrlReason.affiliationChanged,
  superseded: x509.X509CrlReason.superseded,
  cessationOfOperation: x509.X509CrlReason.cessationOfOperation,
  certificateHold: x509.X509CrlReason.certificateHold,
  privilegeWithdrawn: x509.X509CrlReason.privilegeWithdrawn,
  aACompromise: x509.X509CrlReason.aACompromise,
};

/**
 * Signs a CRL listing `revoked` with the intermediate and writes it to the CA's `crl.pem` (whole,
 * mode 0644). A serial listed twice is listed once, with its first date and reason.
 *
 * @throws {RangeError} for a reason that is not a reason code name, or a serial that is not hex
 */
export async function writeCrl(
  issuer: Issuer,
  revoked: readonly Revocation[],
  options: WriteCrlOptions = {},
): Promise<void> {
  const entries = revoked.map((entry) => ({
    serial: serialOf(entry.serial),
    at: entry.at,
    reason: reasonCode(entry.reason),
  }));
  await writeEntries(issuer, entries, options);
}

async function writeEntries(
  issuer: Issuer,
  entries: readonly CrlEntry[],
  options: WriteCrlOptions,
): Promise<void> {
  const now = options.now ?? new Date();
  const days = options.nextUpdateDays ?? CRL_DAYS;
  if (!(Number.isFinite(days) && days > 0)) {
    throw new RangeError(`Next update ${days} is not a positive number of days`);
  }
  const unique = new Map<string, CrlEntry>();
  for (const entry of entries) if (!unique.has(entry.serial)) unique.set(entry.serial, entry);
  const pem = await signCrl(issuer, [...unique.values()], {
    thisUpdate: now,
    nextUpdate: new Date(now.getTime() + days * DAY_MS),
  });
  await writeFileAtomic(issuer.files.crl, pem, { mode: 0o644, replace: true });
}

/** A CRL read and verified: its serials, `thisUpdate`, and its text (to keep a copy of). */
export interface RevokedList {
  /** The serials, in pem.ts's `normaliseSerial` spelling. */
  readonly serials: ReadonlySet<string>;
  readonly thisUpdate: Date;
  readonly text: string;
}

/**
 * The serials a CRL lists, once its signature verifies with the intermediate's key.
 *
 * @param crlPath the CRL, PEM (`X509 CRL`)
 * @param intermediatePem the certificate whose key must have signed it
 * @throws {Error} naming the file, when it cannot be read, does not parse, or was not signed by
 *   the intermediate
 */
export async function readRevoked(crlPath: string, intermediatePem: string): Promise<RevokedList> {
  const intermediate = parseCertificate(intermediatePem, "Intermediate certificate");
  const crl = await readCrl(crlPath, intermediate);
  const serials = new Set(crl.entries.map((e) => e.serial));
  return { serials, thisUpdate: crl.thisUpdate, text: crl.text };
}

/**
 * Keeps `text` — a CRL just read and verified — as the hub's last good copy at `path`: written
 * whole (pem.ts's atomic write), its folder made when missing (mode 0700).
 */
export async function keepLastGoodCrl(path: string, text: string): Promise<void> {
  await Deno.mkdir(dirname(path), { recursive: true, mode: 0o700 });
  await writeFileAtomic(path, text, { mode: 0o644, replace: true });
}

/** A CRL read and verified: its entries, `thisUpdate` and text. */
async function readCrl(
  path: string,
  intermediate: x509.X509Certificate,
): Promise<{ entries: CrlEntry[]; thisUpdate: Date; text: string }> {
  const text = await readNamedFile(path, "CRL", { maxBytes: MAX_CRL_BYTES });
  let crl: x509.X509Crl;
  let entries: CrlEntry[];
  try {
    crl = new x509.X509Crl(pemOf(text, "X509 CRL")[0]);
    entries = crl.entries.map((entry) => ({
      serial: normaliseSerial(entry.serialNumber),
      at: entry.revocationDate,
      reason: entry.reason,
    }));
  } catch (error) {
    throw new Error(`CRL "${path}" does not parse: ${(error as Error).message}`);
  }
  const signed = crl.issuer === intermediate.subject &&
    await crl.verify({ publicKey: intermediate.publicKey }, crypto).catch(() => false);
  if (!signed) {
    throw new Error(`CRL "${path}" is not signed by intermediate "${intermediate.subject}"`);
  }
  return { entries, thisUpdate: crl.thisUpdate, text };
}

/**
 * Revokes a node: first its marker (`revoked/<node_id>.json`, node_registry.ts), which the hub
 * reads before any serial check, then every certificate the CA in `dir` issued to it — each serial
 * not already listed joins the CRL's earlier entries, dated now — and the CRL is signed and
 * written again (also when nothing was added, so a hub watching the file looks at once). A
 * registration secret waiting for the node is removed.
 *
 * Why in this order: the hub signs a renewal, records its serial, then reads the marker again and
 * refuses to answer when it finds one (hub/enrolment.ts). A serial recorded before the marker was
 * written is recorded before the serials are collected, so it is listed; one recorded after is
 * never handed out. Either way no certificate of the node escapes (issue 31 found 8–12 of ~110 in
 * a race between renewals and the old serial-only revoke).
 *
 * The marker revokes the node's current incarnation (the registered one, or the one a waiting
 * secret would register) and every earlier one; `hub add-node --reprovision` makes the next.
 *
 * Not safe against a concurrent revocation in another process (each reads, adds and writes the
 * list; the later write wins): run one `revoke` at a time.
 *
 * A `crl.pem` that cannot be read or verified (cut short, its signature wrong) is rebuilt from the
 * hub's last good copy (`hub-state/crl.last-good.pem`, verified alike) plus this node's serials;
 * entries only the damaged list held are lost with it (every node `revoke` revoked is still
 * refused by its marker; revoking such a node again lists its serials again).
 *
 * @returns the serials newly listed (none when all were listed already), the incarnation revoked,
 *   and — when `crl.pem` was rebuilt from the copy — why it could not be read
 * @throws {Error} when the node has no recorded certificate, no record and no waiting secret, or
 *   the CA or its CRL cannot be read
 * @throws {RangeError} for a reason that is not a reason code name
 */
export async function revokeNode(
  dir: string,
  nodeId: string,
  reason?: string,
): Promise<{ serials: string[]; incarnation: number; rebuilt?: string }> {
  const code = reasonCode(reason);
  const issuer = await loadIssuer(dir);
  const files = issuer.files;
  const entry = await readNodeEntry(files.nodesDir, nodeId);
  const earlier = await readRevokedMarker(files.revokedDir, nodeId);
  const waiting = await waitingSecret(files.secretsDir, nodeId);
  if (!entry && !waiting && (await issuedFor(dir, nodeId)).length === 0) {
    throw new Error(
      `Node "${nodeId}" has no certificate recorded in "${files.issuedDir}", no record in ` +
        `"${files.nodesDir}" and no registration secret waiting`,
    );
  }
  const now = new Date();
  const incarnation = Math.max(
    entry?.incarnation ?? 1,
    waiting?.incarnation ?? 1,
    earlier?.incarnation ?? 1,
  );
  const marker = { nodeId, incarnation, revokedAt: now.toISOString(), reason };
  // 1. The marker: from here on the hub answers no registration or renewal of this node.
  await writeRevokedMarker(files.revokedDir, marker);
  if (waiting) await Deno.remove(waiting.file).catch(() => {});
  // 2. The serials, read after the marker is on disk.
  const issued = await issuedFor(dir, nodeId);
  // 3. The CRL (or, when it is damaged, the hub's last good copy of it).
  const current = await readCrl(files.crl, issuer.cert).catch(async (error: Error) => ({
    ...await readCrl(files.lastGoodCrl, issuer.cert).catch(() => Promise.reject(error)),
    rebuilt: error.message,
  }));
  const listed = new Set(current.entries.map((entry) => entry.serial));
  const added = issued.map((record) => normaliseSerial(record.serial))
    .filter((serial) => !listed.has(serial));
  const entries = added.map((serial) => ({ serial, at: now, reason: code }));
  await writeEntries(issuer, [...current.entries, ...entries], { now });
  const rebuilt = "rebuilt" in current ? { rebuilt: current.rebuilt } : {};
  return { serials: added, incarnation, ...rebuilt };
}

/** The node's registration secret waiting to be used, with the incarnation it would register. */
async function waitingSecret(
  secretsDir: string,
  nodeId: string,
): Promise<{ file: string; incarnation: number } | undefined> {
  const file = join(secretsDir, `${nodeId}.secret`);
  try {
    return { file, incarnation: (await readNodeSecretFile(file)).incarnation };
  } catch (error) {
    if (await Deno.lstat(file).then(() => false, () => true)) return undefined;
    throw error;
  }
}

function serialOf(serial: string): string {
  try {
    return normaliseSerial(serial);
  } catch (error) {
    throw new RangeError((error as Error).message);
  }
}

function reasonCode(reason: string | undefined): x509.X509CrlReason | undefined {
  if (reason === undefined) return undefined;
  if (Object.hasOwn(REASONS, reason)) return REASONS[reason];
  const names = Object.keys(REASONS).map((name) => `"${name}"`).join(", ");
  throw new RangeError(`Revocation reason "${reason}" is not one of ${names}`);
}
