/**
 * What the fleet CA's keys sign — certificates and CRLs — with the extensions every one of them
 * carries, in one place: ca.ts makes the root, the intermediate, the hub's certificate and nodes'
 * certificates with {@link certify}, and ca.ts and crl.ts sign CRLs with {@link signCrl}.
 *
 * Every certificate gets a critical key usage, a subject key identifier and (unless self-signed)
 * an authority key identifier copied from its issuer's subject key identifier, so chain building
 * (rustls, OpenSSL, `X509ChainBuilder`) finds the issuer by key, not only by name. The issuer's
 * name is copied from the issuer certificate as encoded, never re-spelt: a name re-encoded with
 * another string type would no longer match byte for byte. A CRL carries the authority key
 * identifier and a CRL number (RFC 5280 §5.2.3 requires it of a conforming issuer); the number
 * is `thisUpdate` in milliseconds, which grows with every CRL as long as the clock does.
 *
 * @module
 */
import "reflect-metadata";
import * as x509 from "@peculiar/x509";
import { pemOf, randomSerial, toPem } from "./pem.ts";

/** A CA certificate and the private key that signs for it. */
export interface Signer {
  readonly cert: x509.X509Certificate;
  readonly key: CryptoKey;
}

/** The keys of every certificate the CA makes for itself. */
export const CA_KEY = { name: "ECDSA", namedCurve: "P-256" } as const;

/** A fresh, extractable ECDSA P-256 key pair. */
export async function newKeys(): Promise<CryptoKeyPair> {
  return await crypto.subtle.generateKey(CA_KEY, true, ["sign", "verify"]);
}

/** What {@link certify} makes. */
export interface CertifyOptions {
  /** The subject's one CN. */
  readonly subject: string;
  readonly publicKey: CryptoKey | x509.PublicKey;
  readonly signingKey: CryptoKey;
  /** The issuer's certificate; absent, the certificate is self-signed. */
  readonly issuer?: x509.X509Certificate;
  /** Extensions beside key usage and the key identifiers. */
  readonly extensions: readonly x509.Extension[];
  readonly usage: x509.KeyUsageFlags;
  readonly notBefore: Date;
  readonly notAfter: Date;
  /** The serial, hex; a fresh random one by default. */
  readonly serial?: string;
}

/** A certificate for `subject`, with critical key usage and key identifiers. */
export async function certify(options: CertifyOptions): Promise<x509.X509Certificate> {
  const extensions = [
    ...options.extensions,
    new x509.KeyUsagesExtension(options.usage, true),
    await x509.SubjectKeyIdentifierExtension.create(options.publicKey, false, crypto),
    ...(options.issuer ? [authorityKeyId(options.issuer)] : []),
  ];
  const subject = [{ CN: [options.subject] }];
  return await x509.X509CertificateGenerator.create({
    serialNumber: options.serial ?? randomSerial(),
    subject,
    issuer: options.issuer?.subjectName ?? subject,
    notBefore: options.notBefore,
    notAfter: options.notAfter,
    publicKey: options.publicKey,
    signingKey: options.signingKey,
    signingAlgorithm: signingFor(options.signingKey),
    extensions,
  }, crypto);
}

/** How an ECDSA key signs: SHA-384 for P-384, SHA-256 otherwise. */
export function signingFor(key: CryptoKey): EcdsaParams {
  const curve = (key.algorithm as EcKeyAlgorithm).namedCurve;
  return { name: "ECDSA", hash: curve === "P-384" ? "SHA-384" : "SHA-256" };
}

/** The authority key identifier naming `issuer`'s subject key identifier. */
function authorityKeyId(issuer: x509.X509Certificate): x509.AuthorityKeyIdentifierExtension {
  const ski = issuer.getExtension(x509.SubjectKeyIdentifierExtension);
  if (!ski) throw new TypeError(`Certificate "${issuer.subject}" has no subject key identifier`);
  return new x509.AuthorityKeyIdentifierExtension(ski.keyId);
}

