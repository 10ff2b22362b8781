/**
 * One lane listener, as transport only: it accepts and counts connections, bounds pipelining,
 * refuses bytes the parser gave up on, and hands each request to the lane's pipeline as an
 * {@link Arrival}. It never looks at what a request asks for; the pipeline (src/pipeline/) does.
 * There is no code path where a request field selects a lane: the lane is the listener's.
 *
 * - Connections are counted against the lane's ceiling when accepted, before any byte is parsed,
 *   and closed unread until the boot checks armed the listener.
 * - HTTP/1.1 connections get a parse gate and a {@link ConnectionState}: requests beyond the
 *   connection's `per_connection` bound wait unparsed-ahead and are dropped if the client leaves.
 * - A malformed request gets a typed 400/431 written straight onto the socket, in its turn after
 *   the requests parsed before it, in the byte shape of the gateway's other replies
 *   (raw_reply.ts). A head that did not arrive in time (`header_ms`), or a connection that sent
 *   nothing, is closed without a reply, as nginx closes it: a 408 with a body was one more reply
 *   only this software wrote, and a client that sends no head reads no answer anyway.
 * - A request with an `Expect` other than `100-continue` is served like any other (node would
 *   answer it with its own chunked 417); the head checks refuse it with a 417 of the gateway's.
 * - An `Upgrade` request reaches the pipeline with its socket, unless it offers h2c: h2c is never
 *   switched to (through a gateway it would open an HTTP/2 connection to the backend that no route
 *   or policy sees), so such a request is served as plain HTTP/1.1 — or refused when it has a body,
 *   which the parser left unread on the socket. Either way it is served in its turn, once every
 *   request before it on the connection was answered (connection_state.ts, queued_answers.ts).
 * - Every request's answer is tracked until it closes; a connection that closes ends every answer
 *   still owed on it, so nothing upstream is held for a client that went.
 * - A reply the client does not take is cut off (delivery_watch.ts); a quiet tunnel is closed.
 * - An upgrade's socket is owned in the tick node hands it over (socket_owner.ts): an error on it
 *   ends that connection alone; closing the listener closes it. `CONNECT` is never taken over:
 *   node destroys its socket unread.
 *
 * The head timeout, idle timeout and header-size cap are the HTTP server's (http_server.ts).
 *
 * @module
 */
import type http from "node:http";
import type { Socket } from "node:net";
import type { Duplex } from "node:stream";
import type { ConnectionBudget, Ledger } from "../ledger/ledger.ts";
import type { LaneName } from "../ledger/lane_names.ts";
import type { ResponseStats } from "../observe/response_stats.ts";
import type { PathRules } from "../request/canonical_path.ts";
import { ErrorPages } from "../request/error_pages.ts";
import { failureReply } from "../request/errors.ts";
import { requestIdFor } from "../request/request_id.ts";
import {
  type Arrival,
  type CutReason,
  type ListenerSide,
  ResponseArrival,
  SocketArrival,
} from "./arrival.ts";
import { ConnectionState } from "./connection_state.ts";
import { DeliveryWatch } from "./delivery_watch.ts";
import { announcesBody, offersH2c } from "./h2c.ts";
import { createHttpServer, type LaneHttpServer, type TlsServing } from "./http_server.ts";
import { ParseGate, preferListeners } from "./parse_gate.ts";
import { forwardDrain, trackAnswer } from "./queued_answers.ts";
import { LINGER_MS, lingerThenClose, writeRawReply } from "./raw_reply.ts";
import type { ReplyChannel } from "./reply_channel.ts";
import { TakenSockets } from "./socket_owner.ts";

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

/** Options for {@link createLaneListener}. */
export interface LaneListenerOptions {
  readonly lane: LaneName;
  readonly ledger: Ledger;
  readonly stats: ResponseStats;
  readonly limits: ServerLimits;
  /** False until the boot checks passed; connections before that are closed unread. */
  readonly armed: () => boolean;
  /** TLS on this listener (the public lane with `tls`). */
  readonly tls?: TlsServing;
  /** The lane's pipeline: serves every request this listener parses. */
  readonly serve: (arrival: Arrival) => void;
  /** Hands `Upgrade` requests to the pipeline (a lane with a dataplane); else node refuses them. */
  readonly upgrades: boolean;
  /** How the refusals written here read (the lane's, as its pipeline's; absent: minimal). */
  readonly errorPages?: ErrorPages;
}

/**
 * Creates the server for one listener of one lane (not yet listening).
 *
 * @param options the lane, its ledger and counters, the limits, the arming switch, TLS, the pipeline
 */
export function createLaneListener(options: LaneListenerOptions): LaneHttpServer {
  const listener = new LaneListener(options);
  return listener.http;
}

