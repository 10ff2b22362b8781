/**
 * The certificate store of the public lane: certificate and key files loaded, checked and turned
 * into TLS contexts, chosen per SNI name — exact name, then a wildcard one label deep, then the
 * certificate marked `default`. While no configured certificate is usable it serves a bootstrap
 * certificate generated at boot (bootstrap.ts). A reload re-reads every file; a file that fails
 * keeps its previous certificate live, and the failure is reported, naming the file and why.
 *
 * Every read is rooted (config/rooted_read.ts) in the folder the config names the file in — the
 * folder `flags` grants: a certificate or key that is, or became, a symlink out of it is refused,
 * and so is a private key that group or others may read (`0600` is the mode to give it).
 *
 * @module
 */
import { createPrivateKey, X509Certificate } from "node:crypto";
import tls from "node:tls";
import type { CertificateSource } from "../config/load.ts";
import { readNamedFile } from "../config/rooted_read.ts";
import { generateCertificate, randomBootstrapName } from "./self_signed.ts";

/** The largest PEM file read, in bytes (a long chain is a few KiB). */
const MAX_PEM_BYTES = 1024 * 1024;

/** A certificate in service. */
export interface ServedCertificate {
  /** The DNS names it answers for (lower case; wildcards as `*.example.com`). */
  readonly names: readonly string[];
  readonly notAfter: Date;
  readonly context: tls.SecureContext;
  /** Absent for the bootstrap certificate. */
  readonly source?: CertificateSource;
}

/** Options for {@link CertStore}. */
export interface CertStoreOptions {
  readonly sources: readonly CertificateSource[];
  readonly minVersion: "TLSv1.2" | "TLSv1.3";
  /** The name of the bootstrap certificate (absent: {@link randomBootstrapName}, once per store). */
  readonly bootstrapName?: string;
  readonly log: (line: string) => void;
}

/** The TLS state `/v1/health` reports. */
export interface TlsStatus {
  readonly bootstrap: boolean;
  readonly certificates: readonly {
    names: readonly string[];
    not_after: string;
    file: string | null;
    default: boolean;
  }[];
  readonly last_reload: string | null;
  readonly last_problems: readonly string[];
}

/** Certificates by name, swapped whole on every (re)load. */
export class CertStore {
  readonly #options: CertStoreOptions;
  /** The last good certificate of each source (index-aligned with `sources`). */
  #loaded: (ServedCertificate | undefined)[];
  #bootstrap?: ServedCertificate;
  #exact = new Map<string, ServedCertificate>();
  #wildcard = new Map<string, ServedCertificate>();
  #default?: ServedCertificate;
  #lastReload: Date | null = null;
  #lastProblems: string[] = [];
  /** The bootstrap certificate's name: the operator's, else random for this store's life. */
  readonly #bootstrapName: string;

  /** @param options certificate files, minimum version, bootstrap name, log */
  constructor(options: CertStoreOptions) {
    this.#options = options;
    this.#bootstrapName = options.bootstrapName ?? randomBootstrapName();
    this.#loaded = options.sources.map(() => undefined);
  }

