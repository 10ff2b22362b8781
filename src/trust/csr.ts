/**
 * Certificate signing requests, from both ends: a node makes its key and a request naming only
 * itself ({@link makeNodeKeyAndCsr}); the hub judges a request before its CA signs anything
 * ({@link judgeNodeCsr}).
 *
 * Why the judgement is this strict: the hub's mutual-TLS check (hub/auth.ts) takes a node to be
 * the one CN of its certificate, character for character, and issue 14 found certificates with two
 * CNs accepted as the first. The CA is where that is cheapest to stop: it certifies a subject of
 * exactly one attribute, a CN equal to the node id it was asked for, and copies nothing else from
 * the request — so a request that asks for anything else (an `O`, a second CN, a subjectAltName, any
 * extension or attribute) is refused rather than silently trimmed, and the node learns why.
 * Keys are those rustls accepts for a client certificate and that are not weak: ECDSA P-256 or
 * P-384, or RSA of at least 2048 bits. A key is judged before the signature is checked, so no
 * signature is ever verified with a key the CA would not certify.
 *
 * @module
 */
import "reflect-metadata";
import * as x509 from "@peculiar/x509";
import { pemOf, toPem, writeFileAtomic } from "./pem.ts";

/** A node id as a file name may carry it (the hub schema's rule for `node_id`). */
export const NODE_ID = /^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$/;

/** The largest request the CA reads, in bytes of PEM. */
export const MAX_CSR_BYTES = 16 * 1024;

/** Why the CA refused a request. */
export type CsrRefusal =
  | "csr_unparsable"
  | "csr_signature"
  | "csr_key"
  | "csr_subject"
  | "csr_names";

/** A request the CA may sign, or why not. */
export type CsrJudgement =
  | { readonly ok: true; readonly request: x509.Pkcs10CertificateRequest }
  | { readonly ok: false; readonly reason: CsrRefusal; readonly detail: string };

/** PKCS#9 extensionRequest: the attribute that carries requested extensions. */
const EXTENSION_REQUEST = "1.2.840.113549.1.9.14";

const NODE_KEY = { name: "ECDSA", namedCurve: "P-256" } as const;

/**
 * Makes a node's key (ECDSA P-256) and a request for it: subject `CN=<nodeId>` and nothing else,
 * signed with SHA-256.
 *
 * @returns the key as PKCS#8 `PRIVATE KEY` PEM, and the request as `CERTIFICATE REQUEST` PEM
 * @throws {RangeError} when `nodeId` is not a node id
 */
export async function makeNodeKeyAndCsr(
  nodeId: string,
): Promise<{ keyPem: string; csrPem: string }> {
  if (!NODE_ID.test(nodeId)) throw new RangeError(`Node id "${nodeId}" is not a node id`);
  const keys = await crypto.subtle.generateKey(NODE_KEY, true, ["sign", "verify"]);
  const request = await x509.Pkcs10CertificateRequestGenerator.create({
    name: [{ CN: [nodeId] }],
    keys,
    signingAlgorithm: { ...NODE_KEY, hash: "SHA-256" },
  }, crypto);
  const pkcs8 = await crypto.subtle.exportKey("pkcs8", keys.privateKey);
  return {
    keyPem: toPem(pkcs8, "PRIVATE KEY"),
    csrPem: toPem(request.rawData, "CERTIFICATE REQUEST"),
  };
}

/**
 * A request for a key the node already holds (a registration asked again with the key written
 * before the first attempt, live/enrol.ts): subject `CN=<nodeId>` only, signed with SHA-256.
 *
 * @param keyPem the node's ECDSA P-256 key, PKCS#8 `PRIVATE KEY` PEM
 * @throws {RangeError} when `nodeId` is not a node id
 * @throws {TypeError} when the key is not one PKCS#8 P-256 key
 */
export async function csrForKey(nodeId: string, keyPem: string): Promise<string> {
  if (!NODE_ID.test(nodeId)) throw new RangeError(`Node id "${nodeId}" is not a node id`);
  const der = pemOf(keyPem, "PRIVATE KEY")[0];
  const privateKey = await crypto.subtle.importKey("pkcs8", der, NODE_KEY, true, ["sign"]);
  const { d: _d, key_ops: _ops, ...jwk } = await crypto.subtle.exportKey("jwk", privateKey);
  const publicKey = await crypto.subtle.importKey("jwk", jwk, NODE_KEY, true, ["verify"]);
  const request = await x509.Pkcs10CertificateRequestGenerator.create({
    name: [{ CN: [nodeId] }],
    keys: { privateKey, publicKey },
    signingAlgorithm: { ...NODE_KEY, hash: "SHA-256" },
  }, crypto);
  return toPem(request.rawData, "CERTIFICATE REQUEST");
}

/**
 * SHA-256 of the SubjectPublicKeyInfo a request carries, as lowercase hex: which key it is, for a
 * registration asked again (spent_secrets.ts). Undefined when the request does not parse.
 */
export async function csrKeySha256(csrPem: string): Promise<string | undefined> {
  const parsed = csrPem.length <= MAX_CSR_BYTES ? parseRequest(csrPem) : "too long";
  if (typeof parsed === "string") return undefined;
  const digest = await crypto.subtle.digest("SHA-256", parsed.publicKey.rawData);
  return Array.from(new Uint8Array(digest), (b) => b.toString(16).padStart(2, "0")).join("");
}

/**
 * Writes a key, a secret or the certificate that goes with them: whole or not at all, mode 0600
 * (a temporary file in the same folder, renamed into place; an existing file is replaced).
 */
