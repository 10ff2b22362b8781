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
 * @module
 */
import { connect, isIPv4, type Socket } from "node:net";

/** Who a failed attempt is blamed on: the SOCKS instance, or the destination behind it. */
export type SocksBlame = "instance" | "destination";

/** Why a SOCKS attempt failed. */
export type SocksFailureKind =
  /** TCP connect to the instance failed (refused, reset, permission, the instance's DNS). */
  | "instance_unreachable"
  /** The instance spoke something that is not SOCKS5, refused auth, or closed mid-handshake. */
  | "instance_protocol"
  /** TCP connect, greeting and CONNECT reply together took longer than `timeoutMs`. */
  | "timeout"
  /** The caller's AbortSignal fired. */
  | "aborted"
  /** The gateway refused the tunnel the instance made (`onBound`: it reached this machine). */
  | "refused"
  /** Reply 0x03, 0x04, 0x06, or Tor's onion codes 0xF0–0xF7. */
  | "destination_unreachable"
  /** Reply 0x05 connection refused. */
  | "destination_refused"
  /** Reply 0x01, 0x02, 0x07, 0x08 or any other non-success code. */
  | "rejected";

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
}

const encoder = new TextEncoder();

const REPLIES: Record<number, [SocksFailureKind, string]> = {
  0x01: ["rejected", "general failure"],
  0x02: ["rejected", "connection not allowed by ruleset"],
  0x03: ["destination_unreachable", "network unreachable"],
  0x04: ["destination_unreachable", "host unreachable"],
  0x05: ["destination_refused", "connection refused"],
  0x06: ["destination_unreachable", "TTL expired"],
  0x07: ["rejected", "command not supported"],
  0x08: ["rejected", "address type not supported"],
};

/** Classifies a non-zero CONNECT reply code. */
function classifyReply(reply: number): [SocksFailureKind, string] {
  if (reply >= 0xf0 && reply <= 0xf7) return ["destination_unreachable", "onion service failure"];
  return REPLIES[reply] ?? ["rejected", "unknown reply"];
}

/** `0x5a` style. */
function hex(byte: number): string {
  return `0x${byte.toString(16).padStart(2, "0")}`;
}

/** Parses an IPv6 literal (no zone) into 16 bytes, or `undefined` when it is not one. */
function parseIPv6(text: string): Uint8Array | undefined {
  const halves = text.split("::");
  if (halves.length > 2) return undefined;
  const groups = halves.map((half) => (half === "" ? [] : half.split(":")));
  const words: number[][] = [];
  for (const [h, half] of groups.entries()) {
    const out: number[] = [];
    for (const [i, group] of half.entries()) {
      const last = h === groups.length - 1 && i === half.length - 1;
      if (last && isIPv4(group)) {
        const [a, b, c, d] = group.split(".").map(Number);
        out.push((a << 8) | b, (c << 8) | d);
      } else if (/^[0-9a-f]{1,4}$/i.test(group)) {
        out.push(parseInt(group, 16));
      } else return undefined;
    }
    words.push(out);
  }
  const count = words.reduce((sum, w) => sum + w.length, 0);
  if (halves.length === 1 ? count !== 8 : count > 7) return undefined;
  const all = [...words[0], ...Array(8 - count).fill(0), ...(words[1] ?? [])];
  return Uint8Array.from(all.flatMap((word) => [word >> 8, word & 0xff]));
}

/**
 * Encodes the CONNECT request: an IPv4 literal as ATYP 1, an IPv6 literal (with or without
 * brackets) as ATYP 4, anything else as ATYP 3, a domain name passed through untouched.
 *
 * @param host the destination host
 * @param port the destination port
 * @returns the request bytes
 * @throws {RangeError} when the port is not 1–65535, the domain is empty or longer than 255
 * bytes, or a bracketed host is not an IPv6 literal
 * @example
 * ```ts
 * import { encodeConnect } from "./socks5.ts";
 * encodeConnect("127.0.0.1", 80); // Uint8Array [5, 1, 0, 1, 127, 0, 0, 1, 0, 80]
 * encodeConnect("shop.onion", 80).length; // 4 + 1 + 10 + 2
 * ```
 */
