/**
 * Replies written straight onto a socket: for connections the HTTP parser gave up on (400, 408,
 * 431 before any request existed) and for `Upgrade` requests, whose socket belongs to the gateway
 * from the start. A `tunnel` reply (101) splices the client and upstream sockets until either ends.
 *
 * A reply written here has the byte shape of the same reply node's writer puts out for a closing
 * connection (write.ts): the gateway's own fields in lower case, `content-length` for a fixed
 * body, then `Date` and `Connection: close` as node spells and orders them. Written any other way
 * (no `Date`, a lower-case `connection` before the length) one garbage line told a prober which
 * software answered, however the body read.
 *
 * Every socket written here has an owner (socket_owner.ts) before the first byte: a client that
 * resets while its reply is written ends its own connection, never the isolate. A tunnel whose
 * upstream side ended before the splice (an error the attempt's owner answered by destroying it)
 * closes the client side at once rather than holding it open with nothing behind it.
 *
 * @module
 */
import { STATUS_CODES } from "node:http";
import type { Duplex } from "node:stream";
import type { Reply } from "../request/reply.ts";
import { ownSocket } from "./socket_owner.ts";

/** Serialises a status line and headers (names and values as given). */
export function renderHead(
  status: number,
  headers: readonly string[],
): string {
  let head = `HTTP/1.1 ${status} ${STATUS_CODES[status] ?? "Unknown"}\r\n`;
  for (let i = 0; i < headers.length; i += 2) head += `${headers[i]}: ${headers[i + 1]}\r\n`;
  return `${head}\r\n`;
}

/** Flattens a header record into `[name, value, …]`. */
export function flatHeaders(headers: Readonly<Record<string, string>> | undefined): string[] {
  const out: string[] = [];
  for (const [name, value] of Object.entries(headers ?? {})) out.push(name, value);
  return out;
}

/**
 * Writes a reply onto a raw socket and, unless it is a tunnel, closes the socket after it. A
 * tunnel counts as delivered once its 101 is written; it lives until either side closes.
 *
 * @param socket the client connection
 * @param reply what to send
 * @param extra headers the server adds (request id)
 * @param onDone called once the reply was written in full (true) or could not be (false)
 * @param tunnel a tunnel's idle limit, and what to tell when it closed one
 */
export function writeRawReply(
  socket: Duplex,
  reply: Reply,
  extra: Record<string, string>,
  onDone: (ok: boolean) => void,
  tunnel?: { readonly tunnelIdleMs?: number; readonly idle: () => void },
): void {
  // Already owned when the listener took it over; owned here for any other writer.
  ownSocket(socket);
  if (reply.tunnel) {
    const headers = [...(reply.rawHeaders ?? [])];
    socket.write(renderHead(101, headers));
    const upstream = reply.tunnel.socket;
    if (reply.tunnel.head.length > 0) socket.write(reply.tunnel.head);
    splice(socket, upstream, tunnel);
    onDone(true);
    return;
  }
  const own = flatHeaders(withoutConnection(extra));
  if (reply.stream) {
    // An upstream's stream carries its rawHeaders; a body file, its route's headers.
    const given = reply.rawHeaders ?? [...flatHeaders(reply.headers), ...own];
    socket.write(renderHead(reply.status, closing(given)));
    reply.stream.pipeTo(socket as unknown as Parameters<typeof reply.stream.pipeTo>[0]);
    socket.once("finish", () => onDone(true));
    return;
  }
  const body = reply.body ?? "";
  const bytes = typeof body === "string" ? Buffer.from(body) : body;
  const length = ["content-length", String(bytes.byteLength)];
  socket.write(
    renderHead(reply.status, closing([...flatHeaders(reply.headers), ...own, ...length])),
  );
  socket.end(bytes, () => onDone(true));
}

/**
 * `headers` as node's writer ends a closing reply's head: `Date` (unless one is given) then
 * `Connection: close`, after the fields given, in node's spelling; any `connection` given is
 * dropped (it is always close here).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { closing } from "./raw_reply.ts";
 * const head = closing(["content-length", "0", "connection", "close"]);
 * assert.deepEqual([head[0], head[2], head[4], head[5]], ["content-length", "Date", "Connection", "close"]);
 * ```
 */
export function closing(headers: readonly string[]): string[] {
  const out: string[] = [];
  let dated = false;
  for (let i = 0; i < headers.length; i += 2) {
    const name = headers[i].toLowerCase();
    if (name === "connection") continue;
    if (name === "date") dated = true;
    out.push(headers[i], headers[i + 1]);
  }
  if (!dated) out.push("Date", new Date().toUTCString());
  out.push("Connection", "close");
  return out;
}

/** `extra` without its `connection` field (the writer says close its own way). */
function withoutConnection(extra: Record<string, string>): Record<string, string> {
  if (!("connection" in extra)) return extra;
  const { connection: _, ...rest } = extra;
  return rest;
}

/**
 * How long a connection closed after its reply may wait for the client's own end once the reply
 * was written in full (nginx's `lingering_timeout` is 5 s too).
 */
export const LINGER_MS = 5000;

/**
 * Ends an `Upgrade` socket answered with a closing reply (not a tunnel): what the client still
 * sends is read and dropped, and a client that neither closes nor resets is closed
 * {@link LINGER_MS} after its reply went out. node hands an upgrade socket over not flowing, so a
 * request body nobody reads hid the client's FIN (or reset) for ever: the connection stayed open,
 * counted against the lane's ceiling.
 */
export function lingerThenClose(socket: Duplex): void {
  socket.resume();
  socket.once("finish", () => {
    const timer = setTimeout(() => socket.destroy(), LINGER_MS);
    socket.once("close", () => clearTimeout(timer));
  });
}

/**
 * Pipes two sockets into each other until either side closes; then closes both. With an idle
 * limit, a tunnel that carries no byte either way for that long is closed too (one timer per
 * tunnel, re-armed lazily: traffic only moves a timestamp).
 */
function splice(
  client: Duplex,
  upstream: Duplex,
  limits?: { readonly tunnelIdleMs?: number; readonly idle: () => void },
): void {
  let timer: number | undefined;
  const closeBoth = () => {
    clearTimeout(timer);
    client.destroy();
    upstream.destroy();
  };
  for (const side of [client, upstream]) {
    side.once("close", closeBoth);
    side.on("error", closeBoth);
  }
  // A side already destroyed may have closed before these listeners: nothing would end the other.
  if (client.destroyed || upstream.destroyed) return closeBoth();
  const idleMs = limits?.tunnelIdleMs;
  if (idleMs !== undefined) {
    let last = performance.now();
    const moved = () => last = performance.now();
    client.on("data", moved);
    upstream.on("data", moved);
    const check = () => {
      const quiet = performance.now() - last;
      if (quiet >= idleMs) {
        limits!.idle();
        closeBoth();
        return;
      }
      timer = setTimeout(check, idleMs - quiet) as unknown as number;
    };
    timer = setTimeout(check, idleMs) as unknown as number;
  }
  client.pipe(upstream);
  upstream.pipe(client);
}