  /**
   * Reads every certificate file again. A file that fails keeps its previous certificate.
   *
   * @returns the problems found (also kept for the status)
   */
  async reload(): Promise<string[]> {
    const problems: string[] = [];
    const next = await Promise.all(this.#options.sources.map(async (source, i) => {
      try {
        return await this.#load(source);
      } catch (error) {
        const kept = this.#loaded[i] ? "; the previous certificate stays in service" : "";
        problems.push(
          `Cannot load certificate ${source.certFile}: ${(error as Error).message}${kept}`,
        );
        return this.#loaded[i];
      }
    }));
    this.#loaded = next;
    const usable = next.filter((c): c is ServedCertificate => c !== undefined);
    if (usable.length === 0 && !this.#bootstrap) {
      const generated = await generateCertificate(this.#bootstrapName);
      this.#bootstrap = {
        names: [this.#bootstrapName],
        notAfter: generated.notAfter,
        context: this.#context(generated.certPem, generated.keyPem),
      };
      this.#options.log(
        `portcullis: tls: no usable certificate; serving a self-signed bootstrap certificate for ` +
          `${this.#bootstrapName} until ${generated.notAfter.toISOString()}`,
      );
    } else if (usable.length > 0 && this.#bootstrap) {
      this.#bootstrap = undefined;
      this.#options.log(
        "portcullis: tls: a certificate loaded; the bootstrap certificate is retired",
      );
    }
    this.#index(usable);
    for (const problem of problems) this.#options.log(`portcullis: tls: ${problem}`);
    this.#lastReload = new Date();
    this.#lastProblems = problems;
    return problems;
  }

  /**
   * The context for a handshake: exact name, then wildcard, then the default (or bootstrap).
   *
   * @param serverName the SNI name, if the client sent one
   * @returns undefined when nothing fits: the handshake is refused
   */
  lookup(serverName: string | undefined): tls.SecureContext | undefined {
    return this.match(serverName)?.context;
  }

  /** The certificate a handshake for `serverName` gets. */
  match(serverName: string | undefined): ServedCertificate | undefined {
    if (serverName) {
      const name = serverName.toLowerCase().replace(/\.$/, "");
      const exact = this.#exact.get(name);
      if (exact) return exact;
      const dot = name.indexOf(".");
      if (dot > 0) {
        const wildcard = this.#wildcard.get(name.slice(dot + 1));
        if (wildcard) return wildcard;
      }
    }
    return this.#default ?? this.#bootstrap;
  }

  /** True while the bootstrap certificate is in service. */
  get bootstrap(): boolean {
    return this.#bootstrap !== undefined;
  }

  /** What is in service, for `/v1/health`. */
  status(): TlsStatus {
    const served = this.#bootstrap
      ? [this.#bootstrap]
      : this.#loaded.filter((c) => c !== undefined);
    return {
      bootstrap: this.bootstrap,
      certificates: served.map((c) => ({
        names: c!.names,
        not_after: c!.notAfter.toISOString(),
        file: c!.source?.certFile ?? null,
        default: c!.source?.isDefault ?? true,
      })),
      last_reload: this.#lastReload?.toISOString() ?? null,
      last_problems: this.#lastProblems,
    };
  }

  async #load(source: CertificateSource): Promise<ServedCertificate> {
    const certPem = await readPem(source.certFile, "certificate");
    const keyPem = await readPem(source.keyFile, "key");
    let leaf: X509Certificate;
    try {
      leaf = new X509Certificate(certPem);
    } catch {
      throw new Error("not a PEM certificate");
    }
    let key;
    try {
      key = createPrivateKey(keyPem);
    } catch {
      throw new Error(`${source.keyFile} is not a PEM private key`);
    }
    if (!leaf.checkPrivateKey(key)) throw new Error(`the key in ${source.keyFile} does not match`);
    const notAfter = new Date(leaf.validTo);
    if (!(notAfter.getTime() > Date.now())) {
      throw new Error(`it expired on ${notAfter.toISOString()}`);
    }
    const names = certificateNames(leaf);
    if (names.length === 0) throw new Error("it names no DNS name (subjectAltName or CN)");
    return { names, notAfter, context: this.#context(certPem, keyPem), source };
  }

  #context(cert: string, key: string): tls.SecureContext {
    return tls.createSecureContext({ cert, key, minVersion: this.#options.minVersion });
  }

  #index(usable: readonly ServedCertificate[]): void {
    const exact = new Map<string, ServedCertificate>();
    const wildcard = new Map<string, ServedCertificate>();
    for (const certificate of usable) {
      for (const name of certificate.names) {
        if (name.startsWith("*.")) {
          if (!wildcard.has(name.slice(2))) wildcard.set(name.slice(2), certificate);
        } else if (!exact.has(name)) {
          exact.set(name, certificate);
        }
      }
    }
    this.#exact = exact;
    this.#wildcard = wildcard;
    this.#default = usable.find((c) => c.source?.isDefault);
  }
}

/** The DNS names of a certificate: its subjectAltName DNS entries, else its CN. */
export function certificateNames(certificate: X509Certificate): string[] {
  const names = (certificate.subjectAltName ?? "")
    .split(",")
    .map((entry) => entry.trim())
    .filter((entry) => entry.startsWith("DNS:"))
    .map((entry) => entry.slice(4).toLowerCase());
  if (names.length > 0) return names;
  const cn = /(?:^|\n)CN=([^\n]+)/.exec(certificate.subject)?.[1];
  return cn ? [cn.toLowerCase()] : [];
}

function readPem(file: string, what: "certificate" | "key"): Promise<string> {
  return readNamedFile(file, `${what} file`, { maxBytes: MAX_PEM_BYTES, secret: what === "key" });
}
