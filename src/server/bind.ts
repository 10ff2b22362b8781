/**
 * Binding a listener: TCP with an exclusive port (or `SO_REUSEPORT` for request workers), or a Unix
 * socket whose stale file is cleared first and whose mode is set to the owner only. Failures come
 * back in an operator's words, prefixed with what was being bound.
 *
 * `SO_REUSEPORT` lets any process of the same user join the port, not only this one's workers
 * (measured on Linux, Deno 2.9.6: a second `node:net` server with `reusePort` in another process
 * binds beside the first, and the kernel splits connections between them). Before request workers
 * bind with it, {@link probeUnshared} binds the address once without it: a listening socket of any
 * other process, shared or not, makes that bind fail with `EADDRINUSE`, while sockets in
 * `TIME_WAIT` do not (the listener sets `SO_REUSEADDR`).
 *
 * @module
 */
import net, { type AddressInfo, type Server, type Socket } from "node:net";
import type { ListenerAddress } from "../config/load.ts";
import { clearStaleSocket } from "./unix_socket.ts";

/**
 * Binds `server` to `address` (a stale Unix socket file is cleared first; a live one is refused).
 *
 * @param what the start of the error message, naming what was being bound
 * @throws {Error} `what` plus the reason in an operator's words
 */
export async function bindServer(
  server: Server,
  address: ListenerAddress,
  what: string,
  reusePort = false,
): Promise<void> {
  if (address.kind === "unix") {
    const busy = await clearStaleSocket(address.path);
    if (busy) throw new Error(`${what}: ${busy}`);
  }
  await new Promise<void>((resolve, reject) => {
    const fail = (error: NodeJS.ErrnoException) =>
      reject(new Error(`${what}: ${bindReason(error)}`));
    server.once("error", fail);
    const ready = async () => {
      server.off("error", fail);
      // Only the gateway's own user may connect: the socket's file mode is its peer check.
      if (address.kind === "unix") await Deno.chmod(address.path, 0o600).catch(() => {});
      resolve();
    };
    try {
      if (address.kind === "unix") server.listen({ path: address.path }, ready);
      else {
        const { hostname: host, port } = address;
        server.listen({ host, port, exclusive: true, ...(reusePort ? { reusePort } : {}) }, ready);
      }
    } catch (error) {
      fail(error as NodeJS.ErrnoException);
    }
  });
}

/** Why a bind failed, in an operator's words. */
function bindReason(error: NodeJS.ErrnoException): string {
  return error.code === "EADDRINUSE"
    ? "address already in use"
    : error.code === "EACCES"
    ? "permission denied by the OS"
    : error.code === "ENOENT"
    ? "its folder does not exist"
    : error.name === "NotCapable"
    ? "not granted by --allow-net"
    : error.message;
}

/**
 * Proves no other process listens on a TCP address before this process's request workers bind it
 * with `SO_REUSEPORT`: binds it once without port sharing, then closes it. Port 0 (any free port)
 * and Unix sockets (bound by one isolate, a live one refused) are not probed.
 *
 * @param what the start of the error message, naming what was being bound
 * @throws {Error} `what` plus `address already in use by another process`, or another bind reason
 */
export async function probeUnshared(address: ListenerAddress, what: string): Promise<void> {
  if (address.kind !== "tcp" || address.port === 0) return;
  const probe = net.createServer();
  try {
    await new Promise<void>((resolve, reject) => {
      probe.once("error", reject);
      probe.listen({ host: address.hostname, port: address.port, exclusive: true }, resolve);
    });
  } catch (error) {
    const reason = bindReason(error as NodeJS.ErrnoException);
    const inUse = (error as NodeJS.ErrnoException).code === "EADDRINUSE";
    throw new Error(`${what}: ${reason}${inUse ? " by another process" : ""}`);
  } finally {
    await new Promise<void>((resolve) =>
      probe.listening ? probe.close(() => resolve()) : resolve()
    );
  }
}

/** A server bound (or to be) at a configured address, and its live sockets. */
export interface ServerAt {
  readonly server: Server;
  readonly address: ListenerAddress;
  readonly sockets: ReadonlySet<Socket>;
}

/** Where a server actually bound: a port 0 resolved; a Unix socket as configured. */
export function boundAddress(bound: ServerAt): ListenerAddress {
  const info = bound.server.address();
  if (bound.address.kind === "unix" || info === null || typeof info === "string") {
    return bound.address;
  }
  return { kind: "tcp", hostname: (info as AddressInfo).address, port: (info as AddressInfo).port };
}

/** Closes a server (removing its socket file) and destroys its open sockets. */
export function closeServerAt(bound: ServerAt): Promise<void> {
  return new Promise((resolve) => {
    bound.server.close(async () => {
      if (bound.address.kind === "unix") await Deno.remove(bound.address.path).catch(() => {});
      resolve();
    });
    for (const socket of bound.sockets) socket.destroy();
  });
}
