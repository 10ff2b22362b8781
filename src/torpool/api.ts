/**
 * The pool's JSON API on a Unix socket (mode 0600: only the pool's user may steer it):
 *
 * - `GET /backends` — `{"backends":[{index,host,port,latencyMs,errors,active}]}`, the ready
 *   SOCKS ports;
 * - `GET /health` — the pool's state (`ok`, `degraded`, `down`), 503 when `down`;
 * - `POST /scale` — a JSON body `{"min"?: n, "max"?: n}` sets the instance limits; 400 with the
 *   failure envelope when the body is not such an object or the limits do not fit;
 * - `GET /stats` — every instance in full, the scaler and the counters.
 *
 * Anything else is 404 (405 for a known path with another method). Failures use the one failure
 * table and envelope (`src/request/errors.ts`), like the edge and the hub.
 *
 * @module
 */
import { dirname } from "node:path";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import * as v from "valibot";
import { failureReply } from "../request/errors.ts";
import { jsonReply, type Reply } from "../request/reply.ts";
import { requestIdFor } from "../request/request_id.ts";
import { writeReply } from "../request/write_reply.ts";
import type { Backend, PoolHealth } from "./views.ts";

/** What the API reads from and steers: a {@link TorPool} or a stand-in. */
export interface PoolControl {
  backends(): Backend[];
  health(): PoolHealth;
  stats(): unknown;
  scale(override: { min?: number; max?: number }): { min: number; max: number };
}

/** The largest `POST /scale` body read. */
const MAX_BODY = 4096;

const ScaleBody = v.strictObject({
  min: v.optional(v.pipe(v.number(), v.integer(), v.minValue(1))),
  max: v.optional(v.pipe(v.number(), v.integer(), v.minValue(1))),
});

/**
 * The API as a node:http request listener (served on the socket by {@link serveApi}).
 *
 * @param pool what the routes read and steer
 */
export function apiHandler(
  pool: PoolControl,
): (request: IncomingMessage, response: ServerResponse) => void {
  return function poolApi(request, response) {
    const requestId = requestIdFor(request.headers["x-request-id"]);
    answer(pool, request, requestId).then(
      (reply) => writeReply(response, reply, requestId),
      () => writeReply(response, failureReply("internal_error", requestId), requestId),
    );
  };
}

/** The reply to one request. */
async function answer(
  pool: PoolControl,
  request: IncomingMessage,
  requestId: string,
): Promise<Reply> {
  const path = (request.url ?? "").split("?")[0];
  const routes: Record<string, [string, () => Reply | Promise<Reply>]> = {
    "/backends": ["GET", () => jsonReply({ backends: pool.backends() })],
    "/health": ["GET", () => {
      const health = pool.health();
      return jsonReply(health, health.status === "down" ? 503 : 200);
    }],
    "/stats": ["GET", () => jsonReply(pool.stats())],
    "/scale": ["POST", () => scale(pool, request, requestId)],
  };
  const route = routes[path];
  if (!route) return failureReply("route_not_allowed", requestId);
  if (request.method !== route[0]) {
    request.resume();
    return failureReply("method_not_allowed", requestId, { headers: { allow: route[0] } });
  }
  return await route[1]();
}

/** `POST /scale`: the body is read (at most {@link MAX_BODY} bytes), checked, and applied. */
async function scale(
  pool: PoolControl,
  request: IncomingMessage,
  requestId: string,
): Promise<Reply> {
  const chunks: Uint8Array[] = [];
  let size = 0;
  for await (const chunk of request) {
    size += (chunk as Uint8Array).length;
    if (size > MAX_BODY) return failureReply("payload_too_large", requestId);
    chunks.push(chunk as Uint8Array);
  }
  let body: unknown;
  try {
    body = JSON.parse(new TextDecoder().decode(concat(chunks)));
  } catch {
    return failureReply("bad_request", requestId);
  }
  const parsed = v.safeParse(ScaleBody, body);
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

function concat(chunks: readonly Uint8Array[]): Uint8Array {
  const out = new Uint8Array(chunks.reduce((n, c) => n + c.length, 0));
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
 * Serves the API on a Unix socket: a stale socket file is removed first (one nothing answers on),
 * and the socket is set to mode 0600 as soon as it is bound.
 *
 * @throws {Error} when the path is a live socket or not a socket at all
 */
export async function serveApi(pool: PoolControl, path: string): Promise<PoolApi> {
  await privateFolder(dirname(path));
  await clearStale(path);
  const server: Server = createServer({ requestTimeout: 10_000, headersTimeout: 5_000 });
  server.on("request", apiHandler(pool));
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(path, () => {
      server.off("error", reject);
      resolve();
    });
  });
  await Deno.chmod(path, 0o600);
  return {
    path,
    async close() {
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
      await Deno.remove(path).catch(() => {});
    },
  };
}

/**
 * Makes the socket's folder (mode 0700) if it is missing, and refuses one that others may write
 * to: whoever can write there could replace the socket with their own.
 */
async function privateFolder(dir: string): Promise<void> {
  await Deno.mkdir(dir, { recursive: true, mode: 0o700 });
  const mode = (await Deno.stat(dir)).mode ?? 0;
  if ((mode & 0o022) !== 0) {
    throw new Error(
      `Cannot serve the pool API in ${dir}: the folder is writable by others ` +
        `(mode ${(mode & 0o777).toString(8)})`,
    );
  }
}

/** Frees `path` for a new socket, or says why it cannot be used. */
async function clearStale(path: string): Promise<void> {
  let info: Deno.FileInfo;
  try {
    info = await Deno.lstat(path);
  } catch (error) {
    if (error instanceof Deno.errors.NotFound) return;
    throw error;
  }
  if (!info.isSocket) throw new Error(`Cannot serve the pool API: ${path} is not a socket`);
  try {
    const probe = await Deno.connect({ transport: "unix", path });
    probe.close();
  } catch {
    await Deno.remove(path);
    return;
  }
  throw new Error(`Cannot serve the pool API: ${path} is in use by another process`);
}
