/**
 * The hub's one writer: it answers on node:http (the edge writes with its own server), so a
 * {@link Reply} built by the shared failure table or {@link jsonReply} is put on the wire here.
 * Every hub answer is `no-store` (a config set or a node list is never to be cached on the way)
 * and carries its request id, as the edge's do.
 *
 * @module
 */
import type { ServerResponse } from "node:http";
import type { Reply } from "../request/reply.ts";

/**
 * Writes a fixed-body reply: its status and headers, then Content-Length, `Cache-Control: no-store`
 * and `X-Request-Id`.
 *
 * @param response where to write
 * @param reply what to write (its `body`; the hub streams nothing)
 * @param requestId the request's id, the same one an error envelope carries
 */
export function writeReply(response: ServerResponse, reply: Reply, requestId: string): void {
  const body = reply.body ?? "";
  const length = typeof body === "string" ? new TextEncoder().encode(body).byteLength : body.length;
  response.writeHead(reply.status, {
    ...reply.headers,
    "content-length": String(length),
    "cache-control": "no-store",
    "x-request-id": requestId,
  });
  response.end(body);
}
