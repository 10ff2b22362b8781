/**
 * A node's key and certificate change together: every crash while a registration or a renewal
 * writes them leaves a node that starts with a working pair (issue 32: a renewal killed between
 * its two renames left the new key beside the old certificate, and the node never connected again
 * until it was provisioned anew).
 *
 * Writing ({@link writePair}): each new file is written whole beside the one it replaces
 * (`<file>.new`, mode 0600, synced to disk), then renamed into place, key then certificate. The
 * names are fixed so that the node's write grants name them exactly (boot/flags.ts
 * `enrolmentGrants`); the key and the certificate may live in different folders, so the pair
 * cannot be one folder renamed at once.
 *
 * Completing ({@link settlePair}, at every boot, before anything reads the pair): a pending
 * `<cert>.new` that the fleet CA issued to this node (trust/node_chain.ts: its CN, its validity,
 * its chain to `ca_file`) and that holds `<key>.new` or the key in place is renamed into place —
 * with `<key>.new` first when that is its key. A crash between those renames is completed at the
 * next boot the same way. So each crash point leaves one of:
 *
 * | killed                              | on disk                         | at the next boot      |
 * | ----------------------------------- | ------------------------------- | --------------------- |
 * | before both `.new` files are whole  | old pair (+ a partial `.new`)   | old pair serves       |
 * | after both, before the key's rename | old pair + whole pending pair   | pending pair put in   |
 * | between the renames                 | new key, old cert, `<cert>.new` | `<cert>.new` put in   |
 * | after both renames                  | new pair                        | new pair serves       |
 *
 * A registration has no old pair: killed before its certificate is whole it registers again with
 * the key it left in `<key>.new` (live/enrol.ts). A certificate older than the registration secret
 * beside it (issued before `hub add-node` made the secret: a re-provisioned node's earlier
 * incarnation) is never completed; the secret registers anew.
 *
 * What this does not do: the folders are not synced after a rename (the node has no grant on
 * them), so a power cut may undo a rename; the next boot then completes it again from the
 * `.new` file, which was synced before any rename.
 *
 * @module
 */
import { readNamedFile } from "../config/rooted_read.ts";
import { SKEW_MS } from "../trust/ca.ts";
import { holdsKey, judgeNodeChain, type NodeChain } from "../trust/node_chain.ts";
import { readNodeSecretFile } from "../trust/node_secrets.ts";

/** Where a node's pair lives, and what it is checked against. */
export interface PairFiles {
  readonly keyFile: string;
  readonly certFile: string;
  /** The fleet CA's certificate (`hub.ca_file`). */
  readonly caFile: string;
  readonly secretFile?: string;
}

const PEM = { maxBytes: 1 << 20 } as const;

/**
 * Writes a new key and certificate to `<file>.new` (each whole and synced; a `.new` file that
 * already holds the same text, such as the key a registration wrote before it asked, is kept),
 * then renames them into place, key then certificate.
 */
export async function writePair(
  files: Pick<PairFiles, "keyFile" | "certFile">,
  keyPem: string,
  chainPem: string,
): Promise<void> {
  for (const [file, text] of [[files.keyFile, keyPem], [files.certFile, chainPem]]) {
    if (await Deno.readTextFile(`${file}.new`).then((t) => t === text, () => false)) continue;
    await writeNewFile(`${file}.new`, text);
  }
  await Deno.rename(`${files.keyFile}.new`, files.keyFile);
  await Deno.rename(`${files.certFile}.new`, files.certFile);
}

/**
 * Writes `text` to `path` afresh (whatever was there removed first), mode 0600, synced to disk
 * before it returns.
 */
export async function writeNewFile(path: string, text: string): Promise<void> {
  await Deno.remove(path).catch(() => {});
  const file = await Deno.open(path, { write: true, createNew: true, mode: 0o600 });
  try {
    const bytes = new TextEncoder().encode(text);
    for (let done = 0; done < bytes.length;) done += await file.write(bytes.subarray(done));
    await file.syncData();
  } finally {
    file.close();
  }
}

/** What {@link settlePair} needs. */
export interface SettleOptions {
  readonly nodeId: string;
  readonly files: PairFiles;
  readonly log: (line: string) => void;
  /** The time certificates are judged at (tests pass one). */
  readonly now?: Date;
}

/**
 * Completes a pair a crash left pending (see the module doc); nothing when there is none or it is
 * not this node's.
 *
 * @returns what was renamed into place (empty when nothing was)
 */
