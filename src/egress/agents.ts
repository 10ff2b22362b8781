/**
 * The ways out, as `node:http` agents that keep upstream connections alive: one agent per SOCKS
 * instance (each new connection is a SOCKS5 CONNECT with remote name resolution through that
 * instance), and one agent for `direct` targets (direct_agent.ts). Both bound the time to a usable
 * connection, and both run the TLS handshake of an `https://` backend inside that time
 * (upstream_tls.ts), pooling TLS connections apart per TLS identity. This module holds the SOCKS
 * agent and what the two share: their settings, the request options an attempt hands them, the
 * pool's limits, the TLS step, and the count of connections being made.
 *
 * @module
 */
import http from "node:http";
import type { Duplex } from "node:stream";
import { socksConnect, type SocksInstance } from "./socks5.ts";
import { socksDialConn } from "./socks5_conn.ts";
import { OwnedConn, OwnedConns } from "./owned_conns.ts";
import { SETTLE_MS, settleFreeSockets } from "./reuse_settle.ts";
import { dropFreeSockets, judgeFreeSockets, type ReuseCheck } from "./reuse_judge.ts";
import { isTcpDial, type SocksDial } from "./transport.ts";
import { poolName, startUpstreamTls, upstreamTlsOf } from "./upstream_tls.ts";

/** Agent settings shared by every way out. */
export interface AgentSettings {
  /** Time allowed for a usable connection (TCP, plus the SOCKS handshake). */
  readonly connectTimeoutMs: number;
  /** Idle keep-alive upstream connections are closed after this long (by the idle watch). */
  readonly idleSocketMs: number;
  /**
   * How long a pooled connection back from an exchange stays out of other client connections'
   * reach (reuse_settle.ts); 0: none. Absent: {@link SETTLE_MS}.
   */
  readonly reuseSettleMs?: number;
  /**
   * Why a destination must not be dialled (one of this process's listeners, an internal address the
   * operator did not allow: own_listener.ts, destinations.ts), checked before any SOCKS CONNECT or
   * direct dial; undefined when it may be. A promise when the check reads the machine first.
   */
  readonly refuse?: (
    host: string,
    port: number,
  ) => string | undefined | Promise<string | undefined>;
  /**
   * Why a pooled connection to `host:port` may not be used again (the same check, against the
   * machine as it is now: reach_verdicts.ts); undefined when it may. Absent: reused unjudged.
   */
  readonly refuseReuse?: ReuseCheck;
  /**
   * Why a tunnel a SOCKS instance made to `host:port` must not be used, given the address the
   * instance connected from (`bound`); undefined when it may.
   */
  readonly refuseBound?: (host: string, port: number, bound: string) => string | undefined;
  /**
   * Why a direct connection to `host:port` must not be used, given the address its socket reached
   * (`peer`: what the system resolver made of the name); undefined when it may.
   */
  readonly refusePeer?: (host: string, port: number, peer: string) => string | undefined;
}

/** A destination the egress refused before dialling (not a failure of any instance or backend). */
export class EgressRefusal extends Error {
  /** @param reason the sentence from the destination check */
  constructor(reason: string) {
    super(reason);
    this.name = "EgressRefusal";
  }
}

/** Throws the refusal as an {@link EgressRefusal}, or goes on with `next` when there is none. */
function refusedOr<T>(next: () => Promise<T>): (refusal: string | undefined) => Promise<T> {
  return function refusedOrNext(refusal) {
    if (refusal !== undefined) throw new EgressRefusal(refusal);
    return next();
  };
}

/** node's callback for a connection made asynchronously by `createConnection`. */
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
/** node's options for every agent: keep-alive, no socket limit, at most {@link MAX_FREE_SOCKETS} idle. */
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
 * What every way out does alike: node's keep-alive pool named per TLS identity, the connections the
 * gateway reads itself, the count of connections being made, and the order of making one — the
 * destination check first, then the dial within the connect limit (and for node, the TLS handshake
 * inside the same limit). A way out says only how it opens a connection ({@link open},
 * {@link openOwned}).
 */
export abstract class WayAgent extends http.Agent {
  /** Connections being made. */
  readonly connecting = new Connecting();
  /** The connections the gateway reads itself (owned_conns.ts). */
  readonly owned: OwnedConns;
  /** True when its connections can be made as `Deno.TcpConn`s (plain TCP all the way). */
  abstract readonly ownable: boolean;
  readonly #timeoutMs: number;
  readonly #refuse?: AgentSettings["refuse"];
  readonly #refuseReuse?: ReuseCheck;
  /** The destination each of node's sockets was made for. */
  readonly #made = new WeakMap<object, Target>();

