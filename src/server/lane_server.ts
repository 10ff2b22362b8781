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
 * Pipelined requests beyond a connection's `per_connection` bound wait unparsed-ahead and are
 * dropped if the client leaves (connection_state.ts); a reply the client does not take is cut off
 * (delivery_watch.ts). On a plain-HTTP listener no reply carries Strict-Transport-Security
 * (RFC 6797 §7.2).
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
import { type AddressSet, canonicalAddress } from "../proxy/cidr.ts";
import { AdmittedRequest } from "./admitted.ts";
import {
  connectionOf as connectionKeyOf,
  describe,
  overloadReply,
  serverNameOf,
  WaitingReply,
} from "./request_support.ts";
import { ConnectionState } from "./connection_state.ts";
import { ParseGate, preferListeners } from "./parse_gate.ts";
import { DeadlineSweep } from "./deadline_sweep.ts";
import { DeliveryWatch } from "./delivery_watch.ts";
import { withoutHsts } from "./plain_reply.ts";
import type { LaneTable } from "./lane.ts";
import { type Outlet, responseOutlet, socketOutlet } from "./outlet.ts";
import { writeRawReply } from "./raw_reply.ts";
import type { Reply } from "./reply.ts";
import { carriesBody, readHead } from "./request_head.ts";
import type { PathRules } from "../request/canonical_path.ts";
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
  /** Peers whose `X-Forwarded-Proto` is believed (a TLS-terminating proxy in front). */
  readonly trusted?: AddressSet;
}

/** Server-level limits, from the bootstrap config. */
export interface ServerLimits {
  readonly headerMs: number;
  readonly idleMs: number;
  readonly requestMs: number;
  readonly headerBytes: number;
  readonly headers: number;
  readonly targetBytes: number;
  /** A reply whose waiting bytes the client does not take for this long is cut off. */
  readonly sendMs: number;
  /** While bytes wait, the least the client must take per second (0: any progress). */
  readonly minSendRate: number;
  /** An Upgrade tunnel quiet both ways this long is closed (absent: never). */
  readonly tunnelIdleMs?: number;
  /** How paths are made canonical. */
  readonly paths: PathRules;
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
  const connections = new WeakMap<object, ConnectionBudget>();
  /** Admitted requests with a body still arriving: how to end each if its body turns out broken. */
  const bodyBreakers = new WeakMap<object, () => void>();
  const drains = lane.descriptor.drains;
  const laneProfile = ledger.profile.lanes.find((p) => p.name === name)!;
  const deadlines = new DeadlineSweep(laneProfile.deadlineMs, () => ledger.now());
  const deliveries = new DeliveryWatch(limits);
  const tls = options.tls !== undefined;

  const substrate = createSubstrate(limits, options.tls, function serveLaneRequest(
    request,
    response,
  ) {
    const connection = connectionOf(request);
    if (connection instanceof ConnectionState) {
      // A client that has gone gets no work done for it, parsed or not.
      if (request.socket.destroyed) return connection.drop();
      // Parsed after the connection's end was decided: a strict peer would never have seen it.
      if (connection.closing) return connection.drop();
      if (!response.shouldKeepAlive) connection.close();
      connection.reading = request;
      if (connection.mustWait()) {
        connection.wait(() => admitRequest(request, response, connection));
        return;
      }
    }
    admitRequest(request, response, connection);
  }, function refuseSlowHead(socket) {
    refuseMalformed(
      Object.assign(new Error("Request timeout"), { code: "ERR_HTTP_REQUEST_TIMEOUT" }),
      socket,
    );
  });
  const server = substrate.server;

  /** Admits one request (or answers its overload) and serves it. */
  function admitRequest(
    request: http.IncomingMessage,
    response: http.ServerResponse,
    connection: ConnectionBudget,
  ): void {
    const requestId = requestIdFor(request.headers["x-request-id"]);
    const record = observe(request, requestId);
    if (record) services.observer!.finishOnClose(record, response, request.socket);
    if (drains && services.state.draining) {
      send(failureReply("draining", requestId), requestId, tls, (reply, extra) => {
        extra.connection = "close";
        writeReply(response, reply, extra);
      }, record);
      return;
    }
    const admitting = record?.phase("portcullis.admission");
    const admission = ledger.admit(name, connection);
    admitting?.end();
    if (!(admission instanceof Reservation)) {
      send(overloadReply(admission, requestId), requestId, tls, (reply, extra) => {
        // An HTTP/1.1 connection refused for capacity or rate is closed after the answer: the
        // requests pipelined behind it are not parsed, admitted or answered one 429 at a time
        // (a full lane made a pipelined flood cost one refusal per request).
        if (connection instanceof ConnectionState) {
          extra.connection = "close";
          connection.close();
        }
        writeReply(response, reply, extra);
      }, record);
      return;
    }
    const outlet = responseOutlet(response, admission);
    serveAdmitted(request, outlet, { ticket: admission, requestId, record });
  }

