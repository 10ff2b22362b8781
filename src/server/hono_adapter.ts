/**
 * Hono on the gateway's own transports. The operator APIs (the hub's listeners, the edge's
 * `local_health` lane) route through a Hono app, but their answers stay {@link Reply} values
 * written by the writers every other answer goes through — one failure envelope, one place that
 * adds `X-Request-Id`, `Cache-Control` and `Content-Length`.
 *
 * Why not `@hono/node-server`: the lane has no `node:http` response of its own to hand an adapter
 * (its replies go through the ledger's reply channel), and the hub's writer adds the headers every
 * hub answer carries; a handler's Reply rides through the app inside the Response that carries it
 * ({@link replyResponse}), so neither side re-encodes a body. A Response Hono made itself (a
 * refusal thrown by `bearerAuth`) is read back into a Reply, its failure kind recovered from the
 * envelope.
 *
 * Why HEAD is sent as GET: Hono answers HEAD by running the GET route and building a new, bodiless
 * Response, which would lose the Reply (and the GET's Content-Length); the transports already drop
 * the body of a HEAD answer.
 *
 * @module
 */
import type { IncomingMessage } from "node:http";
import type { FailureKind } from "../request/errors.ts";
import type { Reply } from "../request/reply.ts";

/** The Reply each Response made by {@link replyResponse} carries. */
const carried = new WeakMap<Response, Reply>();
/** Responses that stand for "no answer" (the client went away while its request was held). */
const unanswered = new WeakSet<Response>();

/**
 * A Response that carries `reply` through a Hono app unchanged.
 *
 * @example
 * ```ts
 * import { replyOf, replyResponse } from "./hono_adapter.ts";
 * const reply = { status: 200, body: "ok" };
 * replyOf(replyResponse(reply)) === reply; // true
 * ```
 */
export function replyResponse(reply: Reply): Response {
  const response = new Response(null, { status: reply.status });
  carried.set(response, reply);
  return response;
}

/** A Response that says: write nothing (the client has gone). */
export function noReply(): Response {
  const response = new Response(null, { status: 204 });
  unanswered.add(response);
  return response;
}

/**
 * The Reply an app answered with: the one it carried, none for {@link noReply}, or the Response
 * read whole (a failure envelope's `error.code` becomes the reply's failure kind).
 */
export function replyOf(response: Response): Reply | undefined | Promise<Reply> {
  if (unanswered.has(response)) return undefined;
  return carried.get(response) ?? readReply(response);
}

async function readReply(response: Response): Promise<Reply> {
  const body = new Uint8Array(await response.arrayBuffer());
  const headers: Record<string, string> = {};
  response.headers.forEach((value, name) => headers[name] = value);
  return { status: response.status, headers, body, failure: failureIn(headers, body) };
}

/** The `error.code` of a JSON failure envelope, if `body` is one. */
function failureIn(headers: Record<string, string>, body: Uint8Array): FailureKind | undefined {
  if (!headers["content-type"]?.startsWith("application/json")) return undefined;
  try {
    const code = JSON.parse(new TextDecoder().decode(body))?.error?.code;
    return typeof code === "string" ? code as FailureKind : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The request as the operator apps' Hono reads it: its method (HEAD as GET), URL and headers —
 * what Hono's router, `bearerAuth` and the query validator read. Not a whole fetch `Request`:
 * building one costs about 20 µs more per request on these APIs (bench/admin_hono.ts), and no route
 * reads a body through it — the routes that take one read it from `incoming`, under their caps.
 *
 * @param incoming the parsed request
 * @param target the path and query to route by (default: the request's own target)
 */
export function requestOf(incoming: IncomingMessage, target = incoming.url ?? "/"): Request {
  const headers = new Headers();
  const raw = incoming.rawHeaders;
  for (let i = 0; i < raw.length; i += 2) {
    try {
      headers.append(raw[i], raw[i + 1]);
    } catch {
      // A value node's parser let through but fetch's Headers refuses: no route reads it.
    }
  }
  const method = incoming.method === "HEAD" ? "GET" : incoming.method ?? "GET";
  // As `new URL` reads it: an absolute-form target routes by its path.
  const url = new URL(target, "http://operator");
  const routed = { method, url: `http://operator${url.pathname}${url.search}`, headers };
  return routed as unknown as Request;
}
