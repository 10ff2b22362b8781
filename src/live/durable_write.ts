/**
 * Writing a small state file so that a crash or a power cut leaves the old file or the new one,
 * never half of one and never an empty one: the text goes to a temporary file in the same folder
 * (mode 0600), which is flushed to disk (`fsync`) before it is renamed over the target, and the
 * folder is flushed after the rename so the new name itself survives. A rename alone is atomic
 * against other processes but not against a power cut: without the first flush, ext4 and XFS may
 * commit the rename before the data and leave a zero-length file behind.
 *
 * Used by the door's cache (`src/door/cache.ts`) and the hub's remembered probe results
 * (`src/hub/mirrors/remembered.ts`); both read what they wrote back through their own check, so
 * this module promises only that the bytes on disk are one whole write.
 *
 * @module
 */
import { join } from "node:path";

/**
 * Writes `text` to `dir/name` durably (see the module doc), making `dir` (mode 0700) if needed.
 *
 * @throws {Error} when the folder cannot be made or the file cannot be written; the temporary
 *   file is removed and the old file is left as it was
 * @example
 * ```ts
 * import { writeDurably } from "./durable_write.ts";
 * const dir = await Deno.makeTempDir();
 * await writeDurably(dir, "state.json", "{}\n");
 * await Deno.readTextFile(`${dir}/state.json`); // "{}\n"
 * await Deno.remove(dir, { recursive: true });
 * ```
 */
export async function writeDurably(dir: string, name: string, text: string): Promise<void> {
  await Deno.mkdir(dir, { recursive: true, mode: 0o700 });
  const temporary = join(dir, `.${name}.${crypto.randomUUID()}`);
  try {
    const file = await Deno.open(temporary, { write: true, createNew: true, mode: 0o600 });
    try {
      const bytes = new TextEncoder().encode(text);
      let offset = 0;
      while (offset < bytes.length) offset += await file.write(bytes.subarray(offset));
      await file.sync();
    } finally {
      file.close();
    }
    await Deno.chmod(temporary, 0o600);
    await Deno.rename(temporary, join(dir, name));
  } catch (error) {
    await Deno.remove(temporary).catch(() => {});
    throw error;
  }
  await syncFolder(dir);
}

/** Flushes a folder's entries (the rename); a platform that cannot open a folder skips it. */
async function syncFolder(dir: string): Promise<void> {
  let folder: Deno.FsFile;
  try {
    folder = await Deno.open(dir, { read: true });
  } catch {
    return;
  }
  try {
    await folder.sync();
  } catch {
    /* not every file system flushes a folder; the rename is still atomic */
  } finally {
    folder.close();
  }
}