  /**
   * Starts the request's record, when the edge observes requests. Only a trusted proxy's
   * `traceparent` is continued; anyone else's request starts a trace of its own.
   */
  function observe(request: http.IncomingMessage, requestId: string): RequestRecord | undefined {
    if (!services.observer) return undefined;
    const traceparent = request.headers.traceparent;
    return services.observer.begin({
      lane: name,
      requestId,
      method: request.method ?? "GET",
      target: request.url ?? "/",
      peer: request.socket?.remoteAddress ?? "",
      bytesIn: Number(request.headers["content-length"]) || 0,
      scheme: tls ? "https" : "http",
      traceparent: typeof traceparent === "string" && fromTrustedPeer(request)
        ? traceparent
        : undefined,
    });
  }

  /**
   * The connection's budget, made on its first request: for an HTTP/1.1 socket a
   * {@link ConnectionState} (pipelined requests wait in it), for an HTTP/2 session a plain budget.
   */
  function connectionOf(request: http.IncomingMessage): ConnectionBudget {
    const key = connectionKeyOf(request);
    let budget = connections.get(key);
    if (!budget) {
      budget = key === request.socket
        ? new ConnectionState(
          request.socket,
          ledger.profile.perConnection,
          (dropped) => stats.abandoned(name, dropped),
        )
        : { active: 0 };
      connections.set(key, budget);
    }
    return budget;
  }

  /** Runs an admitted request through the head checks, the allowlist and the handler. */
  function serveAdmitted(
    request: http.IncomingMessage,
    outlet: Outlet,
    admitted: {
      ticket: Reservation;
      requestId: string;
      record?: RequestRecord;
      upgrade?: { socket: Duplex; head: Uint8Array };
    },
  ): void {
    const { ticket, requestId, record } = admitted;
    const head = readHead(request, limits);
    if (!("path" in head)) {
      deliver(outlet, failureReply(head.kind, requestId), { ticket, requestId, record });
      return;
    }
    record?.canonical(head.path);
    const context = new AdmittedRequest({
      lane: name,
      head,
      headers: request.headers,
      requestId,
      peer: request.socket.remoteAddress ?? "",
      serverName: serverNameOf(request),
      tls,
      secure: tls || trustedHttps(request),
      ticket,
      request,
      upgrade: admitted.upgrade,
      record,
    });
    outlet.onAbandon(() => context.abort());
    if (carriesBody(head.body) && !request.complete) {
      bodyBreakers.set(request, () => context.breakBody());
    }
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
    else deliver(outlet, outcome, context);
  }

  /** Sends a reply unless the deadline passed first, counting what was sent. */
  function deliver(
    outlet: Outlet,
    reply: Reply,
    request: {
      readonly ticket: Reservation;
      readonly requestId: string;
      readonly record?: RequestRecord;
    } | AdmittedRequest,
  ): void {
    const { ticket, requestId, record } = request;
    const context = request instanceof AdmittedRequest ? request : undefined;
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
    send(reply, requestId, context?.secure ?? tls, (r, extra) => {
      if (bodyLeftUnread(context) || (drains && services.state.draining)) {
        if (!outlet.multiplexed) {
          extra.connection = "close";
          if (ticket.connection instanceof ConnectionState) ticket.connection.close();
        }
      }
      outlet.send(r, extra);
      if (!outlet.multiplexed) watchDelivery(outlet, record);
    }, record);
  }

  /**
   * True when the request's body is not (all) read: the connection is closed after the reply, the
   * only safe end for bytes nobody framed. A head refused before its framing was known counts too.
   */
  function bodyLeftUnread(context: AdmittedRequest | undefined): boolean {
    if (!context) return true;
    return carriesBody(context.head.body) && !context.request.complete;
  }

  /** True when a trusted proxy in front says its client came over https. */
  function trustedHttps(request: http.IncomingMessage): boolean {
    const claim = request.headers["x-forwarded-proto"];
    if (typeof claim !== "string") return false;
    return claim.trim().toLowerCase() === "https" && fromTrustedPeer(request);
  }

  /** True when the request's direct peer is in `trusted_proxies`. */
  function fromTrustedPeer(request: http.IncomingMessage): boolean {
    if (services.trusted === undefined) return false;
    const peer = canonicalAddress(request.socket?.remoteAddress ?? "");
    return peer !== undefined && peer !== "" && services.trusted.has(peer);
  }

  /** Watches a reply's delivery: a client that does not take its bytes is cut off. */
  function watchDelivery(outlet: Outlet, record: RequestRecord | undefined): void {
    const socket = outlet.socket;
    if (!socket) return;
    const stop = deliveries.watch(() => outlet.socket, function cutSlowReader() {
      stats.cut(name, "send_timeout");
      if (record) record.outcome = "send_timeout";
      outlet.destroy();
    });
    outlet.onClose(stop);
  }

