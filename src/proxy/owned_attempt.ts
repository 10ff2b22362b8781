/**
 * One attempt on a connection the gateway reads itself: the request head written on a
 * `Deno.TcpConn` (direct, or through a SOCKS instance reached over plain TCP), the response head
 * parsed by `h1_response.ts` from a reused read buffer, and the body relayed by `owned_body.ts`
 * without a buffer per chunk. It stands in for `attempt.ts`'s `node:http` exchange where it can:
 * a request without a body, no upgrade, no TLS to the backend, a way out the agent can own
 * ({@link canOwn}). Failures are classified by the same rules (`classify`), so the retry rule, the
 * pool and the negative cache see no difference.
 *
 * @module
 */
import { BodyDecoder } from "../egress/h1_body.ts";
import {
  parseResponseHead,
  ResponseFramingError,
  type ResponseHead,
} from "../egress/h1_response.ts";
import type { OwnedConn, OwnedConns } from "../egress/owned_conns.ts";
import { giveBuffer, takeBuffer } from "../egress/owned_conns.ts";
import type { RequestContext } from "../request/context.ts";
import type { Answer, Attempt, Forward } from "./attempt.ts";
import { abortedFailure, AttemptFailure, classify, firstByteFailure } from "./attempt_failure.ts";
import { streamOwned } from "./owned_body.ts";

/**
 * True when this attempt can run on an owned connection.
 *
 * @param enabled the egress's `owned_reads`
 */
export function canOwn(
  context: RequestContext,
  forward: Forward,
  attempt: Attempt,
  enabled: boolean,
): boolean {
  if (!enabled || forward.hasBody || context.upgrade || attempt.backend.tls !== undefined) {
    return false;
  }
  return attempt.way.agent.ownable;
}

/** Sends one attempt on an owned connection; resolves once the final response head arrived. */
export async function sendOwnedAttempt(
  context: RequestContext,
  forward: Forward,
  attempt: Attempt,
  clock: () => number,
): Promise<Answer> {
  const agent = attempt.way.agent;
  const target = { host: attempt.backend.hostname, port: attempt.backend.port };
  const stop = new AbortController();
  let conn: OwnedConn | undefined;
  /** What the connection had written before this attempt (earlier exchanges on it). */
  let before = 0;
  const stopWaiting = context.onAbort(() => stop.abort());
  const onStop = () => conn?.close();
  stop.signal.addEventListener("abort", onStop);
  const firstByte = firstByteTimer(forward, stop);
  const buffer = takeBuffer();
  try {
    // The client connection this serves: it may take back at once the connection it just used.
    const client = context.request.socket;
    // A pooled connection is judged again first (its destination as the machine is now).
    conn = await agent.takeOwned(target, client);
    let end = 0;
    if (!conn) {
      const dialled = await agent.dialOwned(target, {
        timeoutMs: forward.action.connectMs,
        signal: stop.signal,
      });
      conn = dialled.conn;
      agent.owned.adopt(conn, client);
      buffer.set(dialled.head);
      end = dialled.head.byteLength;
    }
    // Taken now: a head refused below on a pooled connection must not count its earlier exchanges.
    before = conn.bytesWritten;
    const head = requestHead(context.head.method, forward.target, attempt.headers);
    firstByte.start();
    await conn.write(head);
    const got = await readHead(conn, buffer, end, context.head.method);
    return answerOf(got, { conn, pool: agent.owned, buffer, clock });
  } catch (error) {
    if (conn) agent.owned.release(conn, false);
    giveBuffer(buffer);
    // Counted by what the socket took, so a head cut off midway is never "nothing sent".
    const sent = conn ? conn.bytesWritten - before : 0;
    throw failureOf(error, { context, conn, sent, stop, firstByte });
  } finally {
    firstByte.clear();
    stopWaiting();
    stop.signal.removeEventListener("abort", onStop);
  }
}

/**
 * The request head: request line, the attempt's header list, and keep-alive as node would ask,
 * one byte per character as node writes a head (a value's bytes as the client sent them).
 *
 * @throws {TypeError} when a method, target, name or value would break the head's framing (node's
 *   client refuses these too; the head is never written)
 */
