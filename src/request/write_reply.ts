/**
 * The writer of the operator-facing APIs that answer on plain node:http — the hub's and the Tor
 * pool's (the edge's lanes write through their own server): a {@link Reply} built by the shared
 * failure table or `jsonReply` is put on the wire here. Every such answer is `no-store` (a config
 * set, a node list or a pool's state is never to be cached on the way) and carries its request id,
 * except a failure the operator's `errors` settings render without one (error_pages.ts).
 *
 * @module
 */
import type { ServerResponse } from "node:http";
import { ErrorPages } from "./error_pages.ts";
import type { Reply } from "./reply.ts";

/**
 * Writes a fixed-body reply: its status and headers, then Content-Length, `Cache-Control: no-store`
 * and `X-Request-Id` (for a failure, as `pages` say: the hub's to a caller it has not authenticated
 * read as the operator chose, by default naming nothing).
 *
 * @param response where to write
 * @param given what to write (its `body`; the hub streams nothing)
 * @param requestId the request's id, the same one an error envelope carries
 * @param pages how failures read (absent: the envelope, for loopback-only operator listeners)
 */
export function writeReply(
  response: ServerResponse,
  given: Reply,
  requestId: string,
  pages: ErrorPages = STRUCTURED,
): void {
  const { reply, extra } = pages.finish(given, requestId);
  const body = reply.body ?? "";
  const length = typeof body === "string" ? new TextEncoder().encode(body).byteLength : body.length;
  response.writeHead(reply.status, {
    ...reply.headers,
    "content-length": String(length),
    "cache-control": "no-store",
    ...extra,
  });
  response.end(body);
}

/** The envelope with the request id: what the loopback operator listeners always answered. */
const STRUCTURED = ErrorPages.structured();
