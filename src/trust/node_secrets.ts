/**
 * One-time registration secrets: `portcullis hub add-node <id>` writes `<secrets>/<id>.secret`
 * ({@link addNodeSecret}); the operator carries the file to the node; the node presents the secret
 * once, with its certificate request, and the hub consumes it ({@link NodeSecrets}).
 *
 * Why every call reads every secret file: reading only `<id>.secret` when a request names `id`
 * makes the answer's time say whether the file exists — hub/auth.ts measured an unknown node
 * answering 10–30 µs slower than a known one with a wrong token (the NotFound error costs more
 * than the read), enough to enumerate node ids. So {@link NodeSecrets.consume} does the same work
 * whatever node it is asked about: it lists the folder and reads each `<id>.secret` in it into
 * HMAC-SHA-256 digests under a key made per instance, digests the presented secret, and compares
 * two 32-byte digests in constant time — the node's, or a dummy's made at start when the node has
 * no usable file (none, malformed, or open to group or others). Its cost grows with the number of
 * secrets waiting to be used, never with which node asks. Unlike hub tokens, the folder is not
 * cached by mtime (TokenBook): a secret is used once, so each use changes the folder anyway, and
 * registrations are rare. The endpoint in front of it should be rate limited all the same.
 *
 * Why a rename claims the secret: two requests with the right secret may both find it. Each
 * renames `<id>.secret` to `<id>.secret.used-<random>` first; rename is atomic, so exactly one
 * succeeds and the other answers as for a wrong secret. The winner reads the renamed file again
 * (the operator may have issued a new secret between the read and the rename), then deletes it.
 *
 * A secret names the node's type and the incarnation it registers (node_registry.ts: 1 for a new
 * node, one more for each `add-node --reprovision`; a file without one is incarnation 1). The same
 * folder read also takes in the `<id>.spent` records of registrations answered lately
 * (spent_secrets.ts): a used secret presented again is compared against its record's digest in
 * constant time too, and the record comes back so the hub can answer a retry.
 *
 * @module
 */
import { createHmac, timingSafeEqual } from "node:crypto";
import { join } from "node:path";
import { readNamedFile, readRootedText, RootedReadError } from "../config/rooted_read.ts";
import { describeIoError } from "../config/yaml_file.ts";
import { NODE_ID } from "./csr.ts";
import { randomSerial, writeFileAtomic } from "./pem.ts";
import { recordFields } from "./record_fields.ts";
import { parseSpent, sha256Hex, SPENT_SUFFIX, type SpentSecret } from "./spent_secrets.ts";

/** The kinds of node a secret can register. */
export type NodeType = "edge" | "door";

/** What a secret file says. */
export interface NodeSecretFile {
  nodeId: string;
  nodeType: string;
  secret: string;
  /** The incarnation the secret registers (1 when the file names none). */
  incarnation: number;
  /** When `hub add-node` made it (absent in files that do not say). */
  createdAt?: Date;
}

const SUFFIX = ".secret";
const MAX_SECRET_FILE = 4096;

/**
 * Makes a one-time secret for `nodeId`: 32 random bytes, base64url, written with the node's id,
 * type and incarnation to `<secretsDir>/<nodeId>.secret` (JSON, mode 0600, written whole).
 *
 * @throws {RangeError} when `nodeId` is not a node id, or `nodeType` not "edge" or "door"
 * @throws {Error} naming the file, when a secret for the node is waiting to be used, or the file
 *   cannot be written
 */
export async function addNodeSecret(
  secretsDir: string,
  nodeId: string,
  nodeType: NodeType,
  incarnation = 1,
): Promise<{ file: string; secret: string }> {
  if (!NODE_ID.test(nodeId)) throw new RangeError(`Node id "${nodeId}" is not a node id`);
  if (nodeType !== "edge" && nodeType !== "door") {
    throw new RangeError(`Node type "${nodeType}" is not "edge" or "door"`);
  }
  if (!Number.isSafeInteger(incarnation) || incarnation < 1) {
    throw new RangeError(`Incarnation ${incarnation} is not a whole number of 1 or more`);
  }
  const bytes = crypto.getRandomValues(new Uint8Array(32));
  const secret = btoa(String.fromCharCode(...bytes)).replaceAll("+", "-").replaceAll("/", "_")
    .replace(/=+$/, "");
  const file = join(secretsDir, `${nodeId}${SUFFIX}`);
  const json = {
    node_id: nodeId,
    node_type: nodeType,
    incarnation,
    secret,
    created_at: new Date(),
  };
  try {
    await writeFileAtomic(file, `${JSON.stringify(json, null, 2)}\n`, {
      mode: 0o600,
      replace: false,
    });
  } catch (error) {
    if (error instanceof Deno.errors.AlreadyExists) {
      throw new Error(`File "${file}" holds a secret for node "${nodeId}" not used yet`);
    }
    throw new Error(`Cannot write "${file}": ${describeIoError(error)}`);
  }
  return { file, secret };
}