  /** @param settings connect timeout, idle keep-alive time and the destination checks */
  constructor(settings: AgentSettings) {
    super(AGENT_OPTIONS);
    const settleMs = settings.reuseSettleMs ?? SETTLE_MS;
    this.owned = new OwnedConns(MAX_FREE_SOCKETS, settleMs);
    // A socket back from an exchange settles before another client's request may have it.
    if (settleMs > 0) settleFreeSockets(this, settleMs);
    // And its destination is judged again before any request may have it.
    if (settings.refuseReuse) {
      judgeFreeSockets(this, settings.refuseReuse, (socket) => this.#made.get(socket));
    }
    this.#timeoutMs = settings.connectTimeoutMs;
    this.#refuse = settings.refuse;
    this.#refuseReuse = settings.refuseReuse;
  }

  /** Opens a connection for node's client, ready for the destination's protocol. */
  protected abstract open(target: Target, timeoutMs: number, signal?: AbortSignal): Promise<Duplex>;

  /** Opens a connection the gateway reads itself, with any bytes that came after the handshake. */
  protected abstract openOwned(
    target: Target,
    timeoutMs: number,
    signal?: AbortSignal,
  ): Promise<{ conn: Deno.TcpConn; head: Uint8Array }>;

  /** The pool a connection belongs to: per destination, and per TLS identity (upstream_tls.ts). */
  override getName(options?: http.ClientRequestArgs): string {
    return poolName(super.getName(options), options ?? {});
  }

  /** Called by node for each new upstream connection. */
  override createConnection(options: http.ClientRequestArgs, callback?: Callback): Duplex {
    const target = { host: options.host ?? "", port: Number(options.port ?? 80) };
    const refusal = this.#refuse?.(target.host, target.port);
    if (typeof refusal === "string") {
      callback?.(new EgressRefusal(refusal), LATER);
      return LATER;
    }
    const started = performance.now();
    const timeoutMs = connectLimit(options, this.#timeoutMs);
    const open = () => this.open(target, timeoutMs, handshakeSignal(options));
    const opened = refusal instanceof Promise ? refusal.then(refusedOr(open)) : open();
    const pending = secured(opened, options, { timeoutMs, started });
    this.connecting.track(pending).then((socket) => {
      this.#made.set(socket, target);
      callback?.(null, socket);
    }, (error) => callback?.(error, LATER));
    return LATER;
  }

  /**
   * An idle owned connection to `target` for client connection `owner` (owned_conns.ts `take`),
   * its destination judged again first: refused, every idle connection to it is closed and none is
   * given (the caller dials, which the destination check refuses). Undefined when none may be had.
   */
  async takeOwned(target: Target, owner?: object): Promise<OwnedConn | undefined> {
    const key = ownedKey(target);
    if (!this.owned.holds(key)) return undefined;
    const refusal = await this.#refuseReuse?.(target.host, target.port);
    if (refusal === undefined) return this.owned.take(key, owner);
    this.owned.closeIdle((idle) => idle === key);
    return undefined;
  }

  /**
   * Closes every pooled connection, node's and owned, whose destination `refused` names: what a
   * changed machine reading refuses now.
   *
   * @returns how many were closed
   */
  closeRefused(refused: (host: string, port: number) => boolean): number {
    const owned = this.owned.closeIdle((key) => {
      const target = targetOfKey(key);
      return target !== undefined && refused(target.host, target.port);
    });
    const free = dropFreeSockets(this.freeSockets as Record<string, object[] | undefined>, (s) => {
      const target = this.#made.get(s);
      return target !== undefined && refused(target.host, target.port);
    });
    return owned + free;
  }

  /**
   * Dials a connection the gateway reads itself, refused, bounded and classified like
   * {@link createConnection}'s.
   */
  async dialOwned(
    target: Target,
    limits: OwnedDial,
  ): Promise<{ conn: OwnedConn; head: Uint8Array }> {
    const refusal = await this.#refuse?.(target.host, target.port);
    if (refusal !== undefined) throw new EgressRefusal(refusal);
    const timeoutMs = limits.timeoutMs ?? this.#timeoutMs;
    const opened = this.openOwned(target, timeoutMs, limits.signal);
    const { conn, head } = await this.connecting.track(opened);
    return { conn: new OwnedConn(conn, ownedKey(target)), head };
  }

  /** Closes node's sockets and the owned connections. */
  override destroy(): void {
    this.owned.closeAll();
    super.destroy();
  }
}

/**
 * Opens every connection through one SOCKS5 instance, with one set of credentials: with tenant
 * isolation, one agent per instance and tenant, so a kept-alive connection never changes tenant.
 */
export class SocksAgent extends WayAgent {
  readonly instance: SocksInstance;
  readonly #refuseBound?: AgentSettings["refuseBound"];
  readonly #dial?: SocksDial;

  /**
   * @param instance the SOCKS instance and the credentials to offer it
   * @param settings connect timeout and idle keep-alive time
   * @param dial how the instance is reached (default: plain TCP to its address)
   */
  constructor(instance: SocksInstance, settings: AgentSettings, dial?: SocksDial) {
    super(settings);
    this.instance = instance;
    this.#refuseBound = settings.refuseBound;
    this.#dial = dial;
  }

  /** True when this instance is reached over plain TCP, so its connections can be owned. */
  get ownable(): boolean {
    return this.#dial === undefined || isTcpDial(this.#dial);
  }

  /** A SOCKS5 CONNECT over the instance's dial. */
  protected open(target: Target, timeoutMs: number, signal?: AbortSignal): Promise<Duplex> {
    const onBound = this.#onBound(target);
    return socksConnect(this.instance, target, { timeoutMs, signal, onBound, dial: this.#dial });
  }

  /** The same SOCKS5 CONNECT on a `Deno.TcpConn`. */
  protected async openOwned(
    target: Target,
    timeoutMs: number,
    signal?: AbortSignal,
  ): Promise<{ conn: Deno.TcpConn; head: Uint8Array }> {
    const onBound = this.#onBound(target);
    const { conn, leftover } = await socksDialConn(this.instance, target, {
      timeoutMs,
      signal,
      onBound,
    });
    return { conn, head: leftover };
  }

  /** Judges the address the instance connected from, for a tunnel to `target`. */
  #onBound(target: Target): ((bound: string) => string | undefined) | undefined {
    const refuseBound = this.#refuseBound;
    return refuseBound && ((bound: string) => refuseBound(target.host, target.port, bound));
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

/** The destination of an owned pool's key (the port follows the last colon). */
function targetOfKey(key: string): Target | undefined {
  const at = key.lastIndexOf(":");
  const port = Number(key.slice(at + 1));
  return at > 0 && Number.isInteger(port) ? { host: key.slice(0, at), port } : undefined;
}
