/**
 * One lane listener: a `node:http` server whose request handler is a closure over its lane. There
 * is no code path where a request field selects a lane. Per request (ordinary or `Upgrade`):
 *
 * 1. refuse if the lane is draining;
 * 2. `ledger.admit` — a typed 429/503 when refused; the reservation is released exactly once by
 *    the request's outlet (complete when delivered, cancel when the connection went first);
 * 3. the request-head checks (400/414/431);
 * 4. the lane allowlist, then the lane's dataplane (public) or a typed 404 denial;
 * 5. the deadline: a reply not started by the lane's deadline is a 503 (504 while waiting on an
 *    upstream) and a cancellation. Waiting replies are swept periodically (see deadline_sweep.ts);
 *    a reply that arrives after its deadline is replaced at once.
 *
 * Connections are counted against the lane's ceiling when accepted, before any byte is parsed;
 * the head timeout, idle timeout and header-size cap are the server's (see docs/decisions.md).
 *
 * @module
 */
import type http from "node:http";
import type { Socket } from "node:net";
import type { Duplex } from "node:stream";
import type { ConnectionBudget, Ledger } from "../ledger/ledger.ts";
import { Reservation } from "../ledger/reservation.ts";
import type { ResponseStats } from "../observe/stats.ts";
import type { Observer, RequestRecord } from "../observe/observer.ts";
import { failureReply, GatewayError } from "../proxy/errors.ts";
import { requestIdFor } from "../proxy/request_id.ts";
import { AdmittedRequest } from "./admitted.ts";
import {
  connectionOf,
  describe,
  overloadReply,
  serverNameOf,
  WaitingReply,
} from "./request_support.ts";
import { DeadlineSweep } from "./deadline_sweep.ts";
import type { LaneTable } from "./lane.ts";
import { type Outlet, responseOutlet, socketOutlet } from "./outlet.ts";
import { writeRawReply } from "./raw_reply.ts";
import type { Reply } from "./reply.ts";
import { readHead } from "./request_head.ts";
import { createSubstrate, type Substrate, type TlsServing } from "./substrate.ts";
import { writeReply } from "./write.ts";

/** What a lane server needs from the edge. */
export interface LaneServices {
  readonly ledger: Ledger;
  readonly stats: ResponseStats;
  readonly state: { readonly ready: boolean; readonly draining: boolean };
  /** Where internal failures are reported. */
  readonly log: (line: string) => void;
  /** Metrics, access log and traces per request (absent: nothing is observed). */
  readonly observer?: Observer;
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
  /** TLS on this listener (the public lane with `tls`). */
  readonly tls?: TlsServing;
}

/**
 * Creates the server for one listener of one lane (not yet listening).
 *
 * @param options the lane, the edge services, the limits, the arming switch, TLS
 */
