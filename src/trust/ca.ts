/**
 * The hub's certificate authority for its fleet: a root, an intermediate the root signed, and the
 * hub's own server certificate, in one folder ({@link caFiles}). The hub runs with the intermediate
 * only — {@link loadIssuer} never reads `root.key`, so the root key can be moved offline once
 * {@link initCa} has made it — and signs each node's request ({@link signNodeCsr}) into a client
 * certificate whose subject is the node id and nothing else (csr.ts says why).
 *
 * Every CA key is ECDSA P-256 signed with SHA-256: rustls (Deno's TLS, on both ends) verifies it,
 * and a chain stays small. Serials are 16 random bytes whose first is 0x01–0x7f: positive and never
 * padded, so the hex `@peculiar/x509` shows is the hex generated, and one spelling (pem.ts's
 * `normaliseSerial`) holds across certificates, the issued index and the CRL. Each issue is
 * recorded in `issued/<node_id>/<serial>.json` with its node, node type and incarnation, so a
 * node can be revoked by id (crl.ts); the certificate itself names only the node. What a node is
 * (its type, its incarnation, whether it is revoked) lives in `nodes/` and `revoked/`
 * (node_registry.ts), never in these records.
 *
 * A CA is never overwritten: {@link initCa} refuses a folder that holds any of its files, and links
 * each file into place, which fails where a concurrent run got there first.
 *
 * @module
 */
import "reflect-metadata";
import * as x509 from "@peculiar/x509";
import { isIP } from "node:net";
import { join } from "node:path";
import { readNamedFile } from "../config/rooted_read.ts";
import { describeIoError } from "../config/yaml_file.ts";
import { type CsrRefusal, judgeNodeCsr, NODE_ID } from "./csr.ts";
import { type IssuedCertificate, recordedFor, recordIssue } from "./issued_index.ts";
import { certificateSerial, writeFileAtomic } from "./pem.ts";
import {
  certificatePem,
  certify,
  CRL_DAYS,
  newKeys,
  parseCertificate,
  privateKeyPem,
  signCrl,
  signingKeyOf,
} from "./signing.ts";

export type { CsrRefusal } from "./csr.ts";
export type { IssuedCertificate } from "./issued_index.ts";
export { certificateNotAfter, certificateSerial } from "./pem.ts";

/**
 * The files of a CA folder.
 *
 * @internal
 */
export interface CaFiles {
  dir: string;
  rootCert: string;
  rootKey: string;
  intermediateCert: string;
  intermediateKey: string;
  /** The hub's server certificate followed by the intermediate. */
  hubCert: string;
  hubKey: string;
  crl: string;
  /** One `<node_id>/<serial>.json` per certificate issued to a node. */
  issuedDir: string;
  /** One-time registration secrets (node_secrets.ts). */
  secretsDir: string;
  /** One `<node_id>.json` per registered node: its type and incarnation (node_registry.ts). */
  nodesDir: string;
  /** One `<node_id>.json` per revoked node, written by `hub revoke` (node_registry.ts). */
  revokedDir: string;
  /**
   * What the hub writes for itself: the last CRL it read and verified (`crl.last-good.pem`,
   * crl.ts), which it serves with when `crl.pem` is damaged. The hub may write here and never to
   * `crl.pem`.
   */
  hubStateDir: string;
  /** The hub's verified copy of the last good CRL, in {@link CaFiles.hubStateDir}. */
  lastGoodCrl: string;
}

/** The paths of the CA in `dir`. */
export function caFiles(dir: string): CaFiles {
  return {
    dir,
    rootCert: join(dir, "root.crt"),
    rootKey: join(dir, "root.key"),
    intermediateCert: join(dir, "intermediate.crt"),
    intermediateKey: join(dir, "intermediate.key"),
    hubCert: join(dir, "hub.crt"),
    hubKey: join(dir, "hub.key"),
    crl: join(dir, "crl.pem"),
    issuedDir: join(dir, "issued"),
    secretsDir: join(dir, "secrets"),
    nodesDir: join(dir, "nodes"),
    revokedDir: join(dir, "revoked"),
    hubStateDir: join(dir, "hub-state"),
    lastGoodCrl: join(dir, "hub-state", "crl.last-good.pem"),
  };
}