/** The state of one listener: its connections, their budgets, and the watches it runs. */
class LaneListener implements ListenerSide {
  readonly http: LaneHttpServer;
  readonly #options: LaneListenerOptions;
  readonly #pages: ErrorPages;
  readonly #connections = new WeakMap<object, ConnectionBudget>();
  /** Admitted requests with a body still arriving: how to end each if its body turns out broken. */
  readonly #bodyBreakers = new WeakMap<object, () => void>();
  readonly #deliveries: DeliveryWatch;
  /** Upgrade sockets: node no longer tracks them, so they are closed with the listener here. */
  readonly #taken = new TakenSockets(() => this.stats.connectionError(this.lane));

  constructor(options: LaneListenerOptions) {
    this.#options = options;
    this.#pages = options.errorPages ?? ErrorPages.minimal();
    this.#deliveries = new DeliveryWatch(options.limits);
    const http = createHttpServer(
      options.limits,
      options.tls,
      (request, response) => this.#request(request, response),
      (socket) => this.#refuseMalformed(requestTimeout(), socket),
    );
    this.http = {
      ...http,
      closeAll: () => {
        http.closeAll();
        this.#taken.closeAll();
      },
    };
    const server = this.http.server;
    if (options.upgrades) {
      server.on("upgrade", (request, socket: Duplex, head: Uint8Array) => {
        this.#upgrade(request, socket, head);
      });
    }
    server.on("connection", (socket: Socket) => this.#accept(socket));
    server.on("checkExpectation", (request, response) => this.#request(request, response));
    this.#gateParsers();
    server.on("clientError", (error: NodeJS.ErrnoException, socket: Duplex) => {
      this.#refuseMalformed(error, socket);
    });
    server.on("close", () => this.#deliveries.stop());
  }

  /** Counts a new connection against the lane's ceiling, or closes it unread. */
  #accept(socket: Socket): void {
    const { armed, ledger, lane } = this.#options;
    if (!armed() || !ledger.openConnection(lane)) {
      socket.destroy();
      return;
    }
    socket.once("close", () => ledger.closeConnection(lane));
  }

  /**
   * HTTP/1.1 connections get a parse gate (parse_gate.ts): on the plain socket, or on the TLS
   * socket node's HTTPS server parses. HTTP/2 multiplexes; its streams use the ledger's bound.
   */
  #gateParsers(): void {
    const tls = this.#options.tls;
    if (tls?.http2) return;
    const server = this.http.server;
    if (!tls) server.prependListener("connection", preferListeners);
    server.on(tls ? "secureConnection" : "connection", (socket: Socket) => {
      if (socket.destroyed) return;
      const state = this.#newConnectionState(socket);
      this.#connections.set(socket, state);
      state.gate(new ParseGate(socket, (parser) => state.holdsParse(parser)));
    });
  }

  /** An ordinary request: in its connection's order, then to the pipeline. */
  #request(request: http.IncomingMessage, response: http.ServerResponse): void {
    const connection = this.#connectionOf(request);
    if (connection instanceof ConnectionState) {
      // A client that has gone gets no work done for it, parsed or not.
      if (request.socket.destroyed) return connection.drop();
      // Parsed after the connection's end was decided: a strict peer would never have seen it.
      if (connection.closing) return connection.drop();
      if (!response.shouldKeepAlive) connection.close();
      connection.reading = request;
      trackAnswer(connection, response);
      if (connection.mustWait()) {
        connection.wait(() => this.#options.serve(new ResponseArrival(this, request, response)));
        return;
      }
    }
    this.#options.serve(new ResponseArrival(this, request, response));
  }

  /**
   * An `Upgrade` request, served in its turn: once every request before it on the connection was
   * answered (until then node's queued answers go out on the socket, their `drain` passed on).
   */
  #upgrade(request: http.IncomingMessage, socket: Duplex, head: Uint8Array): void {
    // node took its own error listener off this socket: owned before anything else happens.
    this.#taken.take(socket);
    const connection = this.#connectionOf(request);
    if (!(connection instanceof ConnectionState)) return this.#serveUpgrade(request, socket, head);
    const stopForwarding = forwardDrain(socket);
    connection.inTurn(() => {
      stopForwarding();
      // Parsed after the connection's end was decided: dropped, as any request after it.
      if (!connection.closing && !socket.destroyed) {
        return this.#serveUpgrade(request, socket, head);
      }
      connection.drop();
      lingerThenClose(socket);
      socket.end();
    });
  }

