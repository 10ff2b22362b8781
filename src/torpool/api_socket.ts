/**
 * The pool API's Unix socket, owned for the pool's whole life: taken over safely at start, served
 * again when it is deleted, and never handed to a Tor process.
 *
 * - **Close-on-exec.** Measured in Deno 2.9.6 (strace): `node:net`'s `server.listen(path)` creates
 *   its socket with `socket(AF_UNIX, SOCK_STREAM, 0)` — no `SOCK_CLOEXEC` — so every Tor the pool
 *   spawned held the listening socket (`/proc/<tor>/fd`, `ss -xlp`), and after the pool was killed
 *   the orphans kept it until they noticed (up to 15 s). Every other descriptor the process makes
 *   (`Deno.listen`, `Deno.serve`, `Deno.connect`, `node:net` TCP listeners and clients, child
 *   pipes, files) is created close-on-exec, so the socket is bound with `Deno.serve` instead.
 * - **Take-over.** A socket file left behind is taken over only when no supervisor answers on it:
 *   a refused connection, or a connection on which no HTTP answer comes within
 *   {@link ANSWER_MS} (a process that holds the listener without serving it), makes it stale; an
 *   answer refuses the start, naming the path. Anything that is not a socket is never removed.
 * - **Deleted socket.** The path is looked at every {@link WATCH_MS}: a missing socket is bound
 *   again (one log line); a socket replaced by another file is left alone (one log line).
 *
 * Deno removes a Unix socket's path when its listener closes, whichever file the path holds by
 * then; so a replaced path is left bound until the pool stops, and a rebind closes the old server
 * before it binds the new one.
 *
 * @module
 */
import { dirname } from "node:path";

/** How long a socket's owner has to answer `GET /health` before the socket counts as stale. */
export const ANSWER_MS = 2000;
/** How often the served path is checked for deletion. */
export const WATCH_MS = 1000;

/** A request handler, as `Deno.serve` takes it. */
export type ApiHandler = (request: Request) => Response | Promise<Response>;

/**
 * Makes the socket's folder (mode 0700) if it is missing, and refuses one that others may write
 * to: whoever can write there could replace the socket with their own.
 *
 * @throws {Error} naming the folder and its mode
 */
export async function privateFolder(dir: string): Promise<void> {
  await Deno.mkdir(dir, { recursive: true, mode: 0o700 });
  const mode = (await Deno.stat(dir)).mode ?? 0;
  if ((mode & 0o022) !== 0) {
    throw new Error(
      `Cannot serve the pool API in ${dir}: the folder is writable by others ` +
        `(mode ${(mode & 0o777).toString(8)})`,
    );
  }
}

/**
 * Frees `path` for a new socket: nothing there, or a stale socket (removed).
 *
 * @returns why a stale socket was removed (for the log), or undefined when the path was free
 * @throws {Error} when a supervisor answers on the socket, or the path is not a socket
 */
export async function claimSocket(path: string, answerMs = ANSWER_MS): Promise<string | undefined> {
  let info: Deno.FileInfo;
  try {
    info = await Deno.lstat(path);
  } catch (error) {
    if (error instanceof Deno.errors.NotFound) return undefined;
    throw error;
  }
  if (!info.isSocket) {
    throw new Error(`Cannot serve the pool API: ${path} exists and is not a socket`);
  }
  const seen = await answerOn(path, answerMs);
  if (seen === "answered") {
    throw new Error(
      `Cannot serve the pool API: ${path} is in use: a running pool answers on it ` +
        "(stop it first, or give this pool another api_socket)",
    );
  }
  await Deno.remove(path).catch((error) => {
    if (!(error instanceof Deno.errors.NotFound)) throw error;
  });
  return seen === "refused"
    ? `removed a stale socket at ${path} (connection refused)`
    : `removed a stale socket at ${path} (nothing answered within ${answerMs} ms)`;
}