/** The intermediate, ready to sign: what the hub holds of its CA. */
export interface Issuer {
  readonly files: CaFiles;
  readonly rootPem: string;
  readonly intermediatePem: string;
  /** The intermediate certificate, parsed. */
  readonly cert: x509.X509Certificate;
  /** The intermediate's private key (sign only, not extractable). */
  readonly key: CryptoKey;
}

/** Options for {@link initCa}; lifetimes in days. */
export interface InitCaOptions {
  /** The hub's names: IP literals become IP SANs, others DNS SANs; the first is the CN. */
  names: readonly string[];
  now?: Date;
  /** 3650 by default. */
  rootDays?: number;
  /** 1825 by default, and never past the root's end. */
  intermediateDays?: number;
  /** 365 by default, and never past the intermediate's end. */
  hubDays?: number;
  /**
   * What the CA certificates' common names start with ({@link DEFAULT_CA_LABEL} by default):
   * every prober of a mutual-TLS listener reads them (the issuer, the accepted CA names), so the
   * default names no product.
   */
  label?: string;
}

/** The CA certificates' names by default: `fleet root`, `fleet intermediate`. */
export const DEFAULT_CA_LABEL = "fleet";

/** What a node asks {@link signNodeCsr} for. */
export interface NodeCsrRequest {
  csrPem: string;
  nodeId: string;
  nodeType: "edge" | "door";
  /** The node's incarnation the certificate is issued to (node_registry.ts); 1 by default. */
  incarnation?: number;
  lifetimeDays: number;
  now?: Date;
}

/** A node's certificate and its intermediate, or why its request was refused. */
export type SignResult =
  | { ok: true; chainPem: string; serial: string; notAfter: Date }
  | { ok: false; reason: CsrRefusal; detail: string };

const DAY_MS = 86_400_000;
/**
 * How far back `notBefore` is set, for clocks behind the hub's: a node certificate was issued at
 * `notBefore + SKEW_MS` (live/node_pair.ts tells a pending certificate from an older secret by it).
 */
export const SKEW_MS = 5 * 60_000;
const CA_USAGE = x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign;
const MAX_PEM = 64 * 1024;

/** `label`, checked: printable ASCII a common name can hold, no characters of a DN's syntax. */
function caLabel(label: string): string {
  if (!/^[A-Za-z0-9][A-Za-z0-9 ._-]{0,47}$/.test(label)) {
    throw new RangeError(
      `A CA label is 1-48 letters, digits, spaces, dots, dashes or underscores, not ${
        JSON.stringify(label)
      }`,
    );
  }
  return label;
}

/**
 * Makes a CA in `dir` (created 0700, with `issued/`, `secrets/`, `nodes/`, `revoked/` 0700): root, intermediate, the
 * hub's server certificate for `names` (`hub.crt` holds it and the intermediate), and an empty
 * CRL. Keys are written 0600, certificates and the CRL 0644.
 *
 * @throws {RangeError} when `names` is empty or holds something neither a DNS name nor an IP, or
 *   a lifetime is not a positive number of days
 * @throws {Error} naming the file, when any file of a CA already exists in `dir`
 */
