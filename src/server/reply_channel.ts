/**
 * Where a lane's reply goes (its channel): a `node:http` response, or the raw socket of an `Upgrade` request.
 * Both release the request's reservation exactly once — complete when the reply was delivered in
 * full (or the tunnel ended), cancel when the connection went away first.
 *
 * @module
 */
import type http from "node:http";
import type { Duplex } from "node:stream";
import type { Reservation } from "../ledger/reservation.ts";
import { ConnectionState } from "./connection_state.ts";
import type { SendingSocket } from "./delivery_watch.ts";
import { lingerThenClose, writeRawReply } from "./raw_reply.ts";
import type { Reply } from "../request/reply.ts";
import { writeReply } from "./write.ts";

/** A destination for one request's reply. */
export interface ReplyChannel {
  /** True once a reply started or the connection is gone. */
  readonly spent: boolean;
  /** True on HTTP/2: no connection-level headers (`Connection`) may be sent. */
  readonly multiplexed: boolean;
  /**
   * Sends a reply; with `close`, an HTTP/1.1 connection is closed after it (and the requests
   * pipelined behind it are dropped).
   */
  send(reply: Reply, extra: Record<string, string>, close?: boolean): void;
  /** Closes the connection without a reply. */
  destroy(): void;
  /** Calls `listener` once when the connection closes before a reply was delivered. */
  onAbandon(listener: () => void): void;
  /** Calls `listener` once when the reply is over, delivered or not. */
  onClose(listener: () => void): void;
  /** The socket the reply is written to, once it has one (HTTP/1.1 only; for delivery limits). */
  readonly socket?: SendingSocket | null;
}

/** Told when a reply started going out (the transport starts its delivery watch). */
export type OnSent = (channel: ReplyChannel) => void;

/**
 * The channel of an ordinary request: releases `ticket` when the response finishes or closes.
 */
export function responseChannel(
  response: http.ServerResponse,
  ticket: Reservation,
  onSent?: OnSent,
): ReplyChannel {
  return new ResponseChannel(response, ticket, onSent);
}

/** Marks an HTTP/1.1 connection to close after this reply, dropping what is pipelined behind it. */
function closeAfter(ticket: Reservation, extra: Record<string, string>): void {
  extra.connection = "close";
  if (ticket.connection instanceof ConnectionState) ticket.connection.close();
}

/** A class rather than an object of closures: one allocation per request on the hot path. */
class ResponseChannel implements ReplyChannel {
  readonly #response: http.ServerResponse;
  readonly #ticket: Reservation;
  readonly #onSent?: OnSent;
  #abandon?: (() => void)[];

  constructor(response: http.ServerResponse, ticket: Reservation, onSent?: OnSent) {
    this.#response = response;
    this.#ticket = ticket;
    this.#onSent = onSent;
    // One listener: "close" follows "finish" on a delivered response, and comes alone otherwise
    // (a pipelined response still waiting for its turn is closed by its connection's state when
    // the connection goes: connection_state.ts).
    response.once("close", () => this.#closed());
  }

  get spent(): boolean {
    return this.#response.headersSent || this.#response.destroyed;
  }

  get multiplexed(): boolean {
    return this.#response.req?.httpVersionMajor === 2;
  }

  send(reply: Reply, extra: Record<string, string>, close = false): void {
    if (close && !this.multiplexed) closeAfter(this.#ticket, extra);
    writeReply(this.#response, reply, extra);
    this.#onSent?.(this);
  }

  destroy(): void {
    this.#response.destroy();
  }

  onAbandon(listener: () => void): void {
    (this.#abandon ??= []).push(listener);
  }

  onClose(listener: () => void): void {
    this.#response.once("close", listener);
  }

  get socket(): SendingSocket | null {
    return this.#response.socket;
  }

  #closed(): void {
    const ticket = this.#ticket;
    if (this.#response.writableFinished) {
      if (ticket.live) ticket.complete();
      return;
    }
    if (ticket.live) ticket.cancel();
    const abandon = this.#abandon;
    this.#abandon = undefined;
    for (const listener of abandon ?? []) listener();
  }
}

/** How a tunnel's quiet is bounded. */
export interface TunnelLimits {
  /** Close a tunnel with no byte either way for this long (absent: never). */
  readonly tunnelIdleMs?: number;
  /** Told when a tunnel was closed for being idle. */
  readonly idle: () => void;
}

/**
 * The channel of an `Upgrade` request: the socket is the gateway's; releases `ticket` when the
 * reply (or tunnel) is done, or cancels it when the socket closes first.
 */
export function socketChannel(
  socket: Duplex,
  ticket: Reservation,
  limits?: TunnelLimits,
  onSent?: OnSent,
): ReplyChannel {
  let started = false;
  let delivered = false;
  socket.once("close", () => ticket.live && (delivered ? ticket.complete() : ticket.cancel()));
  const channel: ReplyChannel = {
    get spent() {
      return started || socket.destroyed;
    },
    multiplexed: false,
    send(reply, extra, close = false) {
      started = true;
      if (close) closeAfter(ticket, extra);
      writeRawReply(socket, reply, extra, (ok) => {
        delivered = ok;
      }, limits);
      if (!reply.tunnel) lingerThenClose(socket);
      onSent?.(channel);
    },
    destroy() {
      socket.destroy();
    },
    onAbandon(listener) {
      socket.once("close", () => {
        if (!delivered) listener();
      });
    },
    onClose(listener) {
      socket.once("close", listener);
    },
    get socket() {
      return socket as unknown as SendingSocket;
    },
  };
  return channel;
}
