/**
 * The way out to `direct` targets: a `node:http` agent whose connections go straight to the
 * backend (each target a granted `--allow-net` entry), as `node:net` sockets for node's client or
 * as `Deno.TcpConn`s the gateway reads itself (owned_conns.ts). Refused, bounded and pooled like
 * the SOCKS agent's connections (agents.ts); a connection that fails is a
 * {@link DirectConnectError}, so that an attempt classifies it like a SOCKS failure.
 *
 * @module
 */
import net from "node:net";
import type { Duplex } from "node:stream";
import { type AgentSettings, EgressRefusal, type Target, WayAgent } from "./agents.ts";

/** Why a direct connection failed, so it can be classified like a SOCKS failure. */
export class DirectConnectError extends Error {
  readonly kind: "timeout" | "unreachable" | "aborted";

  /** @param kind timeout, unreachable, or aborted (the attempt was given up) */
  constructor(kind: "timeout" | "unreachable" | "aborted", options?: { cause?: unknown }) {
    super(
      kind === "timeout"
        ? "Direct connection timed out"
        : kind === "aborted"
        ? "Direct connection abandoned"
        : "Direct connection failed",
      options,
    );
    this.name = "DirectConnectError";
    this.kind = kind;
  }
}

/**
 * Opens connections straight to `direct` targets (each one a granted `--allow-net` entry). The
 * system resolver turns a target's name into an address only as the socket connects, so the
 * address the socket reached is judged too (`refusePeer`) before anything is written on it.
 */
export class DirectAgent extends WayAgent {
  readonly ownable = true;
  readonly #refusePeer?: AgentSettings["refusePeer"];

  /** @param settings connect timeout, idle keep-alive time, the destination and peer checks */
  constructor(settings: AgentSettings) {
    super(settings);
    this.#refusePeer = settings.refusePeer;
  }

  /** A TCP connection to the target. */
  protected async open(target: Target, timeoutMs: number, signal?: AbortSignal): Promise<Duplex> {
    const socket = await connectDirect(target, { connectTimeoutMs: timeoutMs }, signal);
    return checkedPeer(socket, target, this.#refusePeer);
  }

  /** The same TCP connection as a `Deno.TcpConn`. */
  protected async openOwned(
    target: Target,
    timeoutMs: number,
    signal?: AbortSignal,
  ): Promise<{ conn: Deno.TcpConn; head: Uint8Array }> {
    const conn = await dialDirect(target, timeoutMs, signal);
    const refusal = this.#refusePeer?.(target.host, target.port, conn.remoteAddr.hostname);
    if (refusal !== undefined) {
      conn.close();
      throw new EgressRefusal(refusal);
    }
    return { conn, head: new Uint8Array(0) };
  }
}

/**
 * The connected socket, unless `refusePeer` refuses the address it reached: then it is destroyed
 * before a byte is written and the refusal is thrown.
 *
 * @throws {EgressRefusal}
 */
export function checkedPeer<S extends net.Socket>(
  socket: S,
  target: Target,
  refusePeer: AgentSettings["refusePeer"],
): S {
  const refusal = refusePeer?.(target.host, target.port, socket.remoteAddress ?? "");
  if (refusal === undefined) return socket;
  socket.destroy();
  throw new EgressRefusal(refusal);
}

/**
 * `Deno.connect` to a `direct` target within `timeoutMs`, stopped by `signal`.
 *
 * @throws {DirectConnectError} on timeout, failure or abort (the cause keeps Deno's error)
 */
async function dialDirect(
  target: Target,
  timeoutMs: number,
  signal?: AbortSignal,
): Promise<Deno.TcpConn> {
  if (signal?.aborted) throw new DirectConnectError("aborted");
  const stop = new AbortController();
  const timer = setTimeout(() => stop.abort("timeout"), timeoutMs);
  const onAbort = () => stop.abort("aborted");
  signal?.addEventListener("abort", onAbort, { once: true });
  try {
    const conn = await Deno.connect({
      hostname: target.host,
      port: target.port,
      signal: stop.signal,
    });
    conn.setNoDelay(true);
    return conn;
  } catch (error) {
    const why = stop.signal.aborted ? stop.signal.reason as "timeout" | "aborted" : "unreachable";
    throw new DirectConnectError(why, { cause: error });
  } finally {
    clearTimeout(timer);
    signal?.removeEventListener("abort", onAbort);
  }
}

/**
 * Opens a TCP connection to a `direct` target within the connect timeout.
 *
 * @param signal stops the attempt (the socket is closed) when it fires before the connect
 * @throws {DirectConnectError} on timeout, failure or abort (the cause keeps Deno's error)
 */
export function connectDirect(
  target: { host: string; port: number },
  settings: { connectTimeoutMs: number },
  signal?: AbortSignal,
): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    let socket: net.Socket | undefined;
    if (signal?.aborted) return reject(new DirectConnectError("aborted"));
    const timer = setTimeout(
      () => fail(new DirectConnectError("timeout")),
      settings.connectTimeoutMs,
    );
    const onAbort = () => fail(new DirectConnectError("aborted"));
    signal?.addEventListener("abort", onAbort, { once: true });
    function fail(error: Error) {
      clearTimeout(timer);
      signal?.removeEventListener("abort", onAbort);
      socket?.destroy();
      reject(error);
    }
    try {
      socket = net.connect({ host: target.host, port: target.port });
    } catch (error) {
      fail(new DirectConnectError("unreachable", { cause: error }));
      return;
    }
    socket.setNoDelay(true);
    socket.once("error", (error) => fail(new DirectConnectError("unreachable", { cause: error })));
    socket.once("connect", () => {
      clearTimeout(timer);
      signal?.removeEventListener("abort", onAbort);
      resolve(socket!); // the error listener stays: an error later only destroys the socket
    });
  });
}
