/**
 * What a request to the hub's `https_tunnel` endpoint must be: a WebSocket upgrade of
 * `GET /v1/tunnel` (RFC 6455 §4.2.1: `Upgrade: websocket`, a 16-byte `Sec-WebSocket-Key`,
 * `Sec-WebSocket-Version: 13`), then a first message that is exactly the dial op
 * `{"op":"dial","port":N}`; a plain request for the tunnel's path is answered 426, and every
 * other plain request is the api's. The endpoint itself (admission, the stream, its end) is
 * `https_tunnel.ts`.
 *
 * @module
 */
import type { IncomingMessage } from "node:http";
import { TUNNEL_PATH } from "../egress/tunnel_dial.ts";
import { isWebSocketKey } from "../egress/ws_frame.ts";
import { type FailureKind, failureReply } from "../request/errors.ts";
import type { HubRoute } from "./listeners.ts";

/** Why a tunnel was refused. */
export type TunnelRefusal = "node" | "request" | "dial" | "protocol" | "upstream";

/** A refusal before the upgrade: the failure kind, how it is counted, status and headers. */
export interface Refused {
  readonly kind: FailureKind;
  readonly reason: TunnelRefusal;
  readonly status?: number;
  readonly headers?: Record<string, string>;
}

/** Why an upgrade request is not a tunnel request (RFC 6455 §4.2.1), if it is not. */
export function refuseRequest(request: IncomingMessage): Refused | undefined {
  const path = new URL(request.url ?? "/", "http://hub").pathname;
  if (path !== TUNNEL_PATH) return { kind: "route_not_allowed", reason: "request" };
  if (request.method !== "GET") return { kind: "method_not_allowed", reason: "request" };
  const upgrade = String(request.headers.upgrade ?? "").toLowerCase();
  const key = request.headers["sec-websocket-key"];
  if (upgrade !== "websocket" || !isWebSocketKey(typeof key === "string" ? key : undefined)) {
    return { kind: "bad_request", reason: "request" };
  }
  if (request.headers["sec-websocket-version"] !== "13") {
    const headers = { "sec-websocket-version": "13" };
    return { kind: "bad_request", reason: "request", status: 426, headers };
  }
  return undefined;
}

/** The port of a dial op `{"op":"dial","port":N}` (those two keys only), if `text` is one. */
export function dialPort(text: string): number | undefined {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return undefined;
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) return undefined;
  const { op, port, ...rest } = value as Record<string, unknown>;
  if (op !== "dial" || Object.keys(rest).length > 0) return undefined;
  return Number.isInteger(port) && (port as number) >= 1 && (port as number) <= 65535
    ? port as number
    : undefined;
}

/**
 * The endpoint's ordinary requests: `/v1/tunnel` without an upgrade is answered 426 (RFC 9110
 * §15.5.22) naming `websocket`; everything else is `api`'s.
 */
export function tunnelRoute(api: HubRoute): HubRoute {
  return function routeTunnelRequest(request, response, requestId) {
    const path = new URL(request.url ?? "/", "http://hub").pathname;
    if (path !== TUNNEL_PATH) return api(request, response, requestId);
    const headers = { upgrade: "websocket", connection: "Upgrade" };
    return Promise.resolve(failureReply("bad_request", requestId, { status: 426, headers }));
  };
}
