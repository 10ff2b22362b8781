/**
 * Whether a certificate chain is one the fleet CA issued to this node, and whether a key is its
 * key: what a node checks before it puts a certificate in place that it did not just receive from
 * the hub — a pair a crash left half renamed (live/node_pair.ts). A certificate that only looks
 * right (another node's, expired, signed by someone else, or cut short by the crash) is never put
 * in place, so completing a pair can only do what the interrupted renewal would have done.
 *
 * Why `node:crypto` and not `@peculiar/x509`: `checkPrivateKey` compares a private key with a
 * certificate's public key for every key type in one call (the CLI's `check` uses it the same way,
 * cli/file_checks.ts), and `verify` is synchronous.
 *
 * @module
 */
import { createPrivateKey, X509Certificate } from "node:crypto";
import { pemOf } from "./pem.ts";

/** A chain judged to be this node's: its leaf and the leaf's validity. */
export interface NodeChain {
  readonly leaf: X509Certificate;
  readonly notBefore: Date;
  readonly notAfter: Date;
}

/** What {@link judgeNodeChain} needs beside the chain. */
export interface NodeChainOptions {
  /** The one CN the leaf must name. */
  readonly nodeId: string;
  /** The fleet CA's certificates (PEM): the chain's last certificate must be signed by one. */
  readonly rootsPem: string;
  readonly now: Date;
}

/**
 * Judges a PEM chain (leaf first): the leaf's subject is exactly `CN=<nodeId>`, every certificate
 * is valid at `now` and signed by the next one, and the last by one of the roots.
 *
 * @returns the chain, or why it is not this node's (a sentence)
 */
export function judgeNodeChain(
  chainPem: string,
  options: NodeChainOptions,
): NodeChain | { readonly refused: string } {
  let chain: X509Certificate[];
  let roots: X509Certificate[];
  try {
    chain = pemOf(chainPem, "CERTIFICATE", "some").map((der) => new X509Certificate(der));
    roots = pemOf(options.rootsPem, "CERTIFICATE", "some").map((der) => new X509Certificate(der));
  } catch (error) {
    return { refused: `it does not parse: ${(error as Error).message}` };
  }
  const leaf = chain[0];
  if (leaf.subject !== `CN=${options.nodeId}`) {
    return { refused: `it names "${leaf.subject}", not "CN=${options.nodeId}"` };
  }
  const now = options.now.getTime();
  for (const cert of chain) {
    if (!(Date.parse(cert.validFrom) <= now && now <= Date.parse(cert.validTo))) {
      return {
        refused: `"${cert.subject}" is not valid now (${cert.validFrom} – ${cert.validTo})`,
      };
    }
  }
  for (const [i, cert] of chain.entries()) {
    const issuers = i + 1 < chain.length ? [chain[i + 1]] : roots;
    if (!issuers.some((issuer) => signedBy(cert, issuer))) {
      return { refused: `"${cert.subject}" is not signed by the fleet CA's chain` };
    }
  }
  return { leaf, notBefore: new Date(leaf.validFrom), notAfter: new Date(leaf.validTo) };
}

/** True when `keyPem` is the private key of the chain's leaf (false for text that is no key). */
export function holdsKey(chain: NodeChain, keyPem: string): boolean {
  try {
    return chain.leaf.checkPrivateKey(createPrivateKey(keyPem));
  } catch {
    return false;
  }
}

function signedBy(cert: X509Certificate, issuer: X509Certificate): boolean {
  try {
    return cert.checkIssued(issuer) && cert.verify(issuer.publicKey);
  } catch {
    return false;
  }
}
