/**
 * The way out to `direct` targets: a `node:http` agent whose connections go straight to the
 * backend (each target a granted `--allow-net` entry), as `node:net` sockets for node's client or
 * as `Deno.TcpConn`s the gateway reads itself (owned_conns.ts). Refused, bounded and pooled like
 * the SOCKS agent's connections (agents.ts); a connection that fails is a
 * {@link DirectConnectError}, so that an attempt classifies it like a SOCKS failure.
 *
 * @module
 */
import http from "node:http";
import net from "node:net";
import type { Duplex } from "node:stream";
import {
  AGENT_OPTIONS,
  type AgentSettings,
  type Callback,
  Connecting,
  connectLimit,
  EgressRefusal,
  handshakeSignal,
  LATER,
  MAX_FREE_SOCKETS,
  type OwnedDial,
  ownedKey,
  secured,
  type Target,
} from "./agents.ts";
import { OwnedConn, OwnedConns } from "./owned_conns.ts";
import { poolName } from "./upstream_tls.ts";

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

/** Opens connections straight to `direct` targets (each one a granted `--allow-net` entry). */
export class DirectAgent extends http.Agent {
  /** Connects in flight. */
  readonly connecting = new Connecting();
  /** The connections the gateway reads itself (owned_conns.ts). */
  readonly owned = new OwnedConns(MAX_FREE_SOCKETS);
  readonly ownable = true;
  readonly #timeoutMs: number;
  readonly #refuse?: AgentSettings["refuse"];

  /** @param settings connect timeout and idle keep-alive time */
  constructor(settings: AgentSettings) {
    super(AGENT_OPTIONS);
    this.#timeoutMs = settings.connectTimeoutMs;
    this.#refuse = settings.refuse;
  }

  /** The pool a connection belongs to: per destination, and per TLS identity (upstream_tls.ts). */
  override getName(options?: http.ClientRequestArgs): string {
    return poolName(super.getName(options), options ?? {});
  }

  /** Called by node for each new upstream connection. */
  override createConnection(options: http.ClientRequestArgs, callback?: Callback): Duplex {
    const target = { host: options.host ?? "", port: Number(options.port ?? 80) };
    const refusal = this.#refuse?.(target.host, target.port);
    if (refusal !== undefined) {
      callback?.(new EgressRefusal(refusal), LATER);
      return LATER;
    }
    const started = performance.now();
    const timeoutMs = connectLimit(options, this.#timeoutMs);
    const socket = connectDirect(target, { connectTimeoutMs: timeoutMs }, handshakeSignal(options));
    const pending = secured(socket, options, { timeoutMs, started });
    this.connecting.track(pending)
      .then((socket) => callback?.(null, socket), (error) => callback?.(error, LATER));
    return LATER;
  }

  /** Dials a connection the gateway reads itself, refused and bounded like node's. */
  async dialOwned(
    target: Target,
    limits: OwnedDial,
  ): Promise<{ conn: OwnedConn; head: Uint8Array }> {
    const refusal = this.#refuse?.(target.host, target.port);
    if (refusal !== undefined) throw new EgressRefusal(refusal);
    const timeoutMs = limits.timeoutMs ?? this.#timeoutMs;
    const conn = await this.connecting.track(dialDirect(target, timeoutMs, limits.signal));
    return { conn: new OwnedConn(conn, ownedKey(target)), head: new Uint8Array(0) };
  }

  /** Closes node's sockets and the owned connections. */
  override destroy(): void {
    this.owned.closeAll();
    super.destroy();
  }
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
