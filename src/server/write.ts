/**
 * The one place a {@link Reply} becomes bytes: status, headers (with the request id), and a fixed
 * body or a streamed one (an upstream's, or a body file opened by the respond action). A stream is
 * piped with backpressure, so a slow reader holds its reservation rather than gateway memory.
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
 * @param extra headers the server adds (request id, connection)
 */
export function writeReply(
  response: ServerResponse,
  reply: Reply,
  extra: Record<string, string>,
): void {
  if (reply.stream) {
    if (reply.rawHeaders) {
      // rawHeaders already carry the request id (hygiene sets it); add only a connection close.
      const headers = extra.connection
        ? [...reply.rawHeaders, "connection", extra.connection]
        : reply.rawHeaders;
      response.writeHead(reply.status, headers as string[]);
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