/**
 * Reads a secret file as {@link addNodeSecret} wrote it (the node's side). It is a secret: a file
 * group or others may read is refused.
 *
 * @throws {Error} naming the file, and the field when one is missing or malformed
 */
export async function readNodeSecretFile(path: string): Promise<NodeSecretFile> {
  const text = await readNamedFile(path, "Node secret file", {
    maxBytes: MAX_SECRET_FILE,
    secret: true,
  });
  return parseSecretFile(text, `Node secret file "${path}"`);
}

/** The fields of a secret file; errors start with `what`. */
function parseSecretFile(text: string, what: string): NodeSecretFile {
  const record = recordFields(text, what);
  const { json } = record;
  const field = record.text;
  // Secrets written before incarnations were counted are the first.
  const incarnation = record.count("incarnation", 1);
  return {
    nodeId: field("node_id", NODE_ID),
    nodeType: field("node_type", /^[a-z]{1,32}$/),
    secret: field("secret", /^[\x21-\x7e]{16,1024}$/),
    incarnation,
    ...(typeof json.created_at === "string" && Number.isFinite(Date.parse(json.created_at))
      ? { createdAt: new Date(json.created_at) }
      : {}),
  };
}

/**
 * What {@link NodeSecrets.consume} answers: the secret's type and incarnation; or a refusal, with
 * the spent record when the secret presented is one a registration used within its retry window.
 */
export type ConsumeResult =
  | { ok: true; nodeType: NodeType; incarnation: number }
  | { ok: false; spent?: SpentSecret };

/** A usable secret, as held between the folder read and the comparison. */
interface Held {
  readonly digest: Uint8Array;
  readonly nodeType: NodeType;
  readonly incarnation: number;
}

/** What one folder read holds: usable secrets, and spent records still in their window. */
interface Folder {
  readonly held: Map<string, Held>;
  readonly spent: Map<string, { readonly digest: Uint8Array; readonly record: SpentSecret }>;
}

/** The hub's side: consumes each secret at most once, answering alike for every refusal. */
export class NodeSecrets {
  readonly #dir: string;
  readonly #log: (line: string) => void;
  readonly #key = crypto.getRandomValues(new Uint8Array(32));
  /** What a node without a usable secret is compared against. */
  readonly #dummy: Uint8Array;
  /** Refusals seen by the last read, so each is logged once while it lasts. */
  #refusals = new Set<string>();

  /**
   * @param secretsDir the folder {@link addNodeSecret} writes to
   * @param options where unusable secret files are reported (each once while it lasts)
   */
  constructor(secretsDir: string, options: { readonly log?: (line: string) => void } = {}) {
    this.#dir = secretsDir;
    this.#log = options.log ?? (() => {});
    this.#dummy = this.#digest(randomSerial() + randomSerial());
  }

  /**
   * Consumes `nodeId`'s secret when `presented` is it: the first such call answers ok with the
   * node's type and incarnation and deletes the secret; every other call — wrong secret, unknown or
   * malformed node id, used secret, file open to group or others, a concurrent call that lost —
   * answers `{ ok: false }` after the same work, with the node's spent record when `presented` is
   * the secret that record was made for (and its window has not passed).
   */
  async consume(nodeId: string, presented: string): Promise<ConsumeResult> {
    const { held, spent } = await this.#readFolder();
    const wellFormed = /^[\x21-\x7e]{1,1024}$/.test(presented);
    const entry = held.get(nodeId);
    const same = timingSafeEqual(
      this.#digest(wellFormed ? presented : ""),
      entry?.digest ?? this.#dummy,
    );
    const used = spent.get(nodeId);
    const again = timingSafeEqual(
      this.#digest(await sha256Hex(wellFormed ? presented : "")),
      used?.digest ?? this.#dummy,
    );
    if (!same || !entry || !wellFormed) {
      return again && used && wellFormed ? { ok: false, spent: used.record } : { ok: false };
    }
    return await this.#claim(nodeId, presented)
      ? { ok: true, nodeType: entry.nodeType, incarnation: entry.incarnation }
      : { ok: false };
  }

