/**
 * Tenant labels for logs and metrics: a salted hash of the tenant host, so series and log lines
 * can be told apart per tenant without naming the tenant. The label is the first 16 hex digits of
 * SHA-256(lower-cased host ‖ salt), computed synchronously with `node:crypto` on the request path
 * and memoised in a bounded table.
 *
 * The salt comes from a file the operator provisions, read rooted in its folder as a secret
 * (config/rooted_read.ts): a salt that links out of its folder, or that group or others may read
 * (give it mode 0600), is refused like a missing, unreadable, empty or short one — a problem the
 * caller reports, naming the file; there is never a fallback to plain hosts. Where no salt is
 * configured at all, the caller does not expose per-tenant series and writes {@link UNLABELLED}
 * in the tenant field of log lines.
 *
 * @module
 */
import { createHash } from "node:crypto";
import { basename, dirname } from "node:path";
import { readRooted, RootedReadError } from "../config/rooted_read.ts";

/** The tenant field where no salt is configured (and per-tenant series are not exposed). */
export const UNLABELLED = "-";

/** The shortest salt accepted, in bytes. */
export const MIN_SALT_BYTES = 16;

/** How many host → label entries are memoised before the table is cleared. */
export const LABEL_CACHE_LIMIT = 10_000;

const LABEL_HEX_DIGITS = 16;

/** The largest salt file read, in bytes. */
const MAX_SALT_FILE_BYTES = 64 * 1024;

/** The outcome of {@link TenantLabels.fromFile}: labels, or a problem naming the file. */
export interface SaltFileResult {
  readonly labels?: TenantLabels;
  readonly problem?: string;
}

/**
 * Salted, memoised tenant labels.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { TenantLabels } from "./tenant_label.ts";
 * const labels = new TenantLabels(new TextEncoder().encode("0123456789abcdef-salt"));
 * assert.match(labels.label("demo.example"), /^[0-9a-f]{16}$/);
 * assert.equal(labels.label("DEMO.example"), labels.label("demo.example"));
 * ```
 */
export class TenantLabels {
  readonly #salt: Uint8Array;
  readonly #memo = new Map<string, string>();

  /**
   * @param salt the secret salt, at least {@link MIN_SALT_BYTES} bytes (copied)
   * @throws {RangeError} when the salt is shorter than {@link MIN_SALT_BYTES} bytes
   */
  constructor(salt: Uint8Array) {
    if (salt.length < MIN_SALT_BYTES) {
      throw new RangeError(
        `Tenant label salt is ${salt.length} bytes; at least ${MIN_SALT_BYTES} are required`,
      );
    }
    this.#salt = salt.slice();
  }

  /**
   * Reads the salt file: its bytes with trailing whitespace trimmed. The file must be a regular
   * file inside its folder (no symlink out of it) that only its owner may read (mode 0600).
   *
   * @param path the salt file
   * @returns the labels, or a problem naming the file and why it cannot be used
   */
  static async fromFile(path: string): Promise<SaltFileResult> {
    let bytes: Uint8Array;
    try {
      bytes = await readRooted(dirname(path), basename(path), {
        maxBytes: MAX_SALT_FILE_BYTES,
        secret: true,
      });
    } catch (error) {
      const why = error instanceof RootedReadError ? error.detail : (error as Error).message;
      return { problem: `Cannot read tenant label salt "${path}": ${why}` };
    }
    return TenantLabels.fromSaltBytes(bytes, path);
  }

  /**
   * Checks a salt file's contents: its bytes with trailing whitespace trimmed must not be empty
   * nor shorter than {@link MIN_SALT_BYTES}. This is {@link TenantLabels.fromFile} after the read.
   *
   * @param bytes the file's contents
   * @param path the file, named in a problem
   * @returns the labels, or a problem naming the file and why it cannot be used
   * @example
   * ```ts
   * import assert from "node:assert/strict";
   * import { TenantLabels } from "./tenant_label.ts";
   * const short = TenantLabels.fromSaltBytes(new TextEncoder().encode("short\n"), "/etc/salt");
   * assert.equal(short.problem, 'Tenant label salt "/etc/salt" is 5 bytes; at least 16 are required');
   * assert.equal(short.labels, undefined);
   * ```
   */
  static fromSaltBytes(bytes: Uint8Array, path: string): SaltFileResult {
    const salt = trimTrailingWhitespace(bytes);
    if (salt.length === 0) return { problem: `Tenant label salt "${path}" is empty` };
    if (salt.length < MIN_SALT_BYTES) {
      return {
        problem: `Tenant label salt "${path}" is ${salt.length} bytes; ` +
          `at least ${MIN_SALT_BYTES} are required`,
      };
    }
    return { labels: new TenantLabels(salt) };
  }

  /** How many labels are memoised now (at most {@link LABEL_CACHE_LIMIT}). */
  get cached(): number {
    return this.#memo.size;
  }

  /** A copy of the salt itself: fleet-store keys are keyed with it too (`src/fleet/stores.ts`). */
  salt(): Uint8Array {
    return this.#salt.slice();
  }

  /** The label for a tenant host: 16 lower-case hex digits, the same for any case of the host. */
  label(host: string): string {
    const key = host.toLowerCase();
    const known = this.#memo.get(key);
    if (known !== undefined) return known;
    const label = createHash("sha256").update(key).update(this.#salt).digest("hex")
      .slice(0, LABEL_HEX_DIGITS);
    if (this.#memo.size >= LABEL_CACHE_LIMIT) this.#memo.clear();
    this.#memo.set(key, label);
    return label;
  }
}

/** The bytes without trailing ASCII whitespace (space, tab, CR, LF, VT, FF). */
function trimTrailingWhitespace(bytes: Uint8Array): Uint8Array {
  let end = bytes.length;
  while (end > 0 && isWhitespace(bytes[end - 1])) end--;
  return bytes.subarray(0, end);
}

/** True for an ASCII whitespace byte. */
function isWhitespace(byte: number): boolean {
  return byte === 0x20 || (byte >= 0x09 && byte <= 0x0d);
}
