/**
 * Unix socket listeners: a socket file left by a previous run is removed only when nothing answers
 * on it; a live socket or a file that is not a socket refuses the boot.
 *
 * @module
 */

/**
 * Makes `path` free for a new listener.
 *
 * @returns undefined when the path is free, otherwise why it cannot be used
 */
export async function clearStaleSocket(path: string): Promise<string | undefined> {
  let info: Deno.FileInfo;
  try {
    info = await Deno.lstat(path);
  } catch (error) {
    if (error instanceof Deno.errors.NotFound) return undefined;
    return `cannot inspect ${path}`;
  }
  if (!info.isSocket) return `${path} exists and is not a socket`;
  try {
    const probe = await Deno.connect({ transport: "unix", path });
    probe.close();
    return `${path} is in use by another process`;
  } catch {
    await Deno.remove(path).catch(() => {});
    return undefined;
  }
}
