/**
 * One lane listener: a `node:http` server whose request handler is a closure over its lane. There
 * is no code path where a request field selects a lane. Per request, in order:
 *
 * 1. refuse if the lane is draining;
 * 2. `ledger.admit` — a typed 429/503 when refused; the reservation is released exactly once when
 *    the response finishes (complete) or the connection closes first (cancel);
 * 3. the request-head checks (400/414/431);
 * 4. the lane allowlist, then the lane's dataplane (public) or a typed 404 denial;
 * 5. the deadline: a response not started by the lane's deadline is a 503 and a cancellation.
 *
 * Connections are counted against the lane's ceiling when accepted, before any byte is parsed;
 * the head timeout, idle timeout and header-size cap are the server's (see docs/decisions.md).
 *
 * @module
 */
import http from "node:http";
import type { Socket } from "node:net";
import type { ConnectionBudget, Ledger } from "../ledger/ledger.ts";
import type { Overload } from "../ledger/overload.ts";
import { Reservation } from "../ledger/reservation.ts";
import type { ResponseStats } from "../observe/stats.ts";
import { failureReply, failureStatus, GatewayError } from "../proxy/errors.ts";
import { requestIdFor } from "../proxy/request_id.ts";
import type { LaneTable, RequestContext } from "./lane.ts";
import type { Reply } from "./reply.ts";
import { readHead } from "./request_head.ts";
import { writeReply } from "./write.ts";

/** What a lane server needs from the edge. */
export interface LaneServices {
  readonly ledger: Ledger;
  readonly stats: ResponseStats;
  readonly state: { readonly ready: boolean; readonly draining: boolean };
}

/** Server-level limits, from the bootstrap config. */
export interface ServerLimits {
  readonly headerMs: number;
  readonly idleMs: number;
  readonly requestMs: number;
  readonly headerBytes: number;
  readonly headers: number;
  readonly targetBytes: number;
}

/** Options for {@link createLaneServer}. */
export interface LaneServerOptions<S extends LaneServices> {
  readonly lane: LaneTable<S>;
  readonly services: S;
  readonly limits: ServerLimits;
  /** False until the boot checks passed; connections before that are closed unread. */
  readonly armed: () => boolean;
}

/**
 * Creates the server for one listener of one lane (not yet listening).
 *
 * @param options the lane, the edge services, the limits, the arming switch
 */
