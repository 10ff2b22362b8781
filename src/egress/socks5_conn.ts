/**
 * The SOCKS5 CONNECT of `socks5.ts` (RFC 1928, RFC 1929) on a `Deno.TcpConn`, for the owned
 * upstream reader, which reads into one buffer it reuses: `node:net` allocates a fresh 64 KiB
 * buffer per read, and memory grew with every connection.
 *
 * Same bytes (`socks5_wire.ts`), same reply classification (`socks5_exchange.ts`), and every
 * failure the `SocksError` with the kind, blame and message `socksConnect` gives — the test runs
 * both against the same scripted servers. Awaited steps, not socket events: a conn is read.
 *
 * @module
 */
import { type SocksConnectOptions, SocksError, type SocksInstance } from "./socks5.ts";
import { classifyReply } from "./socks5_exchange.ts";
import {
  boundAddress,
  encodeAuth,
  encodeConnect,
  encodeGreeting,
  hex,
  replyLength,
} from "./socks5_wire.ts";

/** Limits for one {@link socksDialConn}: `SocksConnectOptions` but the dial (always plain TCP). */
export type SocksDialOptions = Omit<SocksConnectOptions, "dial">;

/** A tunnel through the instance, and the destination's first bytes if they came with the reply. */
export interface SocksDialed {
  readonly conn: Deno.TcpConn;
  readonly leftover: Uint8Array;
}

/** Answers are read as they arrive and none needs over 4 + 1 + 255 + 2 bytes from 4 bytes in. */
const BUFFER_BYTES = 512;

/** One attempt in flight: what it sends, its conn and one read buffer, and why it was stopped. */
interface Dial {
  /** `host:port` (IPv6 in brackets); the instance's failures name it `SOCKS instance …`. */
  readonly where: string;
  readonly request: Uint8Array;
  /** The RFC 1929 request, when credentials are offered. */
  readonly auth: Uint8Array | null;
  readonly onBound?: (address: string) => string | undefined;
  /** Cancels the TCP connect on timeout or abort. */
  readonly halt: AbortController;
  readonly buffer: Uint8Array;
  /** Where the unread bytes of `buffer` begin and end. */
  start: number;
  end: number;
  conn?: Deno.TcpConn;
  stopped?: SocksError;
}

/**
 * Opens a TCP connection to a SOCKS5 instance and asks it to CONNECT to `target`: greeting, RFC
 * 1929 username/password when the instance has credentials, then CONNECT with a name sent
 * unresolved (ATYP 3; IP literals as ATYP 1/4). The whole exchange, TCP connect included, is
 * bounded by `timeoutMs` and stopped by `signal`.
 *
 * @param instance the SOCKS server and credentials
 * @param target the destination; a name is sent unresolved
 * @param options the handshake timeout, an abort signal and the judge of the bound address
 * @returns the conn (no-delay set) and the bytes that arrived after the reply, usually none
 * @throws {SocksError} classified like `socksConnect`'s failures; the conn is closed
 * @throws {RangeError} when the target or credentials cannot be encoded or `timeoutMs` is not > 0
 * @example
 * ```ts ignore
 * import { socksDialConn } from "./socks5_conn.ts";
 * const instance = { hostname: "127.0.0.1", port: 9050 };
 * const target = { host: "shop.onion", port: 80 };
 * const { conn, leftover } = await socksDialConn(instance, target, { timeoutMs: 5000 });
 * ```
 */
export async function socksDialConn(
  instance: SocksInstance,
  target: { host: string; port: number },
  options: SocksDialOptions,
): Promise<SocksDialed> {
  if (!(options.timeoutMs > 0)) throw new RangeError(`Timeout ${options.timeoutMs} is not > 0`);
  const { hostname, port, username, password } = instance;
  const withAuth = username !== undefined || password !== undefined;
  const dial: Dial = {
    where: hostname.includes(":") ? `[${hostname}]:${port}` : `${hostname}:${port}`,
    request: encodeConnect(target.host, target.port),
    auth: withAuth ? encodeAuth(username ?? "", password ?? "") : null,
    onBound: options.onBound,
    halt: new AbortController(),
    buffer: new Uint8Array(BUFFER_BYTES),
    start: 0,
    end: 0,
  };
  if (options.signal?.aborted) throw aborted(dial, options.signal);
  const release = watch(dial, options);
  try {
    const dialed = await handshake(dial, instance);
    if (dial.stopped) throw dial.stopped;
    return dialed;
  } catch (error) {
    closeQuietly(dial.conn);
    throw dial.stopped ?? classify(dial, error);
  } finally {
    release();
  }
}

/** Stops the attempt on timeout or abort; the returned function takes the timer and listener back. */
function watch(dial: Dial, { timeoutMs, signal }: SocksDialOptions): () => void {
  const timer = setTimeout(function onHandshakeTimeout() {
    const message = `SOCKS handshake with ${dial.where} did not finish within ${timeoutMs} ms`;
    stop(dial, new SocksError("timeout", message));
  }, timeoutMs);
  function onAbort(): void {
    stop(dial, aborted(dial, signal!));
  }
  signal?.addEventListener("abort", onAbort, { once: true });
  return function release(): void {
    clearTimeout(timer);
    signal?.removeEventListener("abort", onAbort);
  };
}

