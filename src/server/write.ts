/**
 * The one place a {@link Reply} becomes bytes: status, headers (with the request id), and a fixed
 * body or a streamed one (an upstream's, or a body file opened by the respond action). A stream is
 * piped with backpressure, so a slow reader holds its reservation rather than gateway memory.
 *
 * A reply after which the gateway closes the connection (`extra.connection`) is closed by node's
 * own rule (`shouldKeepAlive`), not by a field set here: node then writes `Date` and
 * `Connection: close` in its spelling and order, as for a client that asked to close, so the
 * gateway's closing replies look like every other reply it writes (raw_reply.ts writes the same).
 *
 * @module
 */
import type { ServerResponse } from "node:http";
import type { Reply } from "../request/reply.ts";

/**
 * Writes a reply.
 *
 * @param response the node response to write to
 * @param reply what to send
 * @param given headers the server adds (request id; `connection: close` to close after it)
 */
export function writeReply(
  response: ServerResponse,
  reply: Reply,
  given: Record<string, string>,
): void {
  let extra = given;
  if (given.connection !== undefined) {
    const { connection, ...rest } = given;
    if (connection.toLowerCase() === "close") response.shouldKeepAlive = false;
    extra = rest;
  }
  if (reply.stream) {
    if (reply.rawHeaders) {
      // rawHeaders already carry the request id (hygiene sets it).
      response.writeHead(reply.status, reply.rawHeaders as string[]);
    } else {
      // A body file: its headers (Content-Length included) are the route's, plus the server's.
      response.writeHead(reply.status, { ...reply.headers, ...extra });
    }
    reply.stream.pipeTo(response);
    return;
  }
  const body = reply.body ?? "";
  const length = typeof body === "string" ? Buffer.byteLength(body) : body.byteLength;
  response.writeHead(reply.status, {
    ...reply.headers,
    ...extra,
    "content-length": String(length),
  });
  response.end(body);
}