/** Whether an HTTP server answers on a Unix socket: `answered`, `refused`, or `silent`. */
async function answerOn(
  path: string,
  answerMs: number,
): Promise<"answered" | "refused" | "silent"> {
  let conn: Deno.UnixConn;
  try {
    conn = await Deno.connect({ transport: "unix", path });
  } catch (error) {
    if (error instanceof Deno.errors.ConnectionRefused) return "refused";
    if (error instanceof Deno.errors.NotFound) return "refused";
    throw new Error(
      `Cannot serve the pool API: cannot tell whether ${path} is in use (${(error as Error).name})`,
    );
  }
  const timer = setTimeout(() => conn.close(), answerMs);
  try {
    await conn.write(
      new TextEncoder().encode("GET /health HTTP/1.1\r\nHost: pool\r\nConnection: close\r\n\r\n"),
    );
    const head = new Uint8Array(8);
    const got = await conn.read(head);
    return got !== null && new TextDecoder().decode(head.subarray(0, got)).startsWith("HTTP/")
      ? "answered"
      : "silent";
  } catch {
    return "silent";
  } finally {
    clearTimeout(timer);
    try {
      conn.close();
    } catch { /* closed by the timer */ }
  }
}

/** How a served socket is run. */
export interface SocketOptions {
  /** Where the take-over and rebind lines go. */
  readonly log: (line: string) => void;
  /** How long an owner has to answer before its socket is stale (default {@link ANSWER_MS}). */
  readonly answerMs?: number;
  /** How often the path is checked (default {@link WATCH_MS}). */
  readonly watchMs?: number;
}

/** A socket served at one path, bound again when the path is deleted. */
export class ServedSocket {
  readonly path: string;
  readonly #handler: ApiHandler;
  readonly #options: SocketOptions;
  #server: Deno.HttpServer | undefined;
  #inode: number | null = null;
  #timer: ReturnType<typeof setInterval> | undefined;
  #looking = false;
  #replaced = false;
  /** How many times the socket was bound again after it was deleted. */
  rebinds = 0;

  private constructor(path: string, handler: ApiHandler, options: SocketOptions) {
    this.path = path;
    this.#handler = handler;
    this.#options = options;
  }

  /**
   * Claims the path ({@link claimSocket}), binds it (mode 0600) and starts watching it.
   *
   * @throws {Error} when the folder is open to others, a pool answers there, or binding fails
   */
  static async serve(
    path: string,
    handler: ApiHandler,
    options: SocketOptions,
  ): Promise<ServedSocket> {
    await privateFolder(dirname(path));
    const stale = await claimSocket(path, options.answerMs);
    if (stale) options.log(`warning: api socket: ${stale}`);
    const served = new ServedSocket(path, handler, options);
    await served.#bind();
    served.#timer = setInterval(() => void served.#look(), options.watchMs ?? WATCH_MS);
    Deno.unrefTimer(served.#timer);
    return served;
  }

  /** Stops watching and serving; Deno removes the socket file with the listener. */
  async close(): Promise<void> {
    clearInterval(this.#timer);
    this.#timer = undefined;
    const server = this.#server;
    this.#server = undefined;
    await server?.shutdown();
  }

  async #bind(): Promise<void> {
    const server = Deno.serve({
      path: this.path,
      onListen() {},
      onError: () => new Response(null, { status: 500 }),
    }, this.#handler);
    this.#server = server;
    try {
      await Deno.chmod(this.path, 0o600);
      this.#inode = (await Deno.lstat(this.path)).ino;
    } catch (error) {
      this.#server = undefined;
      await server.shutdown();
      throw error;
    }
  }

  /** One look at the path: bind again when it is gone; say once when another file took it. */
  async #look(): Promise<void> {
    if (this.#looking || this.#timer === undefined) return;
    this.#looking = true;
    try {
      const now = await Deno.lstat(this.path).then((info) => info.ino, () => undefined);
      if (now === this.#inode) {
        this.#replaced = false;
      } else if (now === undefined) {
        await this.#server?.shutdown();
        if (this.#timer === undefined) return;
        await this.#bind();
        this.rebinds++;
        this.#replaced = false;
        this.#options.log(`warning: api socket ${this.path} was deleted: serving it again`);
      } else if (!this.#replaced) {
        this.#replaced = true;
        this.#options.log(
          `warning: api socket ${this.path} was replaced by another file: leaving it; ` +
            "the API answers there no more until the file is removed",
        );
      }
    } catch (error) {
      this.#options.log(
        `api socket ${this.path}: cannot serve it again: ${(error as Error).message}`,
      );
    } finally {
      this.#looking = false;
    }
  }
}
