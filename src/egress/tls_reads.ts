/**
 * Backpressure on the read side of a `node:tls` socket. On Deno 2.9.6 `pause()` on a `node:tls`
 * socket (server or client side) stops the TLS layer handing data to JavaScript, but not the TCP
 * socket under it: the bytes keep being read from the kernel and decrypted into memory. Measured
 * (a paused server socket, a peer sending as fast as it can for 3 s): 877 MB taken, the process at
 * 1.18 GB; a plain `node:net` socket paused the same way took 2.8 MB (the kernel's buffers) and the
 * process stayed at 45 MB. So every pipe whose source is a TLS socket — the SOCKS relay, the
 * tunnel, the edge's dial to the hub — buffered whatever a peer sent while the other side was
 * slow, without bound.
 *
 * {@link holdTlsReads} makes the socket's handle stop and start the TCP handle under it with its
 * own reads, so a paused TLS socket is read no further than a paused TCP socket (same measurement:
 * 2.8 MB taken, 67 MB process). On a runtime whose TLS handle has no TCP handle under it (node
 * proper, where pause already works), it does nothing.
 *
 * @module
 */
import type { TLSSocket } from "node:tls";

/** The parts of a native stream handle this module touches. */
interface ReadHandle {
  readStart?(): unknown;
  readStop?(): unknown;
  _parent?: unknown;
  _nativeTcpHandle?: unknown;
}

/** Marks a handle already wrapped, so a socket passed twice is wrapped once. */
const HELD = Symbol("portcullis.tlsReadsHeld");

/**
 * Makes `socket.pause()` stop reading from the TCP socket under the TLS layer, and resuming start
 * it again (see the module doc).
 *
 * @param socket a `node:tls` socket (client or server side), before or after its handshake
 * @returns true when the socket's handle was wrapped (false: nothing under it to hold)
 */
export function holdTlsReads(socket: TLSSocket): boolean {
  const handle = (socket as unknown as { _handle?: ReadHandle & { [HELD]?: true } })._handle;
  if (!handle || typeof handle.readStop !== "function" || typeof handle.readStart !== "function") {
    return false;
  }
  if (handle[HELD]) return true;
  if (tcpUnder(handle) === undefined) return false;
  const stop = handle.readStop;
  const start = handle.readStart;
  handle.readStop = function readStopWithTcp(this: ReadHandle) {
    const result = stop.call(this);
    tcpUnder(this)?.readStop?.();
    return result;
  };
  handle.readStart = function readStartWithTcp(this: ReadHandle) {
    tcpUnder(this)?.readStart?.();
    return start.call(this);
  };
  handle[HELD] = true;
  return true;
}

/** The TCP handle a TLS handle reads from, if it has one this module can stop. */
function tcpUnder(handle: ReadHandle): ReadHandle | undefined {
  const under = (handle._nativeTcpHandle ?? handle._parent) as
    | (ReadHandle & { _handle?: ReadHandle })
    | undefined;
  if (!under || typeof under !== "object") return undefined;
  const tcp = typeof under.readStop === "function" ? under : under._handle;
  return tcp && typeof tcp.readStop === "function" && typeof tcp.readStart === "function"
    ? tcp
    : undefined;
}
