/**
 * The writer of the operator-facing APIs that answer on plain node:http — the hub's and the Tor
 * pool's (the edge's lanes write through their own server): a {@link Reply} built by the shared
 * failure table or `jsonReply` is put on the wire here. Every such answer is `no-store` (a config
 * set, a node list or a pool's state is never to be cached on the way) and carries its request id.
 *
 * @module
 */
import type { ServerResponse } from "node:http";
import type { Reply } from "./reply.ts";

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