export async function settlePair(options: SettleOptions): Promise<string[]> {
  const { nodeId, files, log } = options;
  const now = options.now ?? new Date();
  const pendingPem = await readText(`${files.certFile}.new`);
  const waitingKey = await readText(`${files.keyFile}.new`, true);
  if (pendingPem === undefined && waitingKey === undefined) return []; // the usual boot
  const rootsPem = await readNamedFile(files.caFile, "hub.ca_file", PEM).catch(() => undefined);
  if (rootsPem === undefined) return [];
  const judge = (pem: string | undefined) => {
    const judged = pem === undefined ? undefined : judgeNodeChain(pem, { nodeId, rootsPem, now });
    return judged && "leaf" in judged ? judged : undefined;
  };
  const pending = judge(pendingPem);
  const current = judge(await readText(files.certFile));
  const keys = { waiting: waitingKey, current: await readText(files.keyFile, true) };
  let moves: string[] = [];
  if (pending && await isCurrentFor(pending, current, files.secretFile)) {
    if (keys.waiting !== undefined && holdsKey(pending, keys.waiting)) moves = ["key", "cert"];
    else if (keys.current !== undefined && holdsKey(pending, keys.current)) moves = ["cert"];
  } else if (
    current && !(keys.current !== undefined && holdsKey(current, keys.current)) &&
    keys.waiting !== undefined && holdsKey(current, keys.waiting)
  ) moves = ["key"];
  const renamed: string[] = [];
  for (const move of moves) {
    const file = move === "key" ? files.keyFile : files.certFile;
    await Deno.rename(`${file}.new`, file);
    renamed.push(`${file}.new`);
  }
  if (renamed.length > 0) {
    log(
      `portcullis: completed the node's key and certificate a crash left half written: ` +
        `${renamed.join(" and ")} renamed into place (certificate until ` +
        `${(pending ?? current)!.notAfter.toISOString()})`,
    );
  }
  return renamed;
}

/**
 * Whether a pending certificate is newer than what it would replace: not older than the one in
 * place, and (with no certificate in place) issued after the registration secret beside it was
 * made — an older one belongs to an incarnation the secret replaces.
 */
async function isCurrentFor(
  pending: NodeChain,
  current: NodeChain | undefined,
  secretFile: string | undefined,
): Promise<boolean> {
  if (current) return pending.notBefore >= current.notBefore;
  const made = secretFile ? await secretMadeAt(secretFile) : undefined;
  return made === undefined || issuedAt(pending) >= made.getTime();
}

/**
 * Removes the registration secret when the certificate in place was issued after the secret was
 * made: that certificate's registration spent it (a crash after the renames, before the secret
 * was removed, left it behind). A secret made later — a node being provisioned again — stays.
 *
 * @returns true when the secret was removed
 */
export async function dropSpentSecret(options: SettleOptions): Promise<boolean> {
  const { nodeId, files, log } = options;
  if (!files.secretFile) return false;
  const made = await secretMadeAt(files.secretFile);
  if (made === undefined) return false;
  const rootsPem = await readNamedFile(files.caFile, "hub.ca_file", PEM).catch(() => undefined);
  const certPem = await readText(files.certFile);
  const keyPem = await readText(files.keyFile, true);
  if (rootsPem === undefined || certPem === undefined || keyPem === undefined) return false;
  const now = options.now ?? new Date();
  const current = judgeNodeChain(certPem, { nodeId, rootsPem, now });
  if (!("leaf" in current) || !holdsKey(current, keyPem)) return false;
  if (issuedAt(current) < made.getTime()) return false;
  await Deno.remove(files.secretFile);
  log(
    `portcullis: removed the registration secret ${files.secretFile}: the certificate in place ` +
      "was issued for it (a crash had left it behind)",
  );
  return true;
}

/**
 * When the hub issued a certificate, at the latest: its `notBefore` is set back by `SKEW_MS`
 * (trust/ca.ts) and written in whole seconds, so up to a second more is allowed.
 */
function issuedAt(chain: NodeChain): number {
  return chain.notBefore.getTime() + SKEW_MS + 1000;
}

/** When `hub add-node` made the secret (undefined: no readable secret, or it does not say). */
async function secretMadeAt(file: string): Promise<Date | undefined> {
  return await readNodeSecretFile(file).then((s) => s.createdAt, () => undefined);
}

/**
 * A file's text, or undefined when it cannot be read (absent, not granted, or — for a `secret` —
 * readable by group or others).
 */
async function readText(file: string, secret = false): Promise<string | undefined> {
  return await readNamedFile(file, "file", { ...PEM, secret }).catch(() => undefined);
}