export async function initCa(dir: string, options: InitCaOptions): Promise<CaFiles> {
  const names = options.names.map(hubName);
  if (names.length === 0) throw new RangeError("A CA needs at least one name for the hub");
  const label = caLabel(options.label ?? DEFAULT_CA_LABEL);
  const files = caFiles(dir);
  await refuseExisting(files);
  const now = options.now ?? new Date();
  const notBefore = new Date(now.getTime() - SKEW_MS);
  const until = (days: number, cap?: x509.X509Certificate) =>
    new Date(Math.min(now.getTime() + lifetimeMs(days), cap?.notAfter.getTime() ?? Infinity));
  const [rootKeys, middleKeys, hubKeys] = await Promise.all([newKeys(), newKeys(), newKeys()]);
  const root = await certify({
    subject: `${label} root`,
    publicKey: rootKeys.publicKey,
    signingKey: rootKeys.privateKey,
    extensions: [new x509.BasicConstraintsExtension(true, undefined, true)],
    usage: CA_USAGE,
    notBefore,
    notAfter: until(options.rootDays ?? 3650),
  });
  const intermediate = await certify({
    subject: `${label} intermediate`,
    publicKey: middleKeys.publicKey,
    signingKey: rootKeys.privateKey,
    issuer: root,
    extensions: [new x509.BasicConstraintsExtension(true, 0, true)],
    usage: CA_USAGE,
    notBefore,
    notAfter: until(options.intermediateDays ?? 1825, root),
  });
  const hub = await certify({
    subject: names[0].value,
    publicKey: hubKeys.publicKey,
    signingKey: middleKeys.privateKey,
    issuer: intermediate,
    extensions: [
      new x509.BasicConstraintsExtension(false, undefined, true),
      new x509.ExtendedKeyUsageExtension([x509.ExtendedKeyUsage.serverAuth]),
      new x509.SubjectAlternativeNameExtension(names),
    ],
    usage: x509.KeyUsageFlags.digitalSignature,
    notBefore,
    notAfter: until(options.hubDays ?? 365, intermediate),
  });
  const signer = { cert: intermediate, key: middleKeys.privateKey };
  const crl = await signCrl(signer, [], { thisUpdate: now, nextUpdate: until(CRL_DAYS) });
  await makeFolders(files);
  const secret = { mode: 0o600, replace: false };
  const open = { mode: 0o644, replace: false };
  await writeFileAtomic(files.rootKey, await privateKeyPem(rootKeys.privateKey), secret);
  await writeFileAtomic(files.intermediateKey, await privateKeyPem(middleKeys.privateKey), secret);
  await writeFileAtomic(files.hubKey, await privateKeyPem(hubKeys.privateKey), secret);
  await writeFileAtomic(files.rootCert, certificatePem(root), open);
  await writeFileAtomic(files.intermediateCert, certificatePem(intermediate), open);
  await writeFileAtomic(files.hubCert, certificatePem(hub) + certificatePem(intermediate), open);
  await writeFileAtomic(files.crl, crl, open);
  return files;
}

/** A lifetime in days as milliseconds. */
function lifetimeMs(days: number): number {
  if (!(Number.isFinite(days) && days > 0)) {
    throw new RangeError(`Lifetime ${days} is not a positive number of days`);
  }
  return days * DAY_MS;
}

/** A hub name as a SAN: an IP literal is an IP name, anything else must be a DNS name. */
function hubName(name: string): x509.JsonGeneralName {
  if (isIP(name) !== 0) return { type: "ip", value: name };
  const label = "[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?";
  if (name.length <= 253 && new RegExp(`^${label}(?:\\.${label})*$`).test(name)) {
    return { type: "dns", value: name };
  }
  throw new RangeError(`Hub name "${name}" is neither a DNS name nor an IP address`);
}

/** Refuses a folder that holds any file of a CA. */
async function refuseExisting(files: CaFiles): Promise<void> {
  const keys = [files.rootKey, files.intermediateKey, files.hubKey];
  for (const path of [files.rootCert, files.intermediateCert, files.hubCert, files.crl, ...keys]) {
    const exists = await Deno.lstat(path).then(() => true, (error) => {
      if (error instanceof Deno.errors.NotFound) return false;
      throw new Error(`Cannot check "${path}": ${describeIoError(error)}`);
    });
    if (exists) throw new Error(`File "${path}" already exists; a CA is never overwritten`);
  }
}

/** The CA folder and its subfolders, 0700 whatever the umask. */
async function makeFolders(files: CaFiles): Promise<void> {
  const { dir, issuedDir, secretsDir, nodesDir, revokedDir, hubStateDir } = files;
  for (const folder of [dir, issuedDir, secretsDir, nodesDir, revokedDir, hubStateDir]) {
    await Deno.mkdir(folder, { recursive: true, mode: 0o700 });
    await Deno.chmod(folder, 0o700);
  }
}

/**
 * Reads the intermediate of the CA in `dir`: its certificate (which the root must have signed),
 * its key (a secret: mode 0600 or 0400, and the key of that certificate) and the root's
 * certificate. `root.key` is not read.
 *
 * @throws {Error} naming the file and what is wrong with it
 */