export function createLaneServer<S extends LaneServices>(
  options: LaneServerOptions<S>,
): http.Server {
  const { lane, services, limits, armed } = options;
  const name = lane.descriptor.name;
  const { ledger, stats } = services;
  const budgets = new WeakMap<Socket, ConnectionBudget>();

  const server = http.createServer({
    maxHeaderSize: limits.headerBytes,
    // readHead refuses a Host-less HTTP/1.1 request itself, with the error envelope.
    requireHostHeader: false,
    headersTimeout: limits.headerMs,
    requestTimeout: limits.requestMs,
    keepAliveTimeout: limits.idleMs,
    connectionsCheckingInterval: Math.max(50, Math.min(1000, Math.floor(limits.headerMs / 4))),
  }, function serveLaneRequest(request, response) {
    const requestId = requestIdFor(request.headers["x-request-id"]);
    if (lane.descriptor.drains && services.state.draining) {
      send(response, failureReply("draining", requestId), requestId, true);
      return;
    }
    const admission = ledger.admit(name, budgets.get(request.socket));
    if (!(admission instanceof Reservation)) {
      send(response, overloadReply(admission, requestId), requestId, false);
      return;
    }
    const ticket = admission;
    response.once("finish", () => ticket.live && ticket.complete());
    response.once("close", () => ticket.live && ticket.cancel());

    const head = readHead(request, limits);
    if (!("path" in head)) {
      send(response, failureReply(head.kind, requestId), requestId, true);
      return;
    }
    const context: RequestContext = {
      lane: name,
      head,
      headers: request.headers,
      requestId,
      peer: request.socket.remoteAddress ?? "",
      ticket,
    };
    let outcome: Reply | Promise<Reply>;
    try {
      const route = lane.find(head.method, head.path);
      if (route) outcome = route.handle(context, services);
      else if (lane.descriptor.dataplane) outcome = lane.descriptor.dataplane(context, services);
      else outcome = failureReply("route_not_allowed", requestId);
    } catch (error) {
      outcome = errorReply(error, requestId);
    }
    if (outcome instanceof Promise) {
      awaitReply(outcome, response, ticket, requestId);
    } else {
      deliver(response, outcome, ticket, requestId);
    }
  });

  /** Sends a reply unless the deadline passed first, counting what was sent. */
  function deliver(
    response: http.ServerResponse,
    reply: Reply,
    ticket: Reservation,
    requestId: string,
  ): void {
    if (response.headersSent || response.destroyed) return;
    if (ticket.live && ticket.expired(ledger.now())) {
      ledger.expire(ticket);
      reply = failureReply("deadline_exceeded", requestId);
    }
    if (reply.failure === "route_not_allowed" || reply.failure === "no_route") {
      ledger.denyRoute(name);
    }
    if (reply.withhold) {
      withhold(response, reply.withhold, ticket);
      return;
    }
    send(response, reply, requestId, reply.failure === "bad_request");
  }

  function awaitReply(
    pending: Promise<Reply>,
    response: http.ServerResponse,
    ticket: Reservation,
    requestId: string,
  ): void {
    const timer = setTimeout(() => {
      if (!response.headersSent && ticket.live) {
        ledger.expire(ticket);
        send(response, failureReply("deadline_exceeded", requestId), requestId, false);
      }
    }, Math.max(0, ticket.deadline - ledger.now()));
    pending.then(
      (reply) => deliver(response, reply, ticket, requestId),
      (error) => deliver(response, errorReply(error, requestId), ticket, requestId),
    ).finally(() => clearTimeout(timer));
  }

  function withhold(response: http.ServerResponse, how: "drop" | "hold", ticket: Reservation) {
    stats.withheld(name);
    if (how === "drop") {
      response.destroy();
      return;
    }
    const timer = setTimeout(() => response.destroy(), Math.max(0, ticket.deadline - ledger.now()));
    response.once("close", () => clearTimeout(timer));
  }

  function send(response: http.ServerResponse, reply: Reply, requestId: string, close: boolean) {
    stats.response(name, reply.status);
    const extra: Record<string, string> = { "x-request-id": requestId };
    if (close || (lane.descriptor.drains && services.state.draining)) extra.connection = "close";
    writeReply(response, reply, extra);
  }

  server.on("connection", function admitConnection(socket: Socket) {
    if (!armed() || !ledger.openConnection(name)) {
      socket.destroy();
      return;
    }
    budgets.set(socket, { active: 0 });
    socket.once("close", () => ledger.closeConnection(name));
  });

  server.on("clientError", function refuseMalformed(error: NodeJS.ErrnoException, socket: Socket) {
    const kind = error.code === "HPE_HEADER_OVERFLOW"
      ? "header_fields_too_large"
      : error.code === "ERR_HTTP_REQUEST_TIMEOUT"
      ? "request_timeout"
      : "bad_request";
    if (error.code === "ECONNRESET" || !socket.writable) {
      socket.destroy();
      return;
    }
    stats.protocolError(name);
    const requestId = crypto.randomUUID();
    const body = failureReply(kind, requestId).body as string;
    socket.end(
      `HTTP/1.1 ${failureStatus(kind)} ${http.STATUS_CODES[failureStatus(kind)]}\r\n` +
        `content-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n` +
        `x-request-id: ${requestId}\r\nconnection: close\r\n\r\n${body}`,
    );
  });
  return server;
}

function overloadReply(overload: Overload, requestId: string): Reply {
  const headers = overload.retryAfterMs !== undefined
    ? { "retry-after": String(Math.max(1, Math.ceil(overload.retryAfterMs / 1000))) }
    : undefined;
  return failureReply(overload.overload, requestId, { headers });
}

function errorReply(error: unknown, requestId: string): Reply {
  if (error instanceof GatewayError) return failureReply(error.kind, requestId);
  console.error(`portcullis: request ${requestId} failed internally:`, error);
  return failureReply("internal_error", requestId);
}
