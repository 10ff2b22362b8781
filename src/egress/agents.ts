/**
 * The ways out, as `node:http` agents that keep upstream connections alive: one agent per SOCKS
 * instance (each new connection is a SOCKS5 CONNECT with remote name resolution through that
 * instance), and one agent for `direct` targets. Both bound the time to a usable connection.
 *
 * @module
 */
import http from "node:http";
import net from "node:net";
import type { Duplex } from "node:stream";
import { socksConnect, type SocksInstance } from "./socks5.ts";

/** Agent settings shared by every way out. */
export interface AgentSettings {
  /** Time allowed for a usable connection (TCP, plus the SOCKS handshake). */
  readonly connectTimeoutMs: number;
  /** Idle keep-alive upstream connections are closed after this long (by the idle watch). */
  readonly idleSocketMs: number;
}

type Callback = (error: Error | null, stream: Duplex) => void;

/**
 * node's agent also accepts the asynchronous form of `createConnection`: return nothing and call
 * back with the socket later. Its type declaration only knows the synchronous form.
 */
const LATER = undefined as unknown as Duplex;

/** Keep-alive without node's per-socket timers: idle sockets are closed by the idle watch. */
const AGENT_OPTIONS: http.AgentOptions = {
  keepAlive: true,
  maxSockets: Infinity,
  maxFreeSockets: 256,
  scheduling: "lifo",
};

/** Opens every connection through one SOCKS5 instance. */
export class SocksAgent extends http.Agent {
  readonly instance: SocksInstance;
  readonly #timeoutMs: number;

  /**
   * @param instance the SOCKS instance
   * @param settings connect timeout and idle keep-alive time
   */
  constructor(instance: SocksInstance, settings: AgentSettings) {
    super(AGENT_OPTIONS);
    this.instance = instance;
    this.#timeoutMs = settings.connectTimeoutMs;
  }

  /** Called by node for each new upstream connection. */
  override createConnection(options: http.ClientRequestArgs, callback?: Callback): Duplex {
    const target = { host: options.host ?? "", port: Number(options.port ?? 80) };
    socksConnect(this.instance, target, { timeoutMs: this.#timeoutMs })
      .then((socket) => callback?.(null, socket), (error) => callback?.(error, LATER));
    return LATER;
  }
}

/** Why a direct connection failed, so it can be classified like a SOCKS failure. */
export class DirectConnectError extends Error {
  readonly kind: "timeout" | "unreachable";

  /** @param kind timeout or unreachable */
  constructor(kind: "timeout" | "unreachable", options?: { cause?: unknown }) {
    super(kind === "timeout" ? "Direct connection timed out" : "Direct connection failed", options);
    this.name = "DirectConnectError";
    this.kind = kind;
  }
}

/** Opens connections straight to `direct` targets (each one a granted `--allow-net` entry). */
export class DirectAgent extends http.Agent {
  readonly #timeoutMs: number;

  /** @param settings connect timeout and idle keep-alive time */
  constructor(settings: AgentSettings) {
    super(AGENT_OPTIONS);
    this.#timeoutMs = settings.connectTimeoutMs;
  }

  /** Called by node for each new upstream connection. */
  override createConnection(options: http.ClientRequestArgs, callback?: Callback): Duplex {
    const target = { host: options.host ?? "", port: Number(options.port ?? 80) };
    connectDirect(target, { connectTimeoutMs: this.#timeoutMs })
      .then((socket) => callback?.(null, socket), (error) => callback?.(error, LATER));
    return LATER;
  }
}

/**
 * Opens a TCP connection to a `direct` target within the connect timeout.
 *
 * @throws {DirectConnectError} on timeout or failure (the cause keeps Deno's error)
 */
export function connectDirect(
  target: { host: string; port: number },
  settings: { connectTimeoutMs: number },
): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    let socket: net.Socket | undefined;
    const timer = setTimeout(
      () => fail(new DirectConnectError("timeout")),
      settings.connectTimeoutMs,
    );
    function fail(error: Error) {
      clearTimeout(timer);
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
      resolve(socket!); // the error listener stays: an error later only destroys the socket
    });
  });
}