export async function loadIssuer(dir: string): Promise<Issuer> {
  const files = caFiles(dir);
  const [rootPem, intermediatePem, keyText] = await Promise.all([
    readNamedFile(files.rootCert, "Root certificate", { maxBytes: MAX_PEM }),
    readNamedFile(files.intermediateCert, "Intermediate certificate", { maxBytes: MAX_PEM }),
    readNamedFile(files.intermediateKey, "Intermediate key", { maxBytes: MAX_PEM, secret: true }),
  ]);
  const root = parseCertificate(rootPem, `Root certificate "${files.rootCert}"`);
  const what = `Intermediate certificate "${files.intermediateCert}"`;
  const cert = parseCertificate(intermediatePem, what);
  const signed = await cert.verify({ publicKey: root.publicKey, signatureOnly: true }, crypto)
    .catch(() => false);
  if (!signed) throw new Error(`${what} is not signed by root certificate "${files.rootCert}"`);
  if (!cert.getExtension(x509.BasicConstraintsExtension)?.ca) {
    throw new Error(`${what} is not a CA certificate`);
  }
  const key = await signingKeyOf(keyText, cert, `Intermediate key "${files.intermediateKey}"`);
  return {
    files,
    rootPem: certificatePem(root),
    intermediatePem: certificatePem(cert),
    cert,
    key,
  };
}

/**
 * Judges a node's request (csr.ts) and, when it passes, issues the node a client certificate:
 * subject `CN=<nodeId>` only, CA:false, digitalSignature, clientAuth, valid from 5 minutes before
 * `now` for `lifetimeDays` (never past the intermediate's end). The issue is recorded in
 * `issued/<node_id>/<serial>.json` with the incarnation asked for.
 *
 * @returns the leaf and the intermediate as PEM, the serial and the end; or why the request was
 *   refused
 * @throws {RangeError} when `nodeId`, `nodeType` or `lifetimeDays` is not one
 * @throws {Error} when the intermediate has expired, or the record cannot be written
 */
export async function signNodeCsr(issuer: Issuer, request: NodeCsrRequest): Promise<SignResult> {
  const { nodeId, nodeType } = request;
  if (!NODE_ID.test(nodeId)) throw new RangeError(`Node id "${nodeId}" is not a node id`);
  if (nodeType !== "edge" && nodeType !== "door") {
    throw new RangeError(`Node type "${nodeType}" is not "edge" or "door"`);
  }
  const lifetime = lifetimeMs(request.lifetimeDays);
  const judged = await judgeNodeCsr(request.csrPem, nodeId);
  if (!judged.ok) return { ok: false, reason: judged.reason, detail: judged.detail };
  const now = request.now ?? new Date();
  const end = issuer.cert.notAfter.getTime();
  if (now.getTime() >= end) {
    throw new Error(
      `Intermediate certificate "${issuer.files.intermediateCert}" expired at ${issuer.cert.notAfter.toISOString()}`,
    );
  }
  const cert = await certify({
    subject: nodeId,
    publicKey: judged.request.publicKey,
    signingKey: issuer.key,
    issuer: issuer.cert,
    extensions: [
      new x509.BasicConstraintsExtension(false, undefined, true),
      new x509.ExtendedKeyUsageExtension([x509.ExtendedKeyUsage.clientAuth]),
    ],
    usage: x509.KeyUsageFlags.digitalSignature,
    notBefore: new Date(now.getTime() - SKEW_MS),
    notAfter: new Date(Math.min(now.getTime() + lifetime, end)),
  });
  const serial = certificateSerial(new Uint8Array(cert.rawData));
  await recordIssue(issuer.files.issuedDir, {
    serial,
    nodeId,
    nodeType,
    incarnation: request.incarnation ?? 1,
    notBefore: cert.notBefore,
    notAfter: cert.notAfter,
    issuedAt: now,
  });
  const chainPem = certificatePem(cert) + issuer.intermediatePem;
  return { ok: true, chainPem, serial, notAfter: cert.notAfter };
}

/**
 * Every certificate the CA in `dir` issued to `nodeId` (every incarnation), from
 * `issued/<node_id>/*.json`, by serial.
 *
 * @throws {Error} naming the folder or the record that cannot be read or is malformed
 */
export async function issuedFor(dir: string, nodeId: string): Promise<IssuedCertificate[]> {
  return await recordedFor(caFiles(dir).issuedDir, nodeId);
}