export async function writeSecretFile(path: string, text: string): Promise<void> {
  await writeFileAtomic(path, text, { mode: 0o600, replace: true });
}

/**
 * Judges a request for `nodeId`, in order: it parses (one `CERTIFICATE REQUEST` block, at most
 * {@link MAX_CSR_BYTES}); its key is one the CA certifies; its self-signature verifies; its
 * subject is exactly `CN=<nodeId>`; it asks for no extension or attribute.
 */
export async function judgeNodeCsr(csrPem: string, nodeId: string): Promise<CsrJudgement> {
  // Longer than the bound in UTF-16 units is longer in UTF-8 bytes: no need to encode it.
  if (csrPem.length > MAX_CSR_BYTES || new TextEncoder().encode(csrPem).length > MAX_CSR_BYTES) {
    return refuse("csr_unparsable", `Request is more than ${MAX_CSR_BYTES} bytes`);
  }
  const parsed = parseRequest(csrPem);
  if (typeof parsed === "string") return refuse("csr_unparsable", parsed);
  const key = await keyProblem(parsed.publicKey);
  if (key) return refuse("csr_key", key);
  const signature = await signatureProblem(parsed.request);
  if (signature) return refuse("csr_signature", signature);
  const subject = subjectProblem(parsed.subject, nodeId);
  if (subject) return refuse("csr_subject", subject);
  if (parsed.asks.length > 0) {
    return refuse("csr_names", `Request asks for ${parsed.asks.map((t) => `"${t}"`).join(", ")}`);
  }
  return { ok: true, request: parsed.request };
}

/** The request and the parts judged, read eagerly (the library parses them on first use). */
interface ParsedRequest {
  readonly request: x509.Pkcs10CertificateRequest;
  readonly publicKey: x509.PublicKey;
  readonly subject: x509.JsonName;
  /** The extensions it requests and the other attributes it carries, by OID. */
  readonly asks: readonly string[];
}

/** The parsed request, or why it does not parse. */
function parseRequest(csrPem: string): ParsedRequest | string {
  try {
    const request = new x509.Pkcs10CertificateRequest(pemOf(csrPem, "CERTIFICATE REQUEST")[0]);
    const subject = request.subjectName.toJSON();
    const extensions = request.extensions.map((extension) => extension.type);
    const attributes = request.attributes.map((attribute) => attribute.type)
      .filter((type) => type !== EXTENSION_REQUEST || extensions.length === 0);
    return { request, publicKey: request.publicKey, subject, asks: [...extensions, ...attributes] };
  } catch (error) {
    return `Request does not parse: ${(error as Error).message}`;
  }
}

function refuse(reason: CsrRefusal, detail: string): CsrJudgement {
  return { ok: false, reason, detail };
}

/** Why the CA will not certify this key, or undefined when it will. */
async function keyProblem(publicKey: x509.PublicKey): Promise<string | undefined> {
  let algorithm: { name: string; namedCurve?: string };
  try {
    algorithm = publicKey.algorithm as typeof algorithm;
  } catch {
    return "Request's key is of an unknown type";
  }
  const spki = publicKey.rawData;
  try {
    if (algorithm.name === "ECDSA") {
      if (algorithm.namedCurve !== "P-256" && algorithm.namedCurve !== "P-384") {
        return `Request's key is ECDSA on curve "${algorithm.namedCurve}", not P-256 or P-384`;
      }
      await crypto.subtle.importKey("spki", spki, algorithm, false, ["verify"]);
      return undefined;
    }
    if (algorithm.name === "RSASSA-PKCS1-v1_5") {
      const rsa = { name: algorithm.name, hash: "SHA-256" };
      const key = await crypto.subtle.importKey("spki", spki, rsa, false, ["verify"]);
      const bits = (key.algorithm as RsaHashedKeyAlgorithm).modulusLength;
      return bits >= 2048 ? undefined : `Request's key is RSA of ${bits} bits, fewer than 2048`;
    }
  } catch (error) {
    return `Request's key does not import: ${(error as Error).message}`;
  }
  return `Request's key is "${algorithm.name}", not ECDSA P-256, P-384 or RSA`;
}

/** Why the request's self-signature does not count, or undefined when it verifies. */
async function signatureProblem(
  request: x509.Pkcs10CertificateRequest,
): Promise<string | undefined> {
  let hash: string | undefined;
  try {
    hash = (request.signatureAlgorithm.hash as Algorithm | undefined)?.name;
  } catch {
    return "Request's signature algorithm is unknown";
  }
  if (hash !== "SHA-256" && hash !== "SHA-384" && hash !== "SHA-512") {
    return `Request is signed with hash "${hash}", not SHA-256, SHA-384 or SHA-512`;
  }
  const verified = await request.verify(crypto).catch(() => false);
  return verified ? undefined : "Request's signature does not verify with its key";
}

/** Why the subject is not exactly `CN=<nodeId>`, or undefined when it is. */
function subjectProblem(rdns: x509.JsonName, nodeId: string): string | undefined {
  const shown = JSON.stringify(rdns);
  if (rdns.length !== 1) return `Subject has ${rdns.length} parts, not one CN: ${shown}`;
  const types = Object.keys(rdns[0]);
  if (types.length !== 1 || types[0] !== "CN" || rdns[0].CN.length !== 1) {
    return `Subject is not one CN: ${shown}`;
  }
  const cn = rdns[0].CN[0];
  return cn === nodeId ? undefined : `Subject CN ${JSON.stringify(cn)} is not "${nodeId}"`;
}
