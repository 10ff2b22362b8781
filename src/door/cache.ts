/**
 * The door's cache folder: `view.json`, the last good view (so a restart while the hub is away
 * still serves), and `revoked.json`, left by a revocation so a restart refuses to serve. Both are
 * written durably — a temporary file (mode 0600), flushed, renamed over the target, the folder
 * flushed (`src/live/durable_write.ts`) — so a crash or a power cut leaves the old file or the new
 * one, never half of one; the folder is made 0700. A cached view is served only if it hashes to
 * the hash stored beside it.
 *
 * @module
 */
import { join } from "node:path";
import { describeIoError } from "../config/yaml_file.ts";
import { writeDurably } from "../live/durable_write.ts";
import { hashView, type HeldView, isView } from "./view.ts";

/** The cached view's file name. */
export const VIEW_FILE = "view.json";
/** The revocation record's file name. */
export const REVOKED_FILE = "revoked.json";

/** What the cache folder held. */
export type CachedView =
  | { readonly state: "none" }
  | { readonly state: "verified"; readonly held: HeldView }
  | { readonly state: "refused"; readonly reason: string };

/** A revocation, as recorded. */
export interface Revocation {
  readonly at: string;
  readonly reason: string;
}

/** Reads the cached view and checks its hash. */
export async function readCachedView(cacheDir: string): Promise<CachedView> {
  const text = await readOptional(join(cacheDir, VIEW_FILE));
  if (text === undefined) return { state: "none" };
  let value: { hash?: unknown; view?: unknown };
  try {
    value = JSON.parse(text);
  } catch {
    return { state: "refused", reason: `${VIEW_FILE} is not JSON` };
  }
  if (!isView(value?.view)) return { state: "refused", reason: `${VIEW_FILE} holds no view` };
  const hash = hashView(value.view);
  if (hash !== value.hash) {
    return {
      state: "refused",
      reason: `${VIEW_FILE} hashes to ${hash.slice(0, 12)}, not its hash`,
    };
  }
  return { state: "verified", held: { hash, view: value.view } };
}

/** Writes the view (atomically, mode 0600). */
export async function writeCachedView(cacheDir: string, held: HeldView): Promise<void> {
  await writeDurably(cacheDir, VIEW_FILE, JSON.stringify({ hash: held.hash, view: held.view }));
}

/** Deletes the cached view (none is no error). */
export async function deleteCachedView(cacheDir: string): Promise<void> {
  await Deno.remove(join(cacheDir, VIEW_FILE)).catch((error) => {
    if (!(error instanceof Deno.errors.NotFound)) throw error;
  });
}

/** The revocation record, if the door was revoked. */
export async function readRevocation(cacheDir: string): Promise<Revocation | undefined> {
  const text = await readOptional(join(cacheDir, REVOKED_FILE));
  if (text === undefined) return undefined;
  try {
    const value = JSON.parse(text);
    return { at: String(value?.at ?? "an unknown time"), reason: String(value?.reason ?? "") };
  } catch {
    return { at: "an unknown time", reason: `${REVOKED_FILE} is not JSON` };
  }
}

/** Records a revocation (atomically, mode 0600). */
export async function writeRevocation(cacheDir: string, revocation: Revocation): Promise<void> {
  await writeDurably(cacheDir, REVOKED_FILE, JSON.stringify(revocation) + "\n");
}

/** Removes the revocation record (after the door registered again). */
export async function removeRevocation(cacheDir: string): Promise<void> {
  await Deno.remove(join(cacheDir, REVOKED_FILE)).catch((error) => {
    if (!(error instanceof Deno.errors.NotFound)) throw error;
  });
}

/** A file's text, or undefined when it does not exist; other failures are thrown, named. */
async function readOptional(file: string): Promise<string | undefined> {
  try {
    return await Deno.readTextFile(file);
  } catch (error) {
    if (error instanceof Deno.errors.NotFound) return undefined;
    throw new Error(`Cannot read ${file}: ${describeIoError(error)}`);
  }
}