export function createLaneServer<S extends LaneServices>(
  options: LaneServerOptions<S>,
): Substrate {
  const { lane, services, limits, armed } = options;
  const name = lane.descriptor.name;
  const { ledger, stats } = services;
  const budgets = new WeakMap<object, ConnectionBudget>();
  const drains = lane.descriptor.drains;
  const laneProfile = ledger.profile.lanes.find((p) => p.name === name)!;
  const deadlines = new DeadlineSweep(laneProfile.deadlineMs, () => ledger.now());

  const substrate = createSubstrate(limits, options.tls, function serveLaneRequest(
    request,
    response,
  ) {
    const requestId = requestIdFor(request.headers["x-request-id"]);
    const record = observe(request, requestId);
    if (record) services.observer!.finishOnClose(record, response, request.socket);
    if (drains && services.state.draining) {
      send(failureReply("draining", requestId), requestId, (reply, extra) => {
        extra.connection = "close";
        writeReply(response, reply, extra);
      }, record);
      return;
    }
    const admitting = record?.phase("portcullis.admission");
    const admission = ledger.admit(name, budgetOf(request));
    admitting?.end();
    if (!(admission instanceof Reservation)) {
      send(overloadReply(admission, requestId), requestId, (reply, extra) => {
        writeReply(response, reply, extra);
      }, record);
      return;
    }
    serveAdmitted(
      request,
      responseOutlet(response, admission),
      admission,
      requestId,
      undefined,
      record,
    );
  }, function refuseSlowHead(socket) {
    refuseMalformed(
      Object.assign(new Error("Request timeout"), { code: "ERR_HTTP_REQUEST_TIMEOUT" }),
      socket,
    );
  });
  const server = substrate.server;

  /** Starts the request's record, when the edge observes requests. */
  function observe(request: http.IncomingMessage, requestId: string): RequestRecord | undefined {
    return services.observer?.begin({
      lane: name,
      requestId,
      method: request.method ?? "GET",
      target: request.url ?? "/",
      peer: request.socket?.remoteAddress ?? "",
      bytesIn: Number(request.headers["content-length"]) || 0,
    });
  }

  /** The connection's budget, made on its first request (its socket, or its HTTP/2 session). */
  function budgetOf(request: http.IncomingMessage): ConnectionBudget {
    const key = connectionOf(request);
    let budget = budgets.get(key);
    if (!budget) {
      budget = { active: 0 };
      budgets.set(key, budget);
    }
    return budget;
  }

  /** Runs an admitted request through the head checks, the allowlist and the handler. */
  function serveAdmitted(
    request: http.IncomingMessage,
    outlet: Outlet,
    ticket: Reservation,
    requestId: string,
    upgrade?: { socket: Duplex; head: Uint8Array },
    record?: RequestRecord,
  ): void {
    const head = readHead(request, limits);
    if (!("path" in head)) {
      deliver(outlet, failureReply(head.kind, requestId), ticket, requestId, undefined, record);
      return;
    }
    const context = new AdmittedRequest({
      lane: name,
      head,
      headers: request.headers,
      requestId,
      peer: request.socket.remoteAddress ?? "",
      serverName: serverNameOf(request),
      ticket,
      request,
      upgrade,
      record,
    });
    outlet.onAbandon(() => context.abort());
    let outcome: Reply | Promise<Reply>;
    try {
      const route = lane.find(head.method, head.path);
      if (route) outcome = route.handle(context, services);
      else if (lane.descriptor.dataplane) outcome = lane.descriptor.dataplane(context, services);
      else outcome = failureReply("route_not_allowed", requestId);
    } catch (error) {
      outcome = errorReply(error, requestId);
    }
    if (outcome instanceof Promise) awaitReply(outcome, outlet, context);
    else deliver(outlet, outcome, ticket, requestId, context);
  }

  /** Sends a reply unless the deadline passed first, counting what was sent. */
  function deliver(
    outlet: Outlet,
    reply: Reply,
    ticket: Reservation,
    requestId: string,
    context?: AdmittedRequest,
    early?: RequestRecord,
  ): void {
    const record = context?.record ?? early;
    if (outlet.spent) {
      reply.stream?.cancel();
      reply.tunnel?.socket.destroy();
      return;
    }
    if (ticket.live && ticket.expired(ledger.now())) {
      ledger.expire(ticket);
      reply.stream?.cancel();
      reply.tunnel?.socket.destroy();
      reply = failureReply("deadline_exceeded", requestId);
    }
    if (reply.failure === "route_not_allowed" || reply.failure === "no_route") {
      ledger.denyRoute(name);
    }
    if (context?.finishReply) reply = context.finishReply(reply);
    if (reply.withhold) {
      stats.withheld(name);
      if (record) record.outcome ??= reply.failure ?? "withheld";
      if (reply.withhold === "drop") outlet.destroy();
      else hold(outlet, ticket);
      return;
    }
    send(reply, requestId, (r, extra) => {
      // A refused body is left unread on the connection: only closing it is safe.
      const unread = r.failure === "bad_request" || r.failure === "payload_too_large";
      if (unread || (drains && services.state.draining)) {
        if (!outlet.multiplexed) extra.connection = "close";
      }
      outlet.send(r, extra);
    }, record);
  }

  function awaitReply(pending: Promise<Reply>, outlet: Outlet, context: AdmittedRequest): void {
    const waiting = new WaitingReply(outlet, context, expireWaiting);
    const unwatch = deadlines.add(waiting);
    pending.then(
      (reply) => {
        unwatch();
        deliver(outlet, reply, context.ticket, context.requestId, context);
      },
      (error) => {
        unwatch();
        const reply = errorReply(error, context.requestId);
        deliver(outlet, reply, context.ticket, context.requestId, context);
      },
    );
  }

  /** The deadline passed while a reply was awaited: abort the wait, answer, cancel. */
  function expireWaiting(outlet: Outlet, context: AdmittedRequest): void {
    const { ticket, requestId } = context;
    if (outlet.spent || !ticket.live) return;
    context.abort();
    ledger.expire(ticket);
    const reply = failureReply(context.timeoutKind, requestId);
    send(context.finishReply?.(reply) ?? reply, requestId, (r, extra) => {
      outlet.send(r, extra);
    }, context.record);
  }

  /** Holds a connection unanswered until the lane's deadline, then closes it. */
  function hold(outlet: Outlet, ticket: Reservation): void {
    const unwatch = deadlines.add({ deadline: ticket.deadline, expire: () => outlet.destroy() });
    outlet.onAbandon(unwatch);
  }

  /** Counts and writes a reply through `write`, adding the request id. */
  function send(
    reply: Reply,
    requestId: string,
    write: (reply: Reply, extra: Record<string, string>) => void,
    record?: RequestRecord,
  ): void {
    stats.response(name, reply.status);
    if (record) {
      record.status = reply.status;
      if (reply.failure) record.outcome ??= reply.failure;
      record.responding = record.phase("portcullis.response");
    }
    write(reply, { "x-request-id": requestId });
  }

  if (lane.descriptor.dataplane) {
    server.on("upgrade", function serveLaneUpgrade(request, socket: Duplex, head: Uint8Array) {
      const requestId = requestIdFor(request.headers["x-request-id"]);
      const record = observe(request, requestId);
      if (record) services.observer!.finishOnClose(record, socket, socket as Socket);
      const raw = (reply: Reply) =>
        send(reply, requestId, (r, extra) => writeRawReply(socket, r, extra, () => {}), record);
      if (drains && services.state.draining) return raw(failureReply("draining", requestId));
      // h2c is never switched to: through a gateway it would open an HTTP/2 connection to the
      // backend that no routing or policy sees. Such a request is served as plain HTTP/1.1 (its
      // Upgrade dropped), unless it has a body, which the parser left unread on the socket.
      const h2c = offersH2c(request.headers.upgrade);
      if (h2c && carriesBody(request.headers)) return raw(failureReply("bad_request", requestId));
      const admission = ledger.admit(name, budgetOf(request));
      if (!(admission instanceof Reservation)) return raw(overloadReply(admission, requestId));
      const outlet = socketOutlet(socket, admission);
      serveAdmitted(
        request,
        outlet,
        admission,
        requestId,
        h2c ? undefined : { socket, head },
        record,
      );
    });
  }

  server.on("connection", function admitConnection(socket: Socket) {
    if (!armed() || !ledger.openConnection(name)) {
      socket.destroy();
      return;
    }
    socket.once("close", () => ledger.closeConnection(name));
  });

  server.on("clientError", refuseMalformed);

  /** A connection the parser gave up on: a typed reply straight onto the socket, then close. */
  function refuseMalformed(error: NodeJS.ErrnoException, socket: Duplex) {
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
    writeRawReply(socket, failureReply(kind, requestId), { "x-request-id": requestId }, () => {});
  }

  server.on("close", () => deadlines.stop());

  function errorReply(error: unknown, requestId: string): Reply {
    if (error instanceof GatewayError) return failureReply(error.kind, requestId);
    services.log(`portcullis: request ${requestId} failed internally: ${describe(error)}`);
    return failureReply("internal_error", requestId);
  }

  return substrate;
}

/** True when an Upgrade field offers `h2c` (in any case, among other protocols or alone). */
function offersH2c(upgrade: string | undefined): boolean {
  return upgrade !== undefined &&
    upgrade.split(",").some((token) => token.trim().toLowerCase().split("/")[0] === "h2c");
}

/** True when a request head announces a body (chunked, or a non-zero Content-Length). */
function carriesBody(headers: http.IncomingHttpHeaders): boolean {
  const length = headers["content-length"];
  return headers["transfer-encoding"] !== undefined || (length !== undefined && length !== "0");
}