export function requestHead(method: string, path: string, headers: readonly string[]): Uint8Array {
  if (!TOKEN.test(method) || !TARGET.test(path)) {
    throw new TypeError(`Refused to write request line ${JSON.stringify(`${method} ${path}`)}`);
  }
  let text = `${method} ${path} HTTP/1.1\r\n`;
  for (let i = 0; i < headers.length; i += 2) {
    const [name, value] = [headers[i], headers[i + 1]];
    if (!TOKEN.test(name) || !FIELD_VALUE.test(value)) {
      throw new TypeError(`Refused to write header field ${JSON.stringify(name)}`);
    }
    text += `${name}: ${value}\r\n`;
  }
  text += "Connection: keep-alive\r\n\r\n";
  const bytes = new Uint8Array(text.length);
  for (let i = 0; i < text.length; i++) bytes[i] = text.charCodeAt(i);
  return bytes;
}

/** RFC 9110 token: a method or a field name. */
const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
/** A request target: visible ASCII and obs-text, no spaces or controls. */
const TARGET = /^[\x21-\x7e\x80-\xff]+$/;
/** A field value: visible characters, spaces and tabs, obs-text; never CR, LF or NUL. */
const FIELD_VALUE = /^[\t\x20-\x7e\x80-\xff]*$/;

/** A parsed final head, and where its body's first bytes are in the buffer. */
interface GotHead {
  readonly head: ResponseHead;
  readonly start: number;
  readonly end: number;
}

/**
 * Reads until a final response head is parsed: interim 1xx heads (100, 103) are skipped; a 101
 * nobody asked for is a framing error. Bytes after the head stay in the buffer for the body.
 */
async function readHead(
  conn: OwnedConn,
  buffer: Uint8Array,
  filled: number,
  method: string,
): Promise<GotHead> {
  let [start, end] = [0, filled];
  for (;;) {
    const head = end > start ? parseResponseHead(buffer, start, end, { method }) : null;
    if (head && head.status >= 100 && head.status < 200) {
      if (head.status === 101) {
        throw new ResponseFramingError("101 Switching Protocols unasked", "head");
      }
      start += head.headBytes;
      continue;
    }
    if (head) return { head, start: start + head.headBytes, end };
    if (start > 0) {
      buffer.copyWithin(0, start, end);
      [start, end] = [0, end - start];
    }
    const n = await conn.read(buffer.subarray(end));
    if (n === null) throw new Error("The upstream closed the connection before a response head");
    end += n;
  }
}

/** The answer for a parsed head: status, headers, and the body to stream. */
function answerOf(
  got: GotHead,
  from: { conn: OwnedConn; pool: OwnedConns; buffer: Uint8Array; clock: () => number },
): Answer {
  const { head } = got;
  let keepAliveHeader: string | undefined;
  for (let i = 0; i < head.rawHeaders.length; i += 2) {
    if (head.rawHeaders[i].toLowerCase() === "keep-alive") keepAliveHeader = head.rawHeaders[i + 1];
  }
  return {
    status: head.status,
    rawHeaders: head.rawHeaders,
    connection: from.conn,
    keepAlive: keepAliveHeader,
    stream: (settle) =>
      streamOwned({
        ...from,
        decoder: new BodyDecoder(head.framing),
        start: got.start,
        end: got.end,
        keepAlive: head.keepAlive,
      }, settle),
  };
}

/** The route's `first_byte_ms`, from the head going out to the response head. */
function firstByteTimer(forward: Forward, stop: AbortController) {
  const limit = forward.action.firstByteMs;
  let timer: ReturnType<typeof setTimeout> | undefined;
  const state = {
    limit,
    fired: false,
    start() {
      if (limit === undefined) return;
      timer = setTimeout(() => {
        state.fired = true;
        stop.abort();
      }, limit);
    },
    clear() {
      clearTimeout(timer);
    },
  };
  return state;
}

/** The attempt's failure, classified as `attempt.ts` classifies node's. */
function failureOf(
  error: unknown,
  at: {
    context: RequestContext;
    conn: OwnedConn | undefined;
    sent: number;
    stop: AbortController;
    firstByte: { fired: boolean; limit?: number };
  },
): AttemptFailure {
  const { context, conn, sent, firstByte } = at;
  const connected = conn !== undefined;
  const done = { sentBytes: sent, bodyTaken: false };
  if (firstByte.fired) return firstByteFailure(firstByte.limit!, done);
  if (at.stop.signal.aborted) {
    return abortedFailure(context.abortedBy === "client", connected, done);
  }
  if (error instanceof ResponseFramingError) {
    // The way out carried the bytes; the backend's answer broke HTTP/1.1.
    return new AttemptFailure("upstream_failed", error, {
      instanceOk: true,
      backendOk: false,
      sentBytes: sent,
      bodyTaken: false,
    });
  }
  return classify(error as Error, connected, false, sent);
}
