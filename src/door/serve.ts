/**
 * What a door answers. Public listeners: `GET`/`HEAD` of `/` is the cover; of any other path, the
 * first segment is matched against the slugs (`table.ts`), and a slug with an eligible mirror is
 * answered `302 Location: https://<mirror>/`; everything else — a miss, a slug with no eligible
 * mirror, no view yet — is the cover, byte for byte and header for header, so a prober cannot tell
 * a wrong slug from the front page. Other methods get 405 with `Allow: GET, HEAD` (RFC 9110
 * §15.5.6) and an empty body.
 *
 * Why the door's public answers are not the project's JSON error envelope: a door must look like
 * the small site its cover shows, and `{"error":{"code":...}}` on a 405 would let a scanner find
 * every door on the internet by one request. The status still comes from the failure table.
 *
 * Nothing here logs a path. The public side counts covers, hits and refused methods for status.
 * The health listener (loopback) answers `/healthz`, `/readyz` and `/v1/status` through the shared
 * writer.
 *
 * @module
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import { failureReply, failureStatus } from "../request/errors.ts";
import { jsonReply } from "../request/reply.ts";
import { requestIdFor } from "../request/request_id.ts";
import { writeReply } from "../request/write_reply.ts";
import { type NotReadyReason, readinessReply } from "../live/readiness.ts";
import type { DoorTable } from "./table.ts";

/** What the public side has answered since start. */
export interface PublicCounts {
  covers: number;
  hits: number;
  refused: number;
}

/** The public listeners' handler, over the door's table and its cover page. */
export function publicHandler(
  options: { readonly table: DoorTable; readonly cover: Uint8Array; readonly counts: PublicCounts },
): (request: IncomingMessage, response: ServerResponse) => void {
  const { table, cover, counts } = options;
  const coverHeaders = {
    "content-type": "text/html; charset=utf-8",
    "content-length": String(cover.byteLength),
  };
  return function answerDoorRequest(request, response) {
    const head = request.method === "HEAD";
    if (request.method !== "GET" && !head) {
      counts.refused++;
      response.writeHead(failureStatus("method_not_allowed"), {
        allow: "GET, HEAD",
        "content-length": "0",
      });
      response.end();
      return;
    }
    const host = table.resolve(firstSegment(request.url ?? "/"));
    if (host === undefined) {
      counts.covers++;
      response.writeHead(200, coverHeaders);
      response.end(head ? undefined : cover);
      return;
    }
    counts.hits++;
    response.writeHead(302, {
      location: `https://${host}/`,
      "cache-control": "no-store",
      "referrer-policy": "no-referrer",
      "content-length": "0",
    });
    response.end();
  };
}

/**
 * The first path segment of a request target, as sent (no percent-decoding: a slug needs none);
 * "" for `/`. An absolute-form target (`http://host/path`) is read for its path.
 *
 * @example
 * ```ts
 * import { firstSegment } from "./serve.ts";
 * firstSegment("/reading-room-1/x?y=1"); // "reading-room-1"
 * firstSegment("/"); // ""
 * ```
 */
export function firstSegment(target: string): string {
  let path = target;
  if (!path.startsWith("/")) {
    try {
      path = new URL(target).pathname;
    } catch {
      return "";
    }
  }
  const end = path.slice(1).search(/[/?#]/);
  return end < 0 ? path.slice(1) : path.slice(1, end + 1);
}

/**
 * The health listener's handler: `/healthz`, `/readyz` and `/v1/status` (GET or HEAD), nothing
 * else. `/readyz` is 503 with the reasons while the door holds no verified view (readiness.ts).
 */
export function healthHandler(
  status: () => Record<string, unknown>,
  reasons: () => readonly NotReadyReason[] = () => [],
): (request: IncomingMessage, response: ServerResponse) => void {
  return function answerDoorHealth(request, response) {
    const requestId = requestIdFor(request.headers["x-request-id"]);
    const path = firstPath(request.url ?? "/");
    const read = request.method === "GET" || request.method === "HEAD";
    const known = path === "/healthz" || path === "/readyz" || path === "/v1/status";
    const reply = !known
      ? failureReply("route_not_allowed", requestId)
      : !read
      ? failureReply("method_not_allowed", requestId, { headers: { allow: "GET, HEAD" } })
      : path === "/healthz"
      ? jsonReply({ status: "ok" })
      : path === "/readyz"
      ? readinessReply(reasons(), requestId)
      : jsonReply(status());
    writeReply(response, reply, requestId);
  };
}

/** A target's path without its query. */
function firstPath(target: string): string {
  const end = target.search(/[?#]/);
  return end < 0 ? target : target.slice(0, end);
}
