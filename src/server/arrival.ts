/**
 * What the transport hands the pipeline for each request: an {@link Arrival}. Two kinds: an
 * ordinary request with its `node:http` response, and an `Upgrade` request whose client socket is
 * the gateway's to answer on or to tunnel. Each knows how to refuse a request that was not
 * admitted and how to open the reply channel of one that was; the listener they came from supplies
 * the connection budgets and the delivery watch ({@link ListenerSide}).
 *
 * @module
 */
import type http from "node:http";
import type { Socket } from "node:net";
import type { Duplex } from "node:stream";
import type { ConnectionBudget } from "../ledger/ledger.ts";
import type { LaneName } from "../ledger/lane_names.ts";
import type { Reservation } from "../ledger/reservation.ts";
import type { ResponseStats } from "../observe/response_stats.ts";
import type { Reply } from "../request/reply.ts";
import { ConnectionState } from "./connection_state.ts";
import { lingerThenClose, writeRawReply } from "./raw_reply.ts";
import { type ReplyChannel, responseChannel, socketChannel } from "./reply_channel.ts";
import { writeReply } from "./write.ts";

/** What an arrival needs from the listener that accepted it. */
export interface ListenerSide {
  readonly lane: LaneName;
  readonly stats: ResponseStats;
  /** True when the listener speaks TLS. */
  readonly tls: boolean;
  readonly tunnelIdleMs?: number;
  /** The budget of the request's connection (made on its first request). */
  connectionOf(request: http.IncomingMessage): ConnectionBudget;
  /** Remembers how to end `request` if the parser gives up inside its body. */
  breakBodyOf(request: http.IncomingMessage, listener: () => void): void;
  /** Starts watching a reply's delivery. */
  watchDelivery(channel: ReplyChannel, cut: (reason: CutReason) => void): void;
}

/** Why the transport cut a reply short. */
export type CutReason = "send_timeout" | "tunnel_idle";

/** One request as the transport hands it to the pipeline. */
export interface Arrival {
  readonly request: http.IncomingMessage;
  /** The connection's budget in the ledger (shared by the requests of one connection). */
  readonly connection: ConnectionBudget;
  /** True when the listener speaks TLS. */
  readonly tls: boolean;
  /** The SNI name of a TLS connection, lower case. */
  readonly serverName?: string;
  /** An `Upgrade` request's socket and the bytes read past its head. */
  readonly upgrade?: { readonly socket: Duplex; readonly head: Uint8Array };
  /** The stream whose close ends the request, and the socket whose bytes count as sent. */
  readonly ending: {
    readonly stream: { once(event: "close", listener: () => void): unknown };
    readonly socket: { readonly bytesWritten?: number } | null | undefined;
  };
  /** Answers a request that was not admitted; an HTTP/1.1 connection is closed after it. */
  refuse(reply: Reply, extra: Record<string, string>): void;
  /**
   * The channel of an admitted request's reply: it releases `ticket` exactly once, and tells
   * `cut` when the transport cuts the reply short.
   */
  open(ticket: Reservation, cut: (reason: CutReason) => void): ReplyChannel;
  /** Calls `listener` if the parser gives up inside this request's body. */
  onBodyBroken(listener: () => void): void;
}

/** An ordinary request and its `node:http` response. */
export class ResponseArrival implements Arrival {
  readonly request: http.IncomingMessage;
  readonly connection: ConnectionBudget;
  readonly tls: boolean;
  readonly serverName?: string;
  readonly upgrade?: undefined;
  readonly #listener: ListenerSide;
  readonly #response: http.ServerResponse;

  constructor(
    listener: ListenerSide,
    request: http.IncomingMessage,
    response: http.ServerResponse,
  ) {
    this.#listener = listener;
    this.#response = response;
    this.request = request;
    this.connection = listener.connectionOf(request);
    this.tls = listener.tls;
    this.serverName = serverNameOf(request);
  }

  get ending() {
    return { stream: this.#response, socket: this.request.socket };
  }

  refuse(reply: Reply, extra: Record<string, string>): void {
    // An HTTP/1.1 connection refused (capacity, rate, drain) is closed after the answer: the
    // requests pipelined behind it are not parsed, admitted or answered one refusal at a time
    // (a full lane made a pipelined flood cost one refusal per request).
    const connection = this.connection;
    if (connection instanceof ConnectionState) {
      extra.connection = "close";
      connection.close();
    }
    writeReply(this.#response, reply, extra);
  }

  open(ticket: Reservation, cut: (reason: CutReason) => void): ReplyChannel {
    return responseChannel(this.#response, ticket, (channel) => {
      this.#listener.watchDelivery(channel, cut);
    });
  }

  onBodyBroken(listener: () => void): void {
    this.#listener.breakBodyOf(this.request, listener);
  }
}

/** An `Upgrade` request: the client socket is the gateway's to answer on or to tunnel. */
export class SocketArrival implements Arrival {
  readonly request: http.IncomingMessage;
  readonly connection: ConnectionBudget;
  readonly tls: boolean;
  readonly serverName?: string;
  readonly upgrade?: { readonly socket: Duplex; readonly head: Uint8Array };
  readonly #listener: ListenerSide;
  readonly #socket: Duplex;

  /** @param head the bytes past the head; undefined to serve the request as plain HTTP/1.1 */
  constructor(
    listener: ListenerSide,
    request: http.IncomingMessage,
    socket: Duplex,
    head: Uint8Array | undefined,
  ) {
    this.#listener = listener;
    this.#socket = socket;
    this.request = request;
    this.connection = listener.connectionOf(request);
    this.tls = listener.tls;
    this.serverName = serverNameOf(request);
    if (head) this.upgrade = { socket, head };
  }

  get ending() {
    return { stream: this.#socket, socket: this.#socket as Socket };
  }

  refuse(reply: Reply, extra: Record<string, string>): void {
    writeRawReply(this.#socket, reply, extra, () => {});
    lingerThenClose(this.#socket);
  }

  open(ticket: Reservation, cut: (reason: CutReason) => void): ReplyChannel {
    const listener = this.#listener;
    return socketChannel(this.#socket, ticket, {
      tunnelIdleMs: listener.tunnelIdleMs,
      idle() {
        listener.stats.cut(listener.lane, "tunnel_idle");
        cut("tunnel_idle");
      },
    }, (channel) => listener.watchDelivery(channel, cut));
  }

  onBodyBroken(listener: () => void): void {
    this.#listener.breakBodyOf(this.request, listener);
  }
}

/** The SNI name of a TLS connection (lower case), or undefined for plain connections. */
function serverNameOf(request: http.IncomingMessage): string | undefined {
  const stream = (request as unknown as { stream?: { session?: { socket?: unknown } } }).stream;
  const socket = (stream?.session?.socket ?? request.socket) as { servername?: string | false };
  const name = socket?.servername;
  return typeof name === "string" && name !== "" ? name.toLowerCase() : undefined;
}
