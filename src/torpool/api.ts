/**
 * The pool's JSON API on a Unix socket (mode 0600: only the pool's user may steer it):
 *
 * - `GET /backends` — `{"backends":[{index,host,port,latencyMs,errors,active}]}`, the ready
 *   SOCKS ports;
 * - `GET /health` — the pool's state (`ok`, `degraded`, `down`), 503 when `down`;
 * - `POST /scale` — a JSON body `{"min"?: n, "max"?: n}` sets the instance limits; 400 with the
 *   failure envelope when the body is not such an object or the limits do not fit;
 * - `GET /stats` — every instance in full (lives, deaths in a row, the respawn wait), the scaler,
 *   the counters, and the socket's own rebinds.
 *
 * Anything else is 404 (405 for a known path with another method). Failures use the one failure
 * table and envelope (`src/request/errors.ts`), like the edge and the hub; every answer is
 * `no-store` and carries its request id.
 *
 * Served by `Deno.serve` on the socket `api_socket.ts` owns (why not `node:http`: a `node:net`
 * Unix listener is inherited by every Tor the pool spawns). `Deno.serve` has no header or body
 * timeouts: a client that stalls keeps its connection, which on a socket only the pool's own user
 * can open is no more than that user could do anyway.
 *
 * @module
 */
import * as v from "valibot";
import { failureReply } from "../request/errors.ts";
import { jsonReply, type Reply } from "../request/reply.ts";
import { requestIdFor } from "../request/request_id.ts";
import { type ApiHandler, ServedSocket, type SocketOptions } from "./api_socket.ts";
import type { Backend, PoolHealth } from "./views.ts";

/** What the API reads from and steers: a {@link TorPool} or a stand-in. */
export interface PoolControl {
  backends(): Backend[];
  health(): PoolHealth;
  stats(): object;
  scale(override: { min?: number; max?: number }): { min: number; max: number };
}

/** The largest `POST /scale` body read. */
const MAX_BODY = 4096;

const ScaleBody = v.strictObject({
  min: v.optional(v.pipe(v.number(), v.integer(), v.minValue(1))),
  max: v.optional(v.pipe(v.number(), v.integer(), v.minValue(1))),
});

/**
 * The API as a fetch handler (served on the socket by {@link serveApi}).
 *
 * @param pool what the routes read and steer
 * @param extra more `/stats` fields (the socket's own counters)
 */
export function apiHandler(pool: PoolControl, extra: () => object = () => ({})): ApiHandler {
  return async function poolApi(request) {
    const requestId = requestIdFor(request.headers.get("x-request-id") ?? undefined);
    let reply: Reply;
    try {
      reply = await answer(pool, request, requestId, extra);
    } catch {
      reply = failureReply("internal_error", requestId);
    }
    // Every reply here is JSON text (`jsonReply`, `failureReply`).
    return new Response(String(reply.body ?? ""), {
      status: reply.status,
      headers: { ...reply.headers, "cache-control": "no-store", "x-request-id": requestId },
    });
  };
}

/** The reply to one request. */
async function answer(
  pool: PoolControl,
  request: Request,
  requestId: string,
  extra: () => object,
): Promise<Reply> {
  const path = new URL(request.url).pathname;
  const routes: Record<string, [string, () => Reply | Promise<Reply>]> = {
    "/backends": ["GET", () => jsonReply({ backends: pool.backends() })],
    "/health": ["GET", () => {
      const health = pool.health();
      return jsonReply(health, health.status === "down" ? 503 : 200);
    }],
    "/stats": ["GET", () => jsonReply({ ...pool.stats(), ...extra() })],
    "/scale": ["POST", () => scale(pool, request, requestId)],
  };
  const route = Object.hasOwn(routes, path) ? routes[path] : undefined;
  if (!route) return failureReply("route_not_allowed", requestId);
  if (request.method !== route[0]) {
    await request.body?.cancel();
    return failureReply("method_not_allowed", requestId, { headers: { allow: route[0] } });
  }
  return await route[1]();
}

/** `POST /scale`: the body is read (at most {@link MAX_BODY} bytes), checked, and applied. */
async function scale(pool: PoolControl, request: Request, requestId: string): Promise<Reply> {
  const body = await readCapped(request, MAX_BODY);
  if (body === undefined) return failureReply("payload_too_large", requestId);
  let value: unknown;
  try {
    value = JSON.parse(new TextDecoder().decode(body));
  } catch {
    return failureReply("bad_request", requestId);
  }
  const parsed = v.safeParse(ScaleBody, value);
  if (!parsed.success || (parsed.output.min ?? parsed.output.max) === undefined) {
    return failureReply("bad_request", requestId);
  }
  try {
    return jsonReply(pool.scale(parsed.output));
  } catch (error) {
    if (error instanceof RangeError) return failureReply("bad_request", requestId);
    throw error;
  }
}

/** The request body, or undefined once it passes `limit` bytes (the rest is not read). */
async function readCapped(request: Request, limit: number): Promise<Uint8Array | undefined> {
  const chunks: Uint8Array[] = [];
  let size = 0;
  if (!request.body) return new Uint8Array();
  const reader = request.body.getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.length;
    if (size > limit) {
      await reader.cancel();
      return undefined;
    }
    chunks.push(value);
  }
  const out = new Uint8Array(size);
  let at = 0;
  for (const chunk of chunks) {
    out.set(chunk, at);
    at += chunk.length;
  }
  return out;
}

/** A served API: its socket, and how to close it. */
export interface PoolApi {
  readonly path: string;
  /** Stops accepting, closes connections and removes the socket file. */
  close(): Promise<void>;
}

/**
 * Serves the API on a Unix socket (see `api_socket.ts`): a stale socket is taken over, a live
 * pool's refuses the start, the socket is mode 0600 and served again when deleted.
 *
 * @throws {Error} when the path is a live pool's socket, not a socket at all, or in an open folder
 */
export async function serveApi(
  pool: PoolControl,
  path: string,
  options: SocketOptions,
): Promise<PoolApi> {
  const counts = { rebinds: (): number => 0 };
  const handler = apiHandler(pool, () => ({ apiSocketRebinds: counts.rebinds() }));
  const socket = await ServedSocket.serve(path, handler, options);
  counts.rebinds = () => socket.rebinds;
  return { path, close: () => socket.close() };
}
