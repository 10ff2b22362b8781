/**
 * The fleet CA's material on disk: PEM blocks read strictly, files written so that no reader ever
 * sees half of one, and certificate serial numbers spelt one way everywhere.
 *
 * Why a PEM reader of our own: `@peculiar/x509`'s `PemConverter.decode` skips any text it does not
 * recognise, so a request holding two blocks, or a certificate and a key, reads as whatever came
 * first. Here a caller says which label it wants and how many blocks it accepts.
 *
 * Why files are written to a temporary name and renamed (or linked) into place: a hub reading
 * `crl.pem` while the CLI rewrites it would otherwise read a truncated CRL, and a key written in
 * place exists for a moment with whatever mode the open gave it. The temporary file is created
 * `0600` (or the mode asked) in the same folder, so the rename never crosses a file system. A file
 * that must never be replaced (a CA's key, a node's one-time secret) is linked into place instead:
 * `link` fails when the name exists, where `rename` would silently overwrite it.
 *
 * @module
 */
import "reflect-metadata";
import * as x509 from "@peculiar/x509";
import { dirname, join } from "node:path";

/** One PEM block: its label (`CERTIFICATE`) and its DER bytes. */
export interface PemBlock {
  readonly label: string;
  readonly der: Uint8Array<ArrayBuffer>;
}

const BLOCK = /-----BEGIN ([A-Z0-9 ]{1,64})-----\r?\n([A-Za-z0-9+/=\r\n\t ]*?)-----END \1-----/g;

/**
 * Every PEM block in `text`, in order; a block whose base64 does not decode throws.
 *
 * @throws {TypeError} `PEM block "CERTIFICATE" 2 is not base64`
 */
export function pemBlocks(text: string): PemBlock[] {
  const blocks: PemBlock[] = [];
  let index = 0;
  for (const match of text.matchAll(BLOCK)) {
    index++;
    const body = match[2].replace(/\s+/g, "");
    try {
      blocks.push({ label: match[1], der: Uint8Array.from(atob(body), (c) => c.charCodeAt(0)) });
    } catch {
      throw new TypeError(`PEM block "${match[1]}" ${index} is not base64`);
    }
  }
  return blocks;
}

/**
 * The DER of the blocks labelled `label`, refusing text that holds any other block or none.
 *
 * @param text PEM text
 * @param label the one label allowed, e.g. `CERTIFICATE`
 * @param count how many blocks are allowed: exactly one by default
 * @throws {TypeError} naming what is wrong (no block, another label, too many)
 */
export function pemOf(
  text: string,
  label: string,
  count: "one" | "some" = "one",
): Uint8Array<ArrayBuffer>[] {
  const blocks = pemBlocks(text);
  if (blocks.length === 0) throw new TypeError(`No PEM "${label}" block found`);
  const other = blocks.find((block) => block.label !== label);
  if (other) throw new TypeError(`A PEM "${other.label}" block where only "${label}" belongs`);
  if (count === "one" && blocks.length > 1) {
    throw new TypeError(`${blocks.length} PEM "${label}" blocks where one belongs`);
  }
  return blocks.map((block) => block.der);
}

/** DER bytes as PEM text with the given label, ending in a newline. */
export function toPem(der: ArrayBuffer | Uint8Array, label: string): string {
  const bytes = der instanceof Uint8Array ? der : new Uint8Array(der);
  const base64 = btoa(Array.from(bytes, (b) => String.fromCharCode(b)).join(""));
  const lines = base64.match(/.{1,64}/g) ?? [];
  return `-----BEGIN ${label}-----\n${lines.join("\n")}\n-----END ${label}-----\n`;
}

/**
 * A serial number as this CA spells it: lowercase hex, whole bytes, no leading zero bytes (the
 * `00` DER puts before a byte ≥ 0x80 is dropped) — what `@peculiar/x509`'s `serialNumber` shows
 * for every certificate and CRL entry whose serial is DER-minimal, lowercased.
 *
 * @throws {TypeError} when `hex` is not hexadecimal
 * @example
 * ```ts
 * import { normaliseSerial } from "./pem.ts";
 * normaliseSerial("00FF01"); // "ff01"
 * ```
 */
export function normaliseSerial(hex: string): string {
  if (!/^[0-9a-fA-F]+$/.test(hex)) throw new TypeError(`Serial "${hex}" is not hexadecimal`);
  const even = (hex.length % 2 === 1 ? `0${hex}` : hex).toLowerCase();
  const stripped = even.replace(/^(?:00)+/, "");
  return stripped === "" ? "00" : stripped;
}

/**
 * The serial number of a certificate, or of the first certificate of a PEM chain, as
 * {@link normaliseSerial} spells it.
 *
 * @throws {TypeError} when there is no certificate to read
 */
export function certificateSerial(pemOrDer: string | Uint8Array): string {
  return normaliseSerial(firstCertificate(pemOrDer).serialNumber);
}

/**
 * When a certificate (or the first of a PEM chain) expires.
 *
 * @throws {TypeError} when there is no certificate to read
 */
export function certificateNotAfter(pem: string): Date {
  return firstCertificate(pem).notAfter;
}

function firstCertificate(pemOrDer: string | Uint8Array): x509.X509Certificate {
  const der = typeof pemOrDer === "string"
    ? pemOf(pemOrDer, "CERTIFICATE", "some")[0]
    : Uint8Array.from(pemOrDer);
  try {
    return new x509.X509Certificate(der);
  } catch (error) {
    throw new TypeError(`Certificate does not parse: ${(error as Error).message}`);
  }
}

/** A fresh serial: 16 random bytes, the first in 0x01–0x7f (positive, and no padding byte). */
export function randomSerial(): string {
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  while ((bytes[0] &= 0x7f) === 0) crypto.getRandomValues(bytes.subarray(0, 1));
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

/** How {@link writeFileAtomic} places a file. */
export interface AtomicOptions {
  /** Permission bits of the file (set with chmod after creation, so the umask cannot widen it). */
  readonly mode: number;
  /** Replace an existing file (rename); when false, refuse one (link). */
  readonly replace: boolean;
}

/**
 * Writes a file whole or not at all: a temporary file in the same folder, created with `mode`,
 * synced, then renamed (or, with `replace: false`, linked) to `path`.
 *
 * @throws {Deno.errors.AlreadyExists} with `replace: false` when `path` exists
 */
export async function writeFileAtomic(
  path: string,
  data: string | Uint8Array,
  options: AtomicOptions,
): Promise<void> {
  const bytes = typeof data === "string" ? new TextEncoder().encode(data) : data;
  const temp = join(dirname(path), `.${randomSerial().slice(0, 12)}.tmp`);
  const file = await Deno.open(temp, { write: true, createNew: true, mode: options.mode & 0o600 });
  try {
    try {
      let done = 0;
      while (done < bytes.length) done += await file.write(bytes.subarray(done));
      await Deno.chmod(temp, options.mode);
      await file.syncData();
    } finally {
      file.close();
    }
    if (options.replace) await Deno.rename(temp, path);
    else await Deno.link(temp, path);
  } finally {
    await Deno.remove(temp).catch(() => {});
  }
}
