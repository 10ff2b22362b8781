/**
 * Binding a listener: TCP with an exclusive port (or `SO_REUSEPORT` for request workers), or a Unix
 * socket whose stale file is cleared first and whose mode is set to the owner only. Failures come
 * back in an operator's words, prefixed with what was being bound.
 *
 * @module
 */
import type { AddressInfo, Server, Socket } from "node:net";
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
    const fail = (error: NodeJS.ErrnoException) => {
      const reason = error.code === "EADDRINUSE"
        ? "address already in use"
        : error.code === "EACCES"
        ? "permission denied by the OS"
        : error.code === "ENOENT"
        ? "its folder does not exist"
        : error.name === "NotCapable"
        ? "not granted by --allow-net"
        : error.message;
      reject(new Error(`${what}: ${reason}`));
    };
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