  function awaitReply(pending: Promise<Reply>, outlet: Outlet, context: AdmittedRequest): void {
    const waiting = new WaitingReply(outlet, context, expireWaiting);
    const unwatch = deadlines.add(waiting);
    pending.then(
      (reply) => {
        unwatch();
        deliver(outlet, reply, context);
      },
      (error) => {
        unwatch();
        // A body the parser gave up on is the client's fault, whatever the exchange said.
        const reply = context.bodyBroken
          ? failureReply("bad_request", context.requestId)
          : errorReply(error, context.requestId);
        deliver(outlet, reply, context);
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
    send(context.finishReply?.(reply) ?? reply, requestId, context.secure, (r, extra) => {
      outlet.send(r, extra);
    }, context.record);
  }

  /** Holds a connection unanswered until the lane's deadline, then closes it. */
  function hold(outlet: Outlet, ticket: Reservation): void {
    const unwatch = deadlines.add({ deadline: ticket.deadline, expire: () => outlet.destroy() });
    outlet.onAbandon(unwatch);
  }

  /**
   * Counts and writes a reply through `write`, adding the request id. A reply that reaches its
   * client over plain HTTP never carries Strict-Transport-Security (RFC 6797 §7.2).
   */
  function send(
    reply: Reply,
    requestId: string,
    secure: boolean,
    write: (reply: Reply, extra: Record<string, string>) => void,
    record?: RequestRecord,
  ): void {
    if (!secure) reply = withoutHsts(reply);
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
        send(
          reply,
          requestId,
          tls,
          (r, extra) => writeRawReply(socket, r, extra, () => {}),
          record,
        );
      if (drains && services.state.draining) return raw(failureReply("draining", requestId));
      // h2c is never switched to: through a gateway it would open an HTTP/2 connection to the
      // backend that no routing or policy sees. Such a request is served as plain HTTP/1.1 (its
      // Upgrade dropped), unless it has a body, which the parser left unread on the socket.
      const h2c = offersH2c(request.headers.upgrade);
      if (h2c && announcesBody(request.headers)) return raw(failureReply("bad_request", requestId));
      const admission = ledger.admit(name, connectionOf(request));
      if (!(admission instanceof Reservation)) return raw(overloadReply(admission, requestId));
      const outlet = socketOutlet(socket, admission, {
        tunnelIdleMs: limits.tunnelIdleMs,
        idle() {
          stats.cut(name, "tunnel_idle");
          if (record) record.outcome = "tunnel_idle";
        },
      });
      serveAdmitted(request, outlet, {
        ticket: admission,
        requestId,
        record,
        upgrade: h2c ? undefined : { socket, head },
      });
    });
  }

  server.on("connection", function admitConnection(socket: Socket) {
    if (!armed() || !ledger.openConnection(name)) {
      socket.destroy();
      return;
    }
    socket.once("close", () => ledger.closeConnection(name));
  });

  // HTTP/1.1 connections get a parse gate (parse_gate.ts): on the plain socket, or on the TLS
  // socket node's HTTPS server parses. HTTP/2 multiplexes; its streams use the ledger's bound.
  const h1 = !options.tls?.http2;
  if (h1) {
    const gated = options.tls ? "secureConnection" : "connection";
    if (!options.tls) server.prependListener("connection", preferListeners);
    server.on(gated, function gateParser(socket: Socket) {
      if (socket.destroyed) return;
      const state = newConnectionState(socket);
      connections.set(socket, state);
      state.gate(new ParseGate(socket, (parser) => state.holdsParse(parser)));
    });
  }

  /** A connection's state, counting what it drops into the lane's stats. */
  function newConnectionState(socket: Socket): ConnectionState {
    return new ConnectionState(socket, ledger.profile.perConnection, (dropped) => {
      stats.abandoned(name, dropped);
    });
  }

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
    const refuse = () => {
      if (socket.destroyed) return;
      writeRawReply(socket, failureReply(kind, requestId), { "x-request-id": requestId }, () => {});
    };
    const connection = connections.get(socket);
    if (!(connection instanceof ConnectionState)) return refuse();
    // Its end was decided already: the reply that closes it says the last word.
    if (connection.closing) return connection.fail();
    // Inside an admitted request's body: that request can never be complete; it is ended and its
    // own reply, in its turn, is the 400.
    const reading = connection.reading;
    const breakBody = reading && !reading.complete ? bodyBreakers.get(reading) : undefined;
    if (breakBody) {
      connection.fail();
      return breakBody();
    }
    // Otherwise the requests parsed before the bad bytes are answered first, in order; the 400
    // comes last.
    connection.finishWith(refuse);
  }

  server.on("close", () => {
    deadlines.stop();
    deliveries.stop();
  });

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
function announcesBody(headers: http.IncomingHttpHeaders): boolean {
  const length = headers["content-length"];
  return headers["transfer-encoding"] !== undefined || (length !== undefined && length !== "0");
}
