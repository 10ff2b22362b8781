/**
 * The ways out, as `node:http` agents that keep upstream connections alive: one agent per SOCKS
 * instance (each new connection is a SOCKS5 CONNECT with remote name resolution through that
 * instance), and one agent for `direct` targets. Both bound the time to a usable connection, and
 * both run the TLS handshake of an `https://` backend inside that time (upstream_tls.ts), pooling
 * TLS connections apart per TLS identity.
 *
 * @module
 */
import http from "node:http";
import net from "node:net";
import type { Duplex } from "node:stream";
import { socksConnect, type SocksInstance } from "./socks5.ts";
import { socksDialConn } from "./socks5_conn.ts";
import { OwnedConn, OwnedConns } from "./owned_conns.ts";
import type { SocksDial } from "./transport.ts";
import { poolName, startUpstreamTls, upstreamTlsOf } from "./upstream_tls.ts";

/** Agent settings shared by every way out. */
export interface AgentSettings {
  /** Time allowed for a usable connection (TCP, plus the SOCKS handshake). */
  readonly connectTimeoutMs: number;
  /** Idle keep-alive upstream connections are closed after this long (by the idle watch). */
  readonly idleSocketMs: number;
  /**
   * Why a destination must not be dialled (an internal address the operator did not allow, see
   * destinations.ts), checked before any SOCKS CONNECT or direct dial; undefined when it may be.
   */
  readonly refuse?: (host: string, port: number) => string | undefined;
  /**
   * Why a tunnel a SOCKS instance made to `host:port` must not be used, given the address the
   * instance connected from (`bound`); undefined when it may.
   */
  readonly refuseBound?: (host: string, port: number, bound: string) => string | undefined;
}

/** A destination the egress refused before dialling (not a failure of any instance or backend). */
export class EgressRefusal extends Error {
  /** @param reason the sentence from the destination check */
  constructor(reason: string) {
    super(reason);
    this.name = "EgressRefusal";
  }
}

type Callback = (error: Error | null, stream: Duplex) => void;

/**
 * The request option that carries an attempt's abort signal to the agent's `createConnection`
 * (node hands request options through to it): when the attempt is given up while its connection
 * is still being made, the TCP connect or SOCKS handshake stops and the socket is closed, rather
 * than finishing for nobody and sitting in the pool.
 */
export const HANDSHAKE_SIGNAL = "portcullisHandshakeSignal";

/** The request option that carries a route's per-attempt connect limit (`proxy.connect_ms`). */
export const CONNECT_MS = "portcullisConnectMs";

/** The connect limit an attempt asked for, else the agent's own. */
function connectLimit(options: http.ClientRequestArgs, own: number): number {
  const given = (options as Record<string, unknown>)[CONNECT_MS];
  return typeof given === "number" && given > 0 ? given : own;
}

/** The abort signal an attempt passed in its request options, if any. */
function handshakeSignal(options: http.ClientRequestArgs): AbortSignal | undefined {
  const signal = (options as Record<string, unknown>)[HANDSHAKE_SIGNAL];
  return signal instanceof AbortSignal ? signal : undefined;
}

/**
 * node's agent also accepts the asynchronous form of `createConnection`: return nothing and call
 * back with the socket later. Its type declaration only knows the synchronous form.
 */
const LATER = undefined as unknown as Duplex;

/**
 * Keep-alive without node's per-socket timers: idle sockets are closed by the idle watch. At most
 * 32 idle connections per destination and way out: the pool saves handshakes (a Tor circuit is
 * slow to build) without holding descriptors a burst left behind (see descriptors.ts).
 */
export const MAX_FREE_SOCKETS = 32;
const AGENT_OPTIONS: http.AgentOptions = {
  keepAlive: true,
  maxSockets: Infinity,
  maxFreeSockets: MAX_FREE_SOCKETS,
  scheduling: "lifo",
};

/**
 * `pending`'s connection, with the TLS handshake of an `https://` attempt run on it within what is
 * left of `timeoutMs` (started at `started`).
 */