export function encodeConnect(host: string, port: number): Uint8Array {
  if (!Number.isInteger(port) || port < 1 || port > 65535) {
    throw new RangeError(`Port ${port} is not in 1-65535`);
  }
  let address: Uint8Array;
  const bracketed = host.startsWith("[") && host.endsWith("]");
  const ipv6 = parseIPv6(bracketed ? host.slice(1, -1) : host);
  if (isIPv4(host)) {
    address = Uint8Array.of(0x01, ...host.split(".").map(Number));
  } else if (ipv6) {
    address = Uint8Array.of(0x04, ...ipv6);
  } else if (bracketed) {
    throw new RangeError("Bracketed host is not an IPv6 literal");
  } else {
    const name = encoder.encode(host);
    if (name.length < 1 || name.length > 255) {
      throw new RangeError(`Domain name is ${name.length} bytes; SOCKS5 carries 1-255`);
    }
    address = Uint8Array.of(0x03, name.length, ...name);
  }
  return Uint8Array.of(0x05, 0x01, 0x00, ...address, port >> 8, port & 0xff);
}

/** The RFC 1929 sub-negotiation request. */
function encodeAuth(username: string, password: string): Uint8Array {
  const user = encoder.encode(username);
  const pass = encoder.encode(password);
  if (user.length > 255 || pass.length > 255) {
    throw new RangeError("SOCKS username and password are at most 255 bytes each");
  }
  return Uint8Array.of(0x01, user.length, ...user, pass.length, ...pass);
}

/** The BND.ADDR of a complete CONNECT reply, as text (a name as sent). */
function boundAddress(reply: Uint8Array): string {
  const atyp = reply[3];
  if (atyp === 0x01) return Array.from(reply.subarray(4, 8)).join(".");
  if (atyp === 0x04) {
    const words: string[] = [];
    for (let i = 4; i < 20; i += 2) words.push(((reply[i] << 8) | reply[i + 1]).toString(16));
    return words.join(":");
  }
  return new TextDecoder().decode(reply.subarray(5, 5 + reply[4]));
}