/** The one certificate in `text`; errors start with `what`. */
export function parseCertificate(text: string, what: string): x509.X509Certificate {
  try {
    return new x509.X509Certificate(pemOf(text, "CERTIFICATE")[0]);
  } catch (error) {
    throw new Error(`${what} does not parse: ${(error as Error).message}`);
  }
}

/** The PKCS#8 ECDSA key in `text`, proven to be the key of `cert` by a signature. */
export async function signingKeyOf(
  text: string,
  cert: x509.X509Certificate,
  what: string,
): Promise<CryptoKey> {
  const curve = (cert.publicKey.algorithm as EcKeyAlgorithm).namedCurve;
  let key: CryptoKey;
  try {
    const der = pemOf(text, "PRIVATE KEY")[0];
    key = await crypto.subtle.importKey("pkcs8", der, { name: "ECDSA", namedCurve: curve }, false, [
      "sign",
    ]);
  } catch (error) {
    throw new Error(`${what} is not an ECDSA ${curve} key: ${(error as Error).message}`);
  }
  const challenge = crypto.getRandomValues(new Uint8Array(32));
  const signature = await crypto.subtle.sign(signingFor(key), key, challenge);
  const algorithm = { name: "ECDSA", namedCurve: curve };
  const publicKey = await cert.publicKey.export(algorithm, ["verify"], crypto);
  if (!(await crypto.subtle.verify(signingFor(key), publicKey, signature, challenge))) {
    throw new Error(`${what} is not the key of its certificate`);
  }
  return key;
}

/** A private key as PKCS#8 `PRIVATE KEY` PEM. */
export async function privateKeyPem(key: CryptoKey): Promise<string> {
  return toPem(await crypto.subtle.exportKey("pkcs8", key), "PRIVATE KEY");
}

/** A certificate as `CERTIFICATE` PEM. */
export function certificatePem(cert: x509.X509Certificate): string {
  return toPem(cert.rawData, "CERTIFICATE");
}

/** One revoked certificate in a CRL. */
export interface CrlEntry {
  /** Lowercase hex (pem.ts's `normaliseSerial`). */
  readonly serial: string;
  readonly at: Date;
  readonly reason?: x509.X509CrlReason;
}

/** Days until a CRL's `nextUpdate`, unless told. */
export const CRL_DAYS = 7;

/** RFC 5280 cRLNumber. */
const CRL_NUMBER = "2.5.29.20";

/**
 * A CRL listing `entries`, signed by `signer`, as `X509 CRL` PEM.
 *
 * @param times `thisUpdate` and `nextUpdate`
 */
export async function signCrl(
  signer: Signer,
  entries: readonly CrlEntry[],
  times: { readonly thisUpdate: Date; readonly nextUpdate: Date },
): Promise<string> {
  const crl = await x509.X509CrlGenerator.create({
    issuer: signer.cert.subjectName,
    thisUpdate: times.thisUpdate,
    nextUpdate: times.nextUpdate,
    signingKey: signer.key,
    signingAlgorithm: signingFor(signer.key),
    extensions: [
      authorityKeyId(signer.cert),
      new x509.Extension(CRL_NUMBER, false, derInteger(times.thisUpdate.getTime())),
    ],
    entries: entries.map((entry) => ({
      serialNumber: entry.serial,
      revocationDate: entry.at,
      reason: entry.reason,
    })),
  }, crypto);
  return toPem(crl.rawData, "X509 CRL");
}

/** A non-negative safe integer as a DER INTEGER. */
function derInteger(value: number): Uint8Array<ArrayBuffer> {
  const bytes: number[] = [];
  for (let rest = value; rest > 0; rest = Math.floor(rest / 256)) bytes.unshift(rest % 256);
  if (bytes.length === 0 || bytes[0] > 0x7f) bytes.unshift(0);
  return Uint8Array.from([0x02, bytes.length, ...bytes]);
}