function secured(
  pending: Promise<Duplex>,
  options: http.ClientRequestArgs,
  limits: { timeoutMs: number; started: number },
): Promise<Duplex> {
  const settings = upstreamTlsOf(options);
  if (!settings) return pending;
  return pending.then((socket) =>
    startUpstreamTls(socket, settings, {
      timeoutMs: limits.timeoutMs - (performance.now() - limits.started),
      signal: handshakeSignal(options),
    })
  );
}

/** Counts connections being made (TCP connect and SOCKS handshake, before node has them). */
class Connecting {
  count = 0;

  /** Counts `pending` until it settles. */
  track<T>(pending: Promise<T>): Promise<T> {
    this.count++;
    const done = () => this.count--;
    pending.then(done, done);
    return pending;
  }
}

/**
 * Opens every connection through one SOCKS5 instance, with one set of credentials: with tenant
 * isolation, one agent per instance and tenant, so a kept-alive connection never changes tenant.
 */
export class SocksAgent extends http.Agent {
  readonly instance: SocksInstance;
  /** Handshakes in flight. */
  readonly connecting = new Connecting();
  /** The connections the gateway reads itself (owned_conns.ts). */
  readonly owned = new OwnedConns(MAX_FREE_SOCKETS);
  readonly #timeoutMs: number;
  readonly #refuse?: AgentSettings["refuse"];
  readonly #refuseBound?: AgentSettings["refuseBound"];
  readonly #dial?: SocksDial;

  /**
   * @param instance the SOCKS instance and the credentials to offer it
   * @param settings connect timeout and idle keep-alive time
   * @param dial how the instance is reached (default: plain TCP to its address)
   */
  constructor(instance: SocksInstance, settings: AgentSettings, dial?: SocksDial) {
    super(AGENT_OPTIONS);
    this.instance = instance;
    this.#timeoutMs = settings.connectTimeoutMs;
    this.#refuse = settings.refuse;
    this.#refuseBound = settings.refuseBound;
    this.#dial = dial;
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
    const signal = handshakeSignal(options);
    const refuseBound = this.#refuseBound;
    const onBound = refuseBound &&
      ((bound: string) => refuseBound(target.host, target.port, bound));
    const started = performance.now();
    const timeoutMs = connectLimit(options, this.#timeoutMs);
    const tunnel = socksConnect(this.instance, target, {
      timeoutMs,
      signal,
      onBound,
      dial: this.#dial,
    });
    const pending = secured(tunnel, options, { timeoutMs, started });
    this.connecting.track(pending)
      .then((socket) => callback?.(null, socket), (error) => callback?.(error, LATER));
    return LATER;
  }

  /** True when this instance is reached over plain TCP, so its connections can be owned. */
  get ownable(): boolean {
    return this.#dial === undefined;
  }

  /**
   * Dials a connection the gateway reads itself: SOCKS5 CONNECT to `target` on a `Deno.TcpConn`,
   * refused, bounded and classified like {@link createConnection}'s.
   */
  async dialOwned(
    target: Target,
    limits: OwnedDial,
  ): Promise<{ conn: OwnedConn; head: Uint8Array }> {
    const refusal = this.#refuse?.(target.host, target.port);
    if (refusal !== undefined) throw new EgressRefusal(refusal);
    const refuseBound = this.#refuseBound;
    const onBound = refuseBound &&
      ((bound: string) => refuseBound(target.host, target.port, bound));
    const timeoutMs = limits.timeoutMs ?? this.#timeoutMs;
    const dialled = socksDialConn(this.instance, target, { ...limits, timeoutMs, onBound });
    const { conn, leftover } = await this.connecting.track(dialled);
    return { conn: new OwnedConn(conn, ownedKey(target)), head: leftover };
  }

  /** Closes node's sockets and the owned connections. */
  override destroy(): void {
    this.owned.closeAll();
    super.destroy();
  }
}

/** A destination as the agents dial it. */
export interface Target {
  readonly host: string;
  readonly port: number;
}

/** Limits of one owned dial: the route's connect limit (else the agent's), and the abort. */
export interface OwnedDial {
  readonly timeoutMs?: number;
  readonly signal?: AbortSignal;
}

/** The owned pool a destination's connections share. */
export function ownedKey(target: Target): string {
  return `${target.host}:${target.port}`;
}

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
