/**
 * The checks behind `check`'s file verifications (references.ts): one {@link Referee} per config
 * file reads the document as written, resolves each named path against the file's folder, opens it
 * as the running program will (rooted in its folder, a secret refused when group or others may
 * read it), parses what has a format, and records each finding under the field that named it.
 *
 * @module
 */
import { createPrivateKey, X509Certificate } from "node:crypto";
import { pathResolver } from "../config/load.ts";
import type { ConfigProblem } from "../config/problems.ts";
import { readNamedFile } from "../config/rooted_read.ts";
import type { YamlFile } from "../config/yaml_file.ts";
import { TenantLabels } from "../observe/tenant_label.ts";

/** What `check`'s file verifications (references.ts) found. */
export interface Findings {
  /** The config cannot be used as written: `check` exits 1, `flags` prints nothing. */
  readonly problems: ConfigProblem[];
  /** It would run, but not as written; `check` prints them and exits 0. */
  readonly warnings: ConfigProblem[];
}

/** What a missing file is: a problem, a warning (with why it may be missing), or nothing. */
export type Missing = "problem" | { readonly warn: string } | "fine";

/** A field path in a config file. */
export type Path = readonly (string | number)[];

/** The largest PEM file read, as the certificate store reads it. */
const MAX_PEM_BYTES = 1024 * 1024;
/** The largest token or secret file read. */
const MAX_SECRET_BYTES = 4096;

/** Collects findings about the fields of one config file. */
export class Referee {
  readonly findings: Findings = { problems: [], warnings: [] };
  readonly #source: YamlFile;
  readonly #resolve: (path: string) => string;

  constructor(source: YamlFile) {
    this.#source = source;
    this.#resolve = pathResolver(source.file);
  }

  /** True when the document has a value at `path`. */
  has(path: Path): boolean {
    return this.#at(path) !== undefined;
  }

  /** The length of the list at `path` (0 when there is none). */
  list(path: Path): number {
    const value = this.#at(path);
    return Array.isArray(value) ? value.length : 0;
  }

