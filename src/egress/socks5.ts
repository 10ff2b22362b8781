/**
 * A SOCKS5 CONNECT client (RFC 1928, RFC 1929 username/password) over a `node:net` socket, for the
 * upstream `node:http` agent's `createConnection`. Destination names go to the instance as ATYP 3,
 * never resolved here (socks5h): the process may only reach the instance, and `.onion` names mean
 * nothing locally. Error messages may name the instance, never the destination (it can be secret).
 *
 * Hand-written, not `socks-proxy-agent`: the protocol is small and fixed, the gateway needs the
 * reply code to blame the instance or the destination plus one timeout and an abort per attempt,
 * and the library measured no faster or slower on Deno.
 *
 * This module is the client's face and the attempt's lifetime (socket, timeout, abort, settling
 * once); the handshake's steps are in `socks5_exchange.ts`, the bytes in `socks5_wire.ts`.
 *
 * @module
 */
import type { Socket } from "node:net";
import { type Exchange, socketListeners, type SocksFailureKind } from "./socks5_exchange.ts";
import { encodeAuth, encodeConnect } from "./socks5_wire.ts";
import { type SocksDial, tcpDial } from "./transport.ts";

export type { SocksFailureKind } from "./socks5_exchange.ts";

/** Who a failed attempt is blamed on: the SOCKS instance, or the destination behind it. */
export type SocksBlame = "instance" | "destination";

/**
 * A failed SOCKS attempt, classified. `blame` is `"destination"` for `destination_*` and
 * `"instance"` otherwise; `aborted` is blamed on the instance only because it needs some value —
 * callers should not count an abort against either.
 */
export class SocksError extends Error {
  readonly kind: SocksFailureKind;
  readonly blame: SocksBlame;
  /** The SOCKS reply code, when the instance answered the CONNECT with one. */
  readonly reply?: number;

  /**
   * @param kind the classification
   * @param message what happened; may name the instance, never the destination
   * @param options the reply code and the underlying cause
   */
  constructor(
    kind: SocksFailureKind,
    message: string,
    options: { reply?: number; cause?: unknown } = {},
  ) {
    super(message, { cause: options.cause });
    this.name = "SocksError";
    this.kind = kind;
    this.blame = kind.startsWith("destination_") ? "destination" : "instance";
    if (options.reply !== undefined) this.reply = options.reply;
  }
}

/** Where a SOCKS5 server listens, and the credentials to offer it (Tor isolates streams by them). */
export interface SocksInstance {
  readonly hostname: string;
  readonly port: number;
  readonly username?: string;
  readonly password?: string;
}

/** Limits for one {@link socksConnect} attempt. */
export interface SocksConnectOptions {
  /** Bound on TCP connect + greeting + CONNECT reply, in milliseconds. */
  readonly timeoutMs: number;
  readonly signal?: AbortSignal;
  /**
   * Judges the address the instance says it connected from (the reply's BND.ADDR): a reason
   * refuses the tunnel before a byte is sent through it. A SOCKS server that reached a destination
   * on this machine reports a loopback address; Tor reports none.
   */
  readonly onBound?: (address: string) => string | undefined;
  /**
   * How the connection to the instance is made (`transport.ts`): plain TCP to its hostname and
   * port by default; TLS to the hub's relay for `egress.transport.kind: socks5_tls`.
   */
  readonly dial?: SocksDial;
}

/**
 * Opens a TCP connection to a SOCKS5 instance and asks it to CONNECT to `target`.
 *
 * Resolves a connected socket positioned right after the CONNECT reply (bytes that arrived after
 * the reply are unshifted back) with no listeners of this module left on it: attach an `error`
 * listener synchronously when the promise settles.
 *
 * @param instance the SOCKS server and credentials
 * @param target the destination; a name is sent unresolved
 * @param options the handshake timeout and an abort signal
 * @returns the socket, ready for the destination's protocol
 * @throws {SocksError} classified failures; the socket is destroyed
 * @throws {RangeError} when the target or credentials cannot be encoded or `timeoutMs` is not > 0
 * @example
 * ```ts ignore
 * import { socksConnect } from "./socks5.ts";
 * const instance = { hostname: "127.0.0.1", port: 9050 };
 * const socket = await socksConnect(instance, { host: "shop.onion", port: 80 }, { timeoutMs: 5000 });
 * socket.write("GET / HTTP/1.1\r\nHost: shop.onion\r\nConnection: close\r\n\r\n");
 * ```
 */
