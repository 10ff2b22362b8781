/**
 * Where a lane's reply goes: a `node:http` response, or the raw socket of an `Upgrade` request.
 * Both release the request's reservation exactly once — complete when the reply was delivered in
 * full (or the tunnel ended), cancel when the connection went away first.
 *
 * @module
 */
import type http from "node:http";
import type { Duplex } from "node:stream";
import type { Reservation } from "../ledger/reservation.ts";
import { writeRawReply } from "./raw_reply.ts";
import type { Reply } from "./reply.ts";
import { writeReply } from "./write.ts";

/** A destination for one request's reply. */
export interface Outlet {
  /** True once a reply started or the connection is gone. */
  readonly spent: boolean;
  /** Sends a reply. */
  send(reply: Reply, extra: Record<string, string>): void;
  /** Closes the connection without a reply. */
  destroy(): void;
  /** Calls `listener` once when the connection closes before a reply was delivered. */
  onAbandon(listener: () => void): void;
}

/**
 * The outlet of an ordinary request: releases `ticket` when the response finishes or closes.
 */
export function responseOutlet(response: http.ServerResponse, ticket: Reservation): Outlet {
  let abandon: (() => void)[] | undefined;
  // One listener: "close" follows "finish" on a delivered response, and comes alone otherwise.
  response.once("close", () => {
    if (response.writableFinished) {
      if (ticket.live) ticket.complete();
      return;
    }
    if (ticket.live) ticket.cancel();
    for (const listener of abandon ?? []) listener();
  });
  return {
    get spent() {
      return response.headersSent || response.destroyed;
    },
    send(reply, extra) {
      writeReply(response, reply, extra);
    },
    destroy() {
      response.destroy();
    },
    onAbandon(listener) {
      (abandon ??= []).push(listener);
    },
  };
}

/**
 * The outlet of an `Upgrade` request: the socket is the gateway's; releases `ticket` when the
 * reply (or tunnel) is done, or cancels it when the socket closes first.
 */
export function socketOutlet(socket: Duplex, ticket: Reservation): Outlet {
  let started = false;
  let delivered = false;
  socket.once("close", () => ticket.live && (delivered ? ticket.complete() : ticket.cancel()));
  return {
    get spent() {
      return started || socket.destroyed;
    },
    send(reply, extra) {
      started = true;
      writeRawReply(socket, reply, extra, (ok) => {
        delivered = ok;
      });
    },
    destroy() {
      socket.destroy();
    },
    onAbandon(listener) {
      socket.once("close", () => {
        if (!delivered) listener();
      });
    },
  };
}