/** The failure of an attempt stopped by its signal, the signal's reason as the cause. */
function aborted(dial: Dial, signal: AbortSignal): SocksError {
  const message = `SOCKS handshake with ${dial.where} was aborted`;
  return new SocksError("aborted", message, { cause: signal.reason });
}

/** Stops the attempt once: the connect is cancelled and the conn closed, so a pending read ends. */
function stop(dial: Dial, error: SocksError): void {
  if (dial.stopped) return;
  dial.stopped = error;
  dial.halt.abort(error);
  closeQuietly(dial.conn);
}

/** Closes a conn that may already be closed. */
function closeQuietly(conn: Deno.Conn | undefined): void {
  try {
    conn?.close();
  } catch { /* already closed */ }
}

/** An I/O error as a failure: before the TCP connect the instance is unreachable, after it broke. */
function classify(dial: Dial, error: unknown): SocksError {
  if (error instanceof SocksError) return error;
  const code = (error as { code?: string }).code ?? (error as Error).name;
  if (dial.conn === undefined) {
    const message = `Cannot connect to SOCKS instance ${dial.where}: ${code}`;
    return new SocksError("instance_unreachable", message, { cause: error });
  }
  const message = `SOCKS instance ${dial.where} failed during the handshake: ${code}`;
  return new SocksError("instance_protocol", message, { cause: error });
}

/** The instance breaking the protocol: `what` follows its name. */
function broken(dial: Dial, what: string): SocksError {
  return new SocksError("instance_protocol", `SOCKS instance ${dial.where} ${what}`);
}

/** Steps 0–4 in order: connect, greeting, method choice, (auth), CONNECT and its reply. */
async function handshake(dial: Dial, { hostname, port }: SocksInstance): Promise<SocksDialed> {
  const conn = await Deno.connect({ hostname, port, signal: dial.halt.signal });
  dial.conn = conn;
  if (dial.stopped) throw dial.stopped;
  conn.setNoDelay(true);
  await send(dial, encodeGreeting(dial.auth !== null));
  const [version, method] = await take(dial, 2);
  if (version !== 0x05) throw broken(dial, `is not SOCKS5 (version byte ${hex(version)})`);
  if (method === 0xff) throw broken(dial, "accepted none of the offered auth methods");
  if (method !== 0x00 && !(method === 0x02 && dial.auth)) {
    throw broken(dial, `chose auth method ${hex(method)}, which was not offered`);
  }
  if (method === 0x02) {
    await send(dial, dial.auth!);
    const [, status] = await take(dial, 2);
    if (status !== 0x00) throw broken(dial, "refused the username and password");
  }
  await send(dial, dial.request);
  const length = await readConnectReply(dial);
  const refusal = dial.onBound?.(boundAddress(unread(dial)));
  if (refusal !== undefined) throw new SocksError("refused", refusal);
  return { conn, leftover: dial.buffer.slice(dial.start + length, dial.end) };
}

/**
 * Step 4, the CONNECT reply (RFC 1928 §6): a refusal is classified as soon as its code is in;
 * a success waits for the whole bound address.
 *
 * @returns the reply's length, from `dial.start`
 */
async function readConnectReply(dial: Dial): Promise<number> {
  await need(dial, 2);
  const [version, reply] = unread(dial);
  if (version !== 0x05) throw broken(dial, "sent a CONNECT reply that is not SOCKS5");
  if (reply !== 0x00) throw refusedConnect(dial, reply);
  await need(dial, 4);
  const atyp = unread(dial)[3];
  let length = replyLength(atyp, unread(dial));
  if (length === undefined) throw broken(dial, `sent a reply with address type ${hex(atyp)}`);
  // A name's length is known once its first byte is in: 5 is asked for first, then the rest.
  while (dial.end - dial.start < length) {
    await need(dial, length);
    length = replyLength(atyp, unread(dial))!;
  }
  return length;
}

/** A non-zero CONNECT reply as the failure `classifyReply` says it is. */
function refusedConnect(dial: Dial, reply: number): SocksError {
  const [kind, text] = classifyReply(reply);
  const what = kind === "rejected" ? "rejected the CONNECT" : "cannot reach the destination";
  const message = `SOCKS instance ${dial.where} ${what}: ${text} (reply ${hex(reply)})`;
  return new SocksError(kind, message, { reply });
}

/** The bytes received and not yet consumed. */
function unread(dial: Dial): Uint8Array {
  return dial.buffer.subarray(dial.start, dial.end);
}

/** Reads until `count` bytes are unread, then consumes and returns them. */
async function take(dial: Dial, count: number): Promise<Uint8Array> {
  await need(dial, count);
  const bytes = dial.buffer.subarray(dial.start, dial.start + count);
  dial.start += count;
  return bytes;
}

/** Reads until at least `count` bytes are unread; the instance closing first is its fault. */
async function need(dial: Dial, count: number): Promise<void> {
  while (dial.end - dial.start < count) {
    const read = await dial.conn!.read(dial.buffer.subarray(dial.end));
    if (dial.stopped) throw dial.stopped;
    if (read === null) throw broken(dial, "closed the connection during the handshake");
    dial.end += read;
  }
}

/** Writes every byte of one message. */
async function send(dial: Dial, bytes: Uint8Array): Promise<void> {
  for (let offset = 0; offset < bytes.length;) {
    offset += await dial.conn!.write(bytes.subarray(offset));
    if (dial.stopped) throw dial.stopped;
  }
}
