/**
 * What a spent registration secret still answers: `<secrets>/<node_id>.spent`, written by the hub
 * when a registration succeeds, so a node whose answer never arrived (a timeout, a crash before
 * the certificate was on disk) can ask again with the same secret and the same key, and get the
 * same certificate — for a short window (`ca.registration_retry_seconds`), and never for another
 * key.
 *
 * Why this, and not "the secret is spent once the certificate is first used": a secret that stays
 * good until first use lets whoever copied it register keys of their own until the node shows up,
 * each getting a certificate; here the secret is spent at once and buys exactly one certificate,
 * for one key, which only the node that made the key can use. Issue 31 found a door whose first
 * attempt failed after the secret was spent (it could not write its key); the node now writes its
 * key before it presents the secret (live/enrol.ts), so a retry has the key to ask with.
 *
 * The record holds digests, never the secret: SHA-256 of the secret (32 random bytes, so the digest
 * cannot be searched back) and SHA-256 of the key's SubjectPublicKeyInfo, with the serial and the
 * certificate chain (public) and when the window ends. It is read with the secrets (node_secrets.ts
 * compares it in constant time like a secret) and removed once its window has passed.
 *
 * @module
 */
import { join } from "node:path";
import { NODE_ID } from "./csr.ts";
import { writeFileAtomic } from "./pem.ts";
import { recordFields } from "./record_fields.ts";

/** A registration the hub answered, as a retry may get it again. */
export interface SpentSecret {
  readonly nodeId: string;
  readonly nodeType: "edge" | "door";
  readonly incarnation: number;
  /** SHA-256 of the secret, hex. */
  readonly secretSha256: string;
  /** SHA-256 of the key's SubjectPublicKeyInfo (DER), hex. */
  readonly keySha256: string;
  readonly serial: string;
  /** The certificate and the intermediate, PEM, as the first answer held them. */
  readonly certificate: string;
  /** ISO 8601: after this the record answers nothing. */
  readonly until: string;
}

/** The suffix of a spent record in the secrets folder. */
export const SPENT_SUFFIX = ".spent";

/** SHA-256 of text or bytes, as lowercase hex. */
export async function sha256Hex(data: string | Uint8Array): Promise<string> {
  const bytes = typeof data === "string" ? new TextEncoder().encode(data) : Uint8Array.from(data);
  const digest = await crypto.subtle.digest("SHA-256", bytes);
  return Array.from(new Uint8Array(digest), (b) => b.toString(16).padStart(2, "0")).join("");
}

/** Writes (or replaces) a node's spent record, mode 0600. */
export async function writeSpent(secretsDir: string, spent: SpentSecret): Promise<void> {
  const json = {
    node_id: spent.nodeId,
    node_type: spent.nodeType,
    incarnation: spent.incarnation,
    secret_sha256: spent.secretSha256,
    key_sha256: spent.keySha256,
    serial: spent.serial,
    certificate: spent.certificate,
    until: spent.until,
  };
  await writeFileAtomic(join(secretsDir, `${spent.nodeId}${SPENT_SUFFIX}`), JSON.stringify(json), {
    mode: 0o600,
    replace: true,
  });
}

/**
 * A spent record's fields; errors start with `what`.
 *
 * @throws {Error} naming the field that is missing or malformed
 */
export function parseSpent(text: string, what: string): SpentSecret {
  const record = recordFields(text, what);
  const field = record.text;
  const incarnation = record.count("incarnation");
  const until = field("until", /^[0-9TZ:.+-]{10,40}$/);
  if (Number.isNaN(Date.parse(until))) throw new Error(`${what} has no valid field "until"`);
  return {
    nodeId: field("node_id", NODE_ID),
    nodeType: field("node_type", /^(edge|door)$/) as "edge" | "door",
    incarnation,
    secretSha256: field("secret_sha256", /^[0-9a-f]{64}$/),
    keySha256: field("key_sha256", /^[0-9a-f]{64}$/),
    serial: field("serial", /^[0-9a-f]{2,64}$/),
    certificate: field("certificate", /^-----BEGIN CERTIFICATE-----/),
    until,
  };
}