  /**
   * The `cert_file` and `key_file` of the block at `path`: both readable (the key a secret), a PEM
   * certificate and a PEM private key that belong together, not expired.
   *
   * @returns "missing" when a file does not exist (reported as `missing` says), "ok" otherwise
   */
  async pair(
    path: Path,
    options: { missing: Missing; pending?: boolean },
  ): Promise<"ok" | "missing"> {
    const certPath = [...path, "cert_file"];
    const keyPath = [...path, "key_file"];
    const cert = await this.#read(certPath, "certificate file", MAX_PEM_BYTES, false, options);
    const key = await this.#read(keyPath, "key file", MAX_PEM_BYTES, true, options);
    if (cert === "missing" || key === "missing") return "missing";
    if (cert === undefined || key === undefined) return "ok";
    let leaf: X509Certificate;
    try {
      leaf = new X509Certificate(cert);
    } catch {
      this.#problem(certPath, "Not a PEM certificate");
      return "ok";
    }
    let privateKey;
    try {
      privateKey = createPrivateKey(key);
    } catch {
      this.#problem(keyPath, "Not a PEM private key");
      return "ok";
    }
    if (!leaf.checkPrivateKey(privateKey)) {
      const mismatch = `The key does not belong to the certificate in ${this.#value(certPath)}`;
      if (options.pending && await this.#completes(certPath, keyPath, leaf, privateKey)) {
        this.#warn(
          keyPath,
          `${mismatch}, but a renewal left a pending pair beside them (.new) that makes a ` +
            "whole pair: the node completes it when it starts",
        );
        return "ok";
      }
      this.#problem(keyPath, mismatch);
    }
    const notAfter = new Date(leaf.validTo);
    if (!(notAfter.getTime() > Date.now())) {
      this.#problem(certPath, `The certificate expired on ${notAfter.toISOString()}`);
    }
    return "ok";
  }

  /**
   * True when the `.new` files beside a mismatched pair (what a renewal killed between its two
   * renames leaves: the new key in place, its certificate in `<cert>.new`; or the reverse) make
   * a whole pair with one of the files in place. Boot completes such a pair before reading it
   * (live/node_pair.ts settlePair, which also checks its chain and its node).
   */
  async #completes(
    certPath: Path,
    keyPath: Path,
    leaf: X509Certificate,
    privateKey: ReturnType<typeof createPrivateKey>,
  ): Promise<boolean> {
    const pending = async (path: Path, secret: boolean) => {
      const written = this.#value(path);
      if (written === undefined) return undefined;
      const options = { maxBytes: MAX_PEM_BYTES, secret };
      return await readNamedFile(`${this.#resolve(written)}.new`, "file", options)
        .catch(() => undefined);
    };
    const [certText, keyText] = [await pending(certPath, false), await pending(keyPath, true)];
    try {
      const newCert = certText === undefined ? undefined : new X509Certificate(certText);
      const newKey = keyText === undefined ? undefined : createPrivateKey(keyText);
      return (newCert !== undefined && newCert.checkPrivateKey(privateKey)) ||
        (newKey !== undefined && leaf.checkPrivateKey(newKey)) ||
        (newCert !== undefined && newKey !== undefined && newCert.checkPrivateKey(newKey));
    } catch {
      return false;
    }
  }

  /** A CA certificate file: readable, and PEM certificates. */
  async caFile(path: Path): Promise<void> {
    const text = await this.#read(path, "CA file", MAX_PEM_BYTES, false, { missing: "problem" });
    if (typeof text !== "string" || text === "missing") return;
    try {
      new X509Certificate(text);
    } catch {
      this.#problem(path, "Not a PEM certificate");
    }
  }

  /** A secret the program reads (a token, a gate file): owner-only, readable, not empty. */
  async secret(path: Path): Promise<void> {
    const text = await this.#read(path, "file", MAX_SECRET_BYTES, true, { missing: "problem" });
    if (typeof text === "string" && text !== "missing" && text.trim() === "") {
      this.#problem(path, "The file is empty");
    }
  }

  /** The tenant-label salt: without a usable one the edge runs with every tenant unlabelled. */
  async salt(path: Path): Promise<void> {
    const written = this.#value(path);
    if (written === undefined) return;
    const read = await TenantLabels.fromFile(this.#resolve(written));
    if (read.problem) {
      this.#warn(path, `${read.problem}; no metric or log line would carry a tenant`);
    }
  }

  /** A folder that must exist (or whose absence is reported as `missing` says). */
  async folder(path: Path, missing: Missing): Promise<void> {
    const written = this.#value(path);
    if (written === undefined) return;
    try {
      if (!(await Deno.stat(this.#resolve(written))).isDirectory) {
        this.#problem(path, "Not a folder");
      }
    } catch (error) {
      if (error instanceof Deno.errors.NotFound) {
        this.#missing(path, "The folder does not exist", missing);
      } else this.#problem(path, `Cannot read the folder: ${(error as Error).message}`);
    }
  }

  /**
   * A hub's token folder: it exists, and every `<node>.token` in it is a readable secret; a folder
   * with no token, or a node in `nodes` without one, is a warning (no such node can follow).
   */
  async tokensFolder(path: Path, nodesPath: Path): Promise<void> {
    const written = this.#value(path);
    if (written === undefined) return;
    const dir = this.#resolve(written);
    const nodes = new Set<string>();
    try {
      for await (const entry of Deno.readDir(dir)) {
        if (!entry.name.endsWith(".token")) continue;
        nodes.add(entry.name.slice(0, -".token".length));
        try {
          const text = await readNamedFile(`${dir}/${entry.name}`, "token file", {
            maxBytes: MAX_SECRET_BYTES,
            secret: true,
          });
          if (text.trim() === "") this.#problem(path, `Token file ${entry.name} is empty`);
        } catch (error) {
          this.#problem(path, capitalise((error as Error).message));
        }
      }
    } catch (error) {
      const missing = error instanceof Deno.errors.NotFound;
      this.#problem(
        path,
        missing
          ? "The token folder does not exist (make it, with one <node_id>.token per node)"
          : `Cannot read the token folder: ${(error as Error).message}`,
      );
      return;
    }
    const listed = this.#at(nodesPath);
    const expected = Array.isArray(listed) ? listed.map(String) : [];
    const absent = expected.filter((node) => !nodes.has(node));
    if (absent.length > 0) {
      this.#warn(path, `No token file for ${absent.join(", ")} (listed in api.nodes)`);
    } else if (nodes.size === 0) {
      this.#warn(path, "The folder holds no <node_id>.token file: no node can follow the hub yet");
    }
  }

  /**
   * Reads the file named at `path`: its text, "missing" when it does not exist (reported as
   * `options.missing` says), undefined when it was not configured or failed otherwise (reported).
   */
  async #read(
    path: Path,
    what: string,
    maxBytes: number,
    secret: boolean,
    options: { missing: Missing },
  ): Promise<string | "missing" | undefined> {
    const written = this.#value(path);
    if (written === undefined) return undefined;
    const file = this.#resolve(written);
    try {
      await Deno.lstat(file);
    } catch (error) {
      if (error instanceof Deno.errors.NotFound) {
        this.#missing(path, "The file does not exist", options.missing);
        return "missing";
      }
    }
    try {
      return await readNamedFile(file, what, { maxBytes, secret });
    } catch (error) {
      this.#problem(path, capitalise((error as Error).message));
      return undefined;
    }
  }

  /** The text at `path`, or undefined (when it is missing or not text). */
  text(path: Path): string | undefined {
    return this.#value(path);
  }

  /** Records a warning about the field at `path`: it would run as written, but see `message`. */
  warn(path: Path, message: string): void {
    this.#warn(path, message);
  }

  #missing(path: Path, message: string, missing: Missing): void {
    if (missing === "problem") this.#problem(path, message);
    else if (missing !== "fine") this.#warn(path, `${message}; ${missing.warn}`);
  }

  #problem(path: Path, message: string): void {
    this.findings.problems.push(this.#finding(path, message));
  }

  #warn(path: Path, message: string): void {
    this.findings.warnings.push(this.#finding(path, message));
  }

  #finding(path: Path, message: string): ConfigProblem {
    const at = this.#source.locate(path);
    return { file: this.#source.file, path, message, value: this.#at(path), ...(at ? { at } : {}) };
  }

  /** The text at `path`, or undefined. */
  #value(path: Path): string | undefined {
    const value = this.#at(path);
    return typeof value === "string" ? value : undefined;
  }

  #at(path: Path): unknown {
    let value: unknown = this.#source.value;
    for (const key of path) {
      if (typeof value !== "object" || value === null) return undefined;
      value = (value as Record<string | number, unknown>)[key];
    }
    return value;
  }
}

function capitalise(text: string): string {
  return text.charAt(0).toUpperCase() + text.slice(1);
}