export function socksConnect(
  instance: SocksInstance,
  target: { host: string; port: number },
  options: SocksConnectOptions,
): Promise<Socket> {
  try {
    if (!(options.timeoutMs > 0)) throw new RangeError(`Timeout ${options.timeoutMs} is not > 0`);
    const request = encodeConnect(target.host, target.port);
    const withAuth = instance.username !== undefined || instance.password !== undefined;
    const auth = withAuth ? encodeAuth(instance.username ?? "", instance.password ?? "") : null;
    return handshake(instance, request, auth, options);
  } catch (error) {
    return Promise.reject(error);
  }
}

/**
 * Asks a SOCKS5 instance whether it is alive without reaching anything through it: TCP connect,
 * greeting and (with credentials) authentication, then the connection is closed. This is the
 * breaker's half-open trial — the gateway's own experiment, never a client's request.
 *
 * @param instance the SOCKS server and credentials
 * @param options the handshake timeout
 * @throws {SocksError} classified like {@link socksConnect}'s failures
 */
export async function socksProbe(
  instance: SocksInstance,
  options: SocksConnectOptions,
): Promise<void> {
  if (!(options.timeoutMs > 0)) throw new RangeError(`Timeout ${options.timeoutMs} is not > 0`);
  const withAuth = instance.username !== undefined || instance.password !== undefined;
  const auth = withAuth ? encodeAuth(instance.username ?? "", instance.password ?? "") : null;
  const socket = await handshake(instance, null, auth, options);
  socket.on("error", function ignoreLateError() {});
  socket.destroy();
}

/**
 * Runs connect → greeting → (auth) → CONNECT on one socket, settling exactly once; with no
 * `request`, it settles after the greeting and authentication (a probe).
 */
function handshake(
  instance: SocksInstance,
  request: Uint8Array | null,
  auth: Uint8Array | null,
  options: SocksConnectOptions,
): Promise<Socket> {
  const { hostname, port } = instance;
  const where = hostname.includes(":") ? `[${hostname}]:${port}` : `${hostname}:${port}`;
  const { signal } = options;
  return new Promise<Socket>(function runHandshake(resolve, reject) {
    if (signal?.aborted) {
      const message = `SOCKS handshake with ${where} was aborted`;
      return reject(new SocksError("aborted", message, { cause: signal.reason }));
    }
    openExchange({ instance, where, request, auth, options }, { resolve, reject });
  });
}

/** One attempt as asked for: the instance (`where` as messages spell it) and what to send it. */
interface Attempt extends Pick<Exchange, "request" | "auth"> {
  readonly options: SocksConnectOptions;
  readonly instance: SocksInstance;
  readonly where: string;
}

/** The handshake promise's two ways out. */
interface Settle {
  resolve(socket: Socket): void;
  reject(error: SocksError): void;
}

/**
 * Step 0, connect: opens the socket (by the attempt's dial) and bounds the whole exchange — the
 * dial's connect and any TLS handshake included — by the timeout and the signal.
 */
function openExchange(attempt: Attempt, settle: Settle): void {
  const { instance, where, options: { signal, timeoutMs } } = attempt;
  const { socket, ready } = (attempt.options.dial ?? tcpDial(instance))();
  const timer = setTimeout(function onHandshakeTimeout() {
    exchange.fail("timeout", `SOCKS handshake with ${where} did not finish within ${timeoutMs} ms`);
  }, timeoutMs);
  function onAbort(): void {
    const message = `SOCKS handshake with ${where} was aborted`;
    exchange.fail("aborted", message, { cause: signal?.reason });
  }
  function detach(): void {
    clearTimeout(timer);
    signal?.removeEventListener("abort", onAbort);
    for (const [event, listener] of Object.entries(listeners)) socket.off(event, listener);
  }
  const exchange: Exchange = {
    socket,
    name: `SOCKS instance ${where}`,
    auth: attempt.auth,
    request: attempt.request,
    options: attempt.options,
    phase: "connect",
    buffer: new Uint8Array(0),
    ...settlers(socket, detach, settle),
  };
  const { connect: onReady, ...others } = socketListeners(exchange);
  // The greeting goes out once the dial says the connection can carry SOCKS.
  const listeners: Record<string, (error: Error) => void> = { ...others, [ready]: onReady };
  signal?.addEventListener("abort", onAbort, { once: true });
  for (const [event, listener] of Object.entries(listeners)) socket.on(event, listener);
}

/** Settling, each after `detach`: a failure destroys the socket, a success hands it over. */
function settlers(
  socket: Socket,
  detach: () => void,
  settle: Settle,
): Pick<Exchange, "fail" | "succeed"> {
  return {
    fail(kind, message, extra) {
      detach();
      socket.on("error", function ignoreLateError() {});
      socket.destroy();
      settle.reject(new SocksError(kind, message, extra));
    },
    succeed(leftover) {
      detach();
      if (leftover !== undefined && leftover.length > 0) socket.unshift(leftover);
      settle.resolve(socket);
    },
  };
}
