/**
 * The steps of one SOCKS5 handshake on a connected socket: greeting, method choice, (auth), CONNECT
 * and its reply, each a named function that reads the answer it waits for and sends the next
 * message, and the classification of every way it can fail ({@link SocksFailureKind}).
 *
 * `socks5.ts` owns the attempt around it — the socket, the timeout, the abort and settling exactly
 * once — and hands this module an {@link Exchange}; the bytes themselves are in `socks5_wire.ts`.
 * Split so the protocol's order can be read top to bottom without the plumbing.
 *
 * @module
 */
import type { Socket } from "node:net";
import { boundAddress, encodeGreeting, hex, replyLength } from "./socks5_wire.ts";

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
 * Every CONNECT reply code this client knows: the kind (which decides the blame, see
 * `SocksError`) and what it means, worded for the operator who reads the log.
 *
 * RFC 1928 §6 defines 0x01–0x08; Tor adds 0xF0–0xF7 for onion services (proposal 304, tor(1)
 * `SocksPort … ExtendedErrors`). The blame follows how Tor picks a code, read from its source:
 *
 * - 0x01 is Tor's catch-all: a circuit torn down, a resource limit, hibernation, an internal
 *   error, a stream it could not attach. That is the instance's (or its circuits') trouble, so it
 *   stays on the instance. Without `ExtendedErrors` Tor also answers 0x01 for a bad onion address
 *   or a missing or wrong client-authorization key — destination faults that then open every
 *   instance's breaker; the deploy guide sets the flag so those come back as 0xF4–0xF6 instead.
 * - 0x04 (the name did not resolve, no descriptor could be fetched), 0x05 (refused or reset) and
 *   0x06 (connecting timed out) describe the destination: another instance would fare no better.
 * - 0xF0–0xF7 are all about the onion service asked for. 0xF4/0xF5 (client authorization) and
 *   0xF6 (malformed address) are this destination's configuration, not a network fault, but no
 *   instance can do better either; 0xF7 is a timeout at the service, not at the instance (the
 *   kinds have no destination timeout: `timeout` means the instance's handshake ran out).
 *
 * Unknown codes stay on the instance: Tor may add codes, and guessing the destination would hide
 * a broken instance behind the negative cache.
 */
const REPLIES: Readonly<Record<number, readonly [SocksFailureKind, string]>> = {
  0x01: ["rejected", "general SOCKS server failure"],
  0x02: ["rejected", "connection not allowed by ruleset"],
  0x03: ["destination_unreachable", "network unreachable"],
  0x04: ["destination_unreachable", "host unreachable: the name did not resolve or no route"],
  0x05: ["destination_refused", "connection refused by the destination"],
  0x06: ["destination_unreachable", "TTL expired: connecting to the destination timed out"],
  0x07: ["rejected", "command not supported"],
  0x08: ["rejected", "address type not supported"],
  0xf0: ["destination_unreachable", "onion service descriptor not found (offline or unknown)"],
  0xf1: ["destination_unreachable", "onion service descriptor is invalid"],
  0xf2: ["destination_unreachable", "onion service introduction failed (service likely down)"],
  0xf3: ["destination_unreachable", "onion service rendezvous failed"],
  0xf4: ["destination_unreachable", "onion service needs client authorization; none configured"],
  0xf5: ["destination_unreachable", "onion service client authorization is wrong or revoked"],
  0xf6: ["destination_unreachable", "invalid onion address"],
  0xf7: ["destination_unreachable", "onion service introduction timed out"],
};

/** Classifies a non-zero CONNECT reply code. */
export function classifyReply(reply: number): readonly [SocksFailureKind, string] {
  return REPLIES[reply] ?? ["rejected", "unknown reply"];
}

type FailureDetail = { reply?: number; cause?: unknown };

/** Where the exchange stands: which answer it waits for next. */
type Phase = "connect" | "greeting" | "auth" | "reply";

/** One handshake in flight: what it sends, what it has read so far, and how it settles. */
export interface Exchange {
  readonly socket: Socket;
  /** `SOCKS instance host:port`, the subject of the instance's failures. */
  readonly name: string;
  /** The RFC 1929 request, when credentials are offered. */
  readonly auth: Uint8Array | null;
  /** The CONNECT request; null for a probe, which settles after the greeting (and auth). */
  readonly request: Uint8Array | null;
  /** The attempt's options (`SocksConnectOptions`); the exchange reads only `onBound`. */
  readonly options: { readonly onBound?: (address: string) => string | undefined };
  phase: Phase;
  /** Bytes received and not yet consumed. */
  buffer: Uint8Array;
  /** Settles with a classified failure; the socket is destroyed. */
  fail(kind: SocksFailureKind, message: string, extra?: FailureDetail): void;
  /** Settles with the socket, this module's listeners removed and `leftover` unshifted back. */
  succeed(leftover?: Uint8Array): void;
}

/**
 * The socket events the exchange listens to, each a named step so stack traces say which ran.
 *
 * @param exchange the handshake the events drive
 * @returns the listeners by event name, to attach and later detach
 */
export function socketListeners(exchange: Exchange) {
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
  exchange.socket.write(encodeGreeting(exchange.auth !== null));
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