  #digest(secret: string): Uint8Array {
    return new Uint8Array(createHmac("sha256", this.#key).update(secret).digest());
  }

  /**
   * Every usable `<id>.secret` in the folder, as digests, and every `<id>.spent` still in its
   * window (one past it is removed); never throws.
   */
  async #readFolder(): Promise<Folder> {
    const folder: Folder = { held: new Map(), spent: new Map() };
    const refusals: string[] = [];
    try {
      for await (const entry of Deno.readDir(this.#dir)) {
        if (entry.name.endsWith(SPENT_SUFFIX)) {
          await this.#readSpent(entry.name, folder, refusals);
          continue;
        }
        const nodeId = entry.name.endsWith(SUFFIX) ? entry.name.slice(0, -SUFFIX.length) : "";
        if (!NODE_ID.test(nodeId)) continue;
        try {
          const file = await this.#readSecret(entry.name);
          folder.held.set(nodeId, {
            digest: this.#digest(file.secret),
            nodeType: typeOf(file, nodeId),
            incarnation: file.incarnation,
          });
        } catch (error) {
          // Used since the listing: nothing to report.
          if (error instanceof RootedReadError && error.reason === "missing") continue;
          refusals.push(`${(error as Error).message}; node "${nodeId}" cannot register`);
        }
      }
    } catch (error) {
      refusals.push(`Cannot read the secrets folder: ${describeIoError(error)}; no node can`);
    }
    for (const refusal of refusals) {
      if (!this.#refusals.has(refusal)) {
        this.#log(`portcullis: secrets in ${this.#dir}: ${refusal}`);
      }
    }
    this.#refusals = new Set(refusals);
    return folder;
  }

  /** One `<id>.spent` into `folder` while its window lasts; removed once it has passed. */
  async #readSpent(name: string, folder: Folder, refusals: string[]): Promise<void> {
    const nodeId = name.slice(0, -SPENT_SUFFIX.length);
    if (!NODE_ID.test(nodeId)) return;
    try {
      const text = await readRootedText(this.#dir, name, { maxBytes: 64 * 1024, secret: true });
      const record = parseSpent(text, `File "${name}"`);
      if (record.nodeId !== nodeId) throw new Error(`File "${name}" names node "${record.nodeId}"`);
      if (Date.parse(record.until) <= Date.now()) {
        await Deno.remove(join(this.#dir, name)).catch(() => {});
        return;
      }
      folder.spent.set(nodeId, { digest: this.#digest(record.secretSha256), record });
    } catch (error) {
      if (error instanceof RootedReadError && error.reason === "missing") return;
      refusals.push(`${(error as Error).message}; node "${nodeId}" cannot register again`);
    }
  }

  async #readSecret(name: string): Promise<NodeSecretFile> {
    const text = await readRootedText(this.#dir, name, {
      maxBytes: MAX_SECRET_FILE,
      secret: true,
    });
    return parseSecretFile(text, `File "${name}"`);
  }

  /**
   * Takes `<id>.secret` out of use by renaming it, then checks the renamed file still holds the
   * secret presented (it may have been replaced since the folder was read): true when this call
   * used it. A file that changed is put back unless a newer one took its place.
   */
  async #claim(nodeId: string, presented: string): Promise<boolean> {
    const name = `${nodeId}${SUFFIX}`;
    const used = `${name}.used-${randomSerial().slice(0, 16)}`;
    try {
      await Deno.rename(join(this.#dir, name), join(this.#dir, used));
    } catch {
      return false;
    }
    const still = await this.#readSecret(used).then(
      (file) => file.secret === presented,
      () => false,
    );
    if (!still) {
      await Deno.link(join(this.#dir, used), join(this.#dir, name)).catch(() => {});
    }
    await Deno.remove(join(this.#dir, used)).catch(() => {});
    return still;
  }
}

/** The node type a secret file names, when it is one of ours and its id is its file's. */
function typeOf(file: NodeSecretFile, nodeId: string): NodeType {
  if (file.nodeId !== nodeId) {
    throw new Error(`File "${nodeId}${SUFFIX}" names node "${file.nodeId}"`);
  }
  if (file.nodeType !== "edge" && file.nodeType !== "door") {
    throw new Error(`File "${nodeId}${SUFFIX}" names node type "${file.nodeType}"`);
  }
  return file.nodeType;
}
