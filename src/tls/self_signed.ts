/**
 * The bootstrap certificate: a self-signed leaf (ECDSA P-256, 24 hours) generated at boot for the
 * operator's `tls.name`, or else for a random name under `.invalid` (RFC 6761 §6.4: a name that
 * never resolves), served for every server name while the public lane has TLS but no usable
 * certificate yet — the first boot of an edge that will get its real certificate from ACME.
 *
 * Why random and not the node id, a constant, or the name the client asked for: the certificate is
 * the first thing any prober of the port reads. The node id named the node and, with ids like
 * `edge-1`, the fleet's naming; a constant would be one string shared by every edge — a
 * fingerprint that links them; echoing the client's server name would need a key per name asked
 * (a cost any prober could make the edge pay). A fresh random label per boot names nothing and is
 * shared by no two edges. Generated with WebCrypto and
 * `@peculiar/x509` (which needs the `reflect-metadata` polyfill); the key never leaves memory.
 *
 * @module
 */
import "reflect-metadata";
import * as x509 from "@peculiar/x509";

/** A generated certificate and key, PEM encoded. */
export interface GeneratedCertificate {
  readonly certPem: string;
  readonly keyPem: string;
  readonly notAfter: Date;
}

const ALGORITHM = { name: "ECDSA", namedCurve: "P-256", hash: "SHA-256" } as const;

/** Options for {@link generateCertificate}. */
export interface CertificateOptions {
  /** Validity from now; 24 hours by default. */
  readonly lifetimeMs?: number;
  /** A CA to sign with instead of self-signing (tests build chains with it). */
  readonly issuer?: { readonly certPem: string; readonly keyPem: string };
  /** Make a CA certificate. */
  readonly ca?: boolean;
  /** More subject alternative names (DNS names or IP addresses). */
  readonly altNames?: readonly string[];
}

/**
 * A bootstrap name that names nothing: 16 random hex digits under `.invalid`, new at each call.
 *
 * @example
 * ```ts
 * import { randomBootstrapName } from "./self_signed.ts";
 * randomBootstrapName(); // e.g. "3f9c0a51d2e47b86.invalid"
 * ```
 */
export function randomBootstrapName(): string {
  const label = Array.from(
    crypto.getRandomValues(new Uint8Array(8)),
    (b) => b.toString(16).padStart(2, "0"),
  ).join("");
  return `${label}.invalid`;
}

/**
 * Generates a certificate and its key.
 *
 * @param name the DNS name (also the common name)
 * @param options lifetime, issuer, CA flag, more names
 */
export async function generateCertificate(
  name: string,
  options: CertificateOptions = {},
): Promise<GeneratedCertificate> {
  x509.cryptoProvider.set(crypto);
  const lifetimeMs = options.lifetimeMs ?? 24 * 60 * 60 * 1000;
  const issuer = options.issuer;
  const keys = await crypto.subtle.generateKey(ALGORITHM, true, ["sign", "verify"]);
  const notBefore = new Date(Date.now() - 60_000);
  const notAfter = new Date(Date.now() + lifetimeMs);
  const names = [name, ...(options.altNames ?? [])];
  const extensions = [
    new x509.BasicConstraintsExtension(options.ca ?? false, undefined, true),
    ...(options.ca ? [] : [
      new x509.SubjectAlternativeNameExtension(
        names.map((value): x509.JsonGeneralName =>
          /^[\d.]+$|:/.test(value) ? { type: "ip", value } : { type: "dns", value }
        ),
      ),
    ]),
  ];
  const serialNumber = Array.from(
    crypto.getRandomValues(new Uint8Array(8)),
    (b) => b.toString(16).padStart(2, "0"),
  ).join("").replace(/^[89a-f]/, "1");
  let cert: x509.X509Certificate;
  if (issuer) {
    const issuerCert = new x509.X509Certificate(issuer.certPem);
    const issuerKey = await importKey(issuer.keyPem);
    cert = await x509.X509CertificateGenerator.create({
      serialNumber,
      subject: `CN=${name}`,
      issuer: issuerCert.subject,
      notBefore,
      notAfter,
      signingAlgorithm: ALGORITHM,
      publicKey: keys.publicKey,
      signingKey: issuerKey,
      extensions,
    });
  } else {
    cert = await x509.X509CertificateGenerator.createSelfSigned({
      serialNumber,
      name: `CN=${name}`,
      notBefore,
      notAfter,
      signingAlgorithm: ALGORITHM,
      keys,
      extensions,
    });
  }
  const pkcs8 = await crypto.subtle.exportKey("pkcs8", keys.privateKey);
  return {
    certPem: x509.PemConverter.encode(cert.rawData, "CERTIFICATE"),
    keyPem: x509.PemConverter.encode(pkcs8, "PRIVATE KEY"),
    notAfter,
  };
}

async function importKey(pem: string): Promise<CryptoKey> {
  const der = x509.PemConverter.decodeFirst(pem);
  return await crypto.subtle.importKey("pkcs8", der, ALGORITHM, false, ["sign"]);
}