/** Bytes the CONNECT reply needs before its address ends, or `undefined` for an unknown ATYP. */
function replyLength(atyp: number, buffer: Uint8Array): number | undefined {
  if (atyp === 0x01) return 4 + 4 + 2;
  if (atyp === 0x04) return 4 + 16 + 2;
  if (atyp === 0x03) return buffer.length < 5 ? 5 : 4 + 1 + buffer[4] + 2;
  return undefined;
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

type FailureDetail = { reply?: number; cause?: unknown };

/** Where the exchange stands: which answer it waits for next. */
type Phase = "connect" | "greeting" | "auth" | "reply";

/** One handshake in flight: what it sends, what it has read so far, and how it settles. */
interface Exchange {
  readonly socket: Socket;
  /** `SOCKS instance host:port`, the subject of the instance's failures. */
  readonly name: string;
  /** The RFC 1929 request, when credentials are offered. */
  readonly auth: Uint8Array | null;
  /** The CONNECT request; null for a probe, which settles after the greeting (and auth). */
  readonly request: Uint8Array | null;
  readonly options: SocksConnectOptions;
  phase: Phase;
  /** Bytes received and not yet consumed. */
  buffer: Uint8Array;
  /** Settles with a classified failure; the socket is destroyed. */
  fail(kind: SocksFailureKind, message: string, extra?: FailureDetail): void;
  /** Settles with the socket, this module's listeners removed and `leftover` unshifted back. */
  succeed(leftover?: Uint8Array): void;
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
interface Attempt extends Pick<Exchange, "request" | "auth" | "options"> {
  readonly instance: SocksInstance;
  readonly where: string;
}

/** The handshake promise's two ways out. */
interface Settle {
  resolve(socket: Socket): void;
  reject(error: SocksError): void;
}

/** Step 0, connect: opens the socket and bounds the whole exchange by the timeout and the signal. */
function openExchange(attempt: Attempt, settle: Settle): void {
  const { instance: { hostname, port }, where, options: { signal, timeoutMs } } = attempt;
  const socket = connect({ host: hostname, port });
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
  const listeners = socketListeners(exchange);
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

/** The socket events the exchange listens to, each a named step so stack traces say which ran. */
function socketListeners(exchange: Exchange) {
  function onClosed(): void {
    broken(exchange, "closed the connection during the handshake");
  }
  return {
    connect: function onConnect(): void {
      sendGreeting(exchange);
    },
    readable: function onReadable(): void {
      readAnswers(exchange);
    },
    end: onClosed,
    close: onClosed,
    error: function onError(error: Error & { code?: string }): void {
      failOnSocketError(exchange, error);
    },
  };
}

/** Fails the exchange as the instance breaking the protocol: `what` follows its name. */
function broken(exchange: Exchange, what: string): void {
  exchange.fail("instance_protocol", `${exchange.name} ${what}`);
}

/** A socket error: before the TCP connect the instance is unreachable, after it the exchange broke. */
function failOnSocketError(exchange: Exchange, error: Error & { code?: string }): void {
  const code = error.code ?? error.name;
  const { name } = exchange;
  if (exchange.phase !== "connect") {
    const message = `${name} failed during the handshake: ${code}`;
    return exchange.fail("instance_protocol", message, { cause: error });
  }
  exchange.fail("instance_unreachable", `Cannot connect to ${name}: ${code}`, { cause: error });
}

/** Step 1, greeting (RFC 1928 §3): offers no auth, and username/password with credentials. */
function sendGreeting(exchange: Exchange): void {
  exchange.phase = "greeting";
  exchange.socket.setNoDelay(true);
  exchange.socket.write(
    exchange.auth ? Uint8Array.of(0x05, 2, 0x00, 0x02) : Uint8Array.of(0x05, 1, 0x00),
  );
}

/** Takes what arrived and handles every complete answer the current step waits for. */
function readAnswers(exchange: Exchange): void {
  for (let chunk = exchange.socket.read(); chunk !== null; chunk = exchange.socket.read()) {
    const joined = new Uint8Array(exchange.buffer.length + chunk.length);
    joined.set(exchange.buffer);
    joined.set(chunk, exchange.buffer.length);
    exchange.buffer = joined;
  }
  while (exchange.buffer.length >= 2 && exchange.phase !== "reply") {
    if (!takeNegotiationAnswer(exchange)) return;
  }
  if (exchange.phase === "reply") readConnectReply(exchange);
}

/**
 * Steps 2–3, method choice and auth status: checks one two-byte answer, then sends the next
 * message (auth or CONNECT) or, for a probe, settles.
 *
 * @returns false once the exchange has settled
 */
function takeNegotiationAnswer(exchange: Exchange): boolean {
  const [version, code] = exchange.buffer;
  exchange.buffer = exchange.buffer.subarray(2);
  const problem = negotiationProblem(exchange, version, code);
  if (problem !== undefined) {
    broken(exchange, problem);
    return false;
  }
  exchange.phase = exchange.phase === "greeting" && code === 0x02 ? "auth" : "reply";
  if (exchange.phase === "reply" && exchange.request === null) {
    exchange.succeed();
    return false;
  }
  exchange.socket.write(exchange.phase === "auth" ? exchange.auth! : exchange.request!);
  return true;
}

/** What is wrong with a method choice (RFC 1928 §3) or auth status (RFC 1929 §2), if anything. */
function negotiationProblem(exchange: Exchange, version: number, code: number): string | undefined {
  if (exchange.phase === "auth") {
    return code !== 0x00 ? "refused the username and password" : undefined;
  }
  if (exchange.phase !== "greeting") return undefined;
  if (version !== 0x05) return `is not SOCKS5 (version byte ${hex(version)})`;
  if (code === 0xff) return "accepted none of the offered auth methods";
  if (code !== 0x00 && !(code === 0x02 && exchange.auth)) {
    return `chose auth method ${hex(code)}, which was not offered`;
  }
  return undefined;
}

/**
 * Step 4, the CONNECT reply (RFC 1928 §6): a refusal is classified; a success waits for the whole
 * bound address, lets `onBound` judge it, and hands over the socket with any bytes after it.
 */
function readConnectReply(exchange: Exchange): void {
  const { buffer } = exchange;
  if (buffer.length < 2) return;
  const [version, reply] = buffer;
  if (version !== 0x05) return broken(exchange, "sent a CONNECT reply that is not SOCKS5");
  if (reply !== 0x00) {
    const [kind, text] = classifyReply(reply);
    const what = kind === "rejected" ? "rejected the CONNECT" : "cannot reach the destination";
    const message = `${exchange.name} ${what}: ${text} (reply ${hex(reply)})`;
    return exchange.fail(kind, message, { reply });
  }
  if (buffer.length < 4) return;
  const length = replyLength(buffer[3], buffer);
  if (length === undefined) {
    return broken(exchange, `sent a reply with address type ${hex(buffer[3])}`);
  }
  if (buffer.length < length) return;
  const refusal = exchange.options.onBound?.(boundAddress(buffer));
  if (refusal !== undefined) return exchange.fail("refused", refusal);
  exchange.succeed(buffer.subarray(length));
}