  /** h2c is served as HTTP/1.1 (or refused with a body); other upgrades may tunnel. */
  #serveUpgrade(request: http.IncomingMessage, socket: Duplex, head: Uint8Array): void {
    const h2c = offersH2c(request.headers.upgrade);
    const arrival = new SocketArrival(this, request, socket, h2c ? undefined : head);
    if (h2c && announcesBody(request.headers)) {
      // The body is unread on a socket node no longer parses: nothing can frame what follows.
      const requestId = requestIdFor(request.headers["x-request-id"]);
      this.stats.protocolError(this.#options.lane);
      const { reply, extra } = this.#pages.finish(
        failureReply("bad_request", requestId),
        requestId,
      );
      arrival.refuse(reply, extra);
      return;
    }
    this.#options.serve(arrival);
  }

  get stats(): ResponseStats {
    return this.#options.stats;
  }

  /** True when the listener speaks TLS. */
  get tls(): boolean {
    return this.#options.tls !== undefined;
  }

  get lane(): LaneName {
    return this.#options.lane;
  }

  /**
   * The connection's budget, made on its first request: for an HTTP/1.1 socket a
   * {@link ConnectionState} (pipelined requests wait in it), for an HTTP/2 session a plain budget.
   */
  #connectionOf(request: http.IncomingMessage): ConnectionBudget {
    const key = connectionKeyOf(request);
    let budget = this.#connections.get(key);
    if (!budget) {
      budget = key === request.socket ? this.#newConnectionState(request.socket) : { active: 0 };
      this.#connections.set(key, budget);
    }
    return budget;
  }

  connectionOf(request: http.IncomingMessage): ConnectionBudget {
    return this.#connectionOf(request);
  }

  /** A connection's state, counting what it drops into the lane's stats. */
  #newConnectionState(socket: Socket): ConnectionState {
    const { ledger, stats, lane } = this.#options;
    return new ConnectionState(socket, ledger.profile.perConnection, (dropped) => {
      stats.abandoned(lane, dropped);
    });
  }

  /** Remembers how to end `request` if the parser gives up inside its body. */
  breakBodyOf(request: http.IncomingMessage, listener: () => void): void {
    this.#bodyBreakers.set(request, listener);
  }

  /** Starts watching a reply's delivery: a client that does not take its bytes is cut off. */
  watchDelivery(channel: ReplyChannel, cut: (reason: CutReason) => void): void {
    if (channel.multiplexed || !channel.socket) return;
    const stop = this.#deliveries.watch(() => channel.socket, () => {
      this.stats.cut(this.lane, "send_timeout");
      cut("send_timeout");
      channel.destroy();
    });
    channel.onClose(stop);
  }

  get tunnelIdleMs(): number | undefined {
    return this.#options.limits.tunnelIdleMs;
  }

  /**
   * A connection the parser gave up on: a typed reply straight onto the socket, then close — or,
   * for a head that did not arrive in time, the close alone.
   */
  #refuseMalformed(error: NodeJS.ErrnoException, socket: Duplex): void {
    if (error.code === "ECONNRESET" || !socket.writable) {
      socket.destroy();
      return;
    }
    this.stats.protocolError(this.lane);
    const kind = error.code === "HPE_HEADER_OVERFLOW" ? "header_fields_too_large" : "bad_request";
    const silent = error.code === "ERR_HTTP_REQUEST_TIMEOUT";
    const requestId = crypto.randomUUID();
    const refuse = () => {
      if (socket.destroyed) return;
      if (silent) return closeSilently(socket);
      const { reply, extra } = this.#pages.finish(failureReply(kind, requestId), requestId);
      writeRawReply(socket, reply, extra, () => {});
    };
    const connection = this.#connections.get(socket);
    if (!(connection instanceof ConnectionState)) return refuse();
    // Its end was decided already: the reply that closes it says the last word.
    if (connection.closing) return connection.fail();
    // Inside an admitted request's body: that request can never be complete; it is ended and its
    // own reply, in its turn, is the 400.
    const reading = connection.reading;
    const breakBody = reading && !reading.complete ? this.#bodyBreakers.get(reading) : undefined;
    if (breakBody) {
      connection.fail();
      return breakBody();
    }
    // Otherwise the requests parsed before the bad bytes are answered first, in order; the 400
    // comes last.
    connection.finishWith(refuse);
  }
}

/** The object a request's connection budget is kept under (its HTTP/2 session, or its socket). */
function connectionKeyOf(request: http.IncomingMessage): object {
  return (request as unknown as { stream?: { session?: object } }).stream?.session ??
    request.socket;
}

/**
 * Ends a connection without a reply: once what was written before is flushed (replies to the
 * requests parsed before, in their turn), or {@link LINGER_MS} at most for a client that does
 * not take them.
 */
function closeSilently(socket: Duplex): void {
  const timer = setTimeout(() => socket.destroy(), LINGER_MS);
  socket.once("close", () => clearTimeout(timer));
  socket.once("finish", () => socket.destroy());
  socket.end();
}

function requestTimeout(): NodeJS.ErrnoException {
  return Object.assign(new Error("Request timeout"), { code: "ERR_HTTP_REQUEST_TIMEOUT" });
}
