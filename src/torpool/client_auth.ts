/**
 * Onion client authorization (torspec `rend-spec-v3.txt` "CLIENT AUTHORIZATION", tor(1)
 * `ClientOnionAuthDir`): one `<onion>.auth_private` file per onion service, holding
 * `<onion-without-.onion>:descriptor:x25519:<base32 private key>`, mode 0600, in every instance's
 * auth folder. The set is written whole: a file for an onion no longer listed is removed.
 *
 * A key is a secret: it is written to the files and nowhere else — never into an error message,
 * a log line or a reply. A bad entry is named by its onion address only.
 *
 * @module
 */
import { join } from "node:path";
import { readRootedText } from "../config/rooted_read.ts";

/** One onion service's client key. */
export interface ClientAuthEntry {
  /** The v3 onion address, with or without `.onion`. */
  readonly onion: string;
  /** The x25519 private key, base32 (52 characters, no padding). */
  readonly key: string;
}

/** A checked entry: the 56-character address and the file line. */
interface AuthFile {
  readonly name: string;
  readonly line: string;
}

const ONION = /^[a-z2-7]{56}$/;
const KEY = /^[A-Z2-7]{52}$/;
const SUFFIX = ".auth_private";

/**
 * Checks entries and renders their files.
 *
 * @throws {TypeError} naming the onion (never the key) of the first bad entry, or a duplicate
 * @example
 * ```ts
 * import { authFiles } from "./client_auth.ts";
 * const onion = "a".repeat(56);
 * const [file] = authFiles([{ onion: `${onion}.onion`, key: "B".repeat(52) }]);
 * file.line.startsWith(`${onion}:descriptor:x25519:`); // true
 * ```
 */
export function authFiles(entries: readonly ClientAuthEntry[]): AuthFile[] {
  const files = new Map<string, AuthFile>();
  for (const entry of entries) {
    const onion = String(entry.onion).toLowerCase().replace(/\.onion$/, "");
    if (!ONION.test(onion)) {
      throw new TypeError(
        `Client auth entry "${String(entry.onion).slice(0, 70)}" is not a v3 ` +
          "onion address (56 base32 characters, optionally followed by .onion)",
      );
    }
    if (typeof entry.key !== "string" || !KEY.test(entry.key.toUpperCase())) {
      throw new TypeError(
        `Client auth key for "${onion}.onion" is not a base32 x25519 private ` +
          "key (52 characters A-Z, 2-7)",
      );
    }
    if (files.has(onion)) throw new TypeError(`Client auth for "${onion}.onion" is listed twice`);
    files.set(onion, {
      name: `${onion}${SUFFIX}`,
      line: `${onion}:descriptor:x25519:${entry.key.toUpperCase()}\n`,
    });
  }
  return [...files.values()];
}

/**
 * Makes `dir` hold exactly `files`: each written to a temporary file with mode 0600 and renamed
 * over its name (Tor never reads half a key), and every other `*.auth_private` removed.
 */
export async function writeAuthFiles(dir: string, files: readonly AuthFile[]): Promise<void> {
  const wanted = new Set(files.map((file) => file.name));
  for (const file of files) {
    const temporary = join(dir, `.${file.name}.tmp`);
    await Deno.writeTextFile(temporary, file.line, { mode: 0o600 });
    await Deno.chmod(temporary, 0o600);
    await Deno.rename(temporary, join(dir, file.name));
  }
  for await (const entry of Deno.readDir(dir)) {
    if (entry.name.endsWith(SUFFIX) && !wanted.has(entry.name)) {
      await Deno.remove(join(dir, entry.name));
    }
  }
}

/**
 * The pool's current key set, and the one writer of it: writes run one after another, each with
 * the set current when it runs, so a folder never ends up with an older set than the last call.
 */
export class ClientAuthKeys {
  #files: AuthFile[] = [];
  #writes: Promise<void> = Promise.resolve();

  /** How many onion services the set holds. */
  get size(): number {
    return this.#files.length;
  }

  /**
   * Replaces the set.
   *
   * @throws {TypeError} naming the onion of a bad entry (never its key); the set is unchanged
   */
  replace(entries: readonly ClientAuthEntry[]): void {
    this.#files = authFiles(entries);
  }

  /** Makes `dir` (mode 0700) hold exactly the current set, after every earlier write. */
  write(dir: string): Promise<void> {
    const write = this.#writes.then(async () => {
      await Deno.mkdir(dir, { recursive: true, mode: 0o700 });
      await writeAuthFiles(dir, this.#files);
    });
    this.#writes = write.catch(() => {});
    return write;
  }

  /** Resolves when every write asked for so far is done. */
  settled(): Promise<void> {
    return this.#writes;
  }
}

/**
 * Reads a `client_auth_dir`: every `<onion address>.key` file (the address with or without
 * `.onion`), each holding one base32 x25519 private key, read through the rooted read as a secret
 * (mode 0600, no symlink out of the folder). Other names are ignored. Errors name the file, never a
 * key.
 *
 * @throws {Error} naming the file that cannot be read
 */
export async function readClientAuthDir(dir: string): Promise<ClientAuthEntry[]> {
  const entries: ClientAuthEntry[] = [];
  for await (const item of Deno.readDir(dir)) {
    if (!item.name.endsWith(".key") || item.name.startsWith(".")) continue;
    let key: string;
    try {
      key = await readRootedText(dir, item.name, { maxBytes: 4096, secret: true });
    } catch (error) {
      const reason = error instanceof Error ? error.message : String(error);
      throw new Error(`client_auth_dir ${join(dir, item.name)}: ${reason}`);
    }
    entries.push({ onion: item.name.slice(0, -".key".length), key: key.trim() });
  }
  return entries.sort((a, b) => a.onion.localeCompare(b.onion));
}
