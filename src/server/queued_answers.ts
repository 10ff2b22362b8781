/**
 * node's queue of pipelined answers, as the gateway keeps it honest. node's HTTP/1.1 server gives
 * a connection's socket to one response at a time; the responses of the requests pipelined
 * behind it wait in its queue (`state.outgoing`) and are handed the socket in turn as each one
 * before finishes. Two things that queue never does, measured in Deno 2.9.6:
 *
 * - When the socket closes, only the response holding it is closed. A response still queued is
 *   never closed, so whatever writes into it — an upstream body relay waiting for its writes to
 *   complete, a pipe waiting for `drain` — waited for ever, holding its upstream socket: three
 *   pipelined slow requests and a reset left two upstream sockets open for good. Each answer is
 *   therefore tracked in its connection's state (connection_state.ts) and closed here when the
 *   connection goes first ({@link trackAnswer}).
 * - When an `Upgrade` request is parsed, node takes its own listeners off the socket — `drain`
 *   among them — and hands the socket over at once. The answers queued before the upgrade still
 *   take the socket in turn (each response's own `finish` hands it on), but a response that
 *   filled the socket's buffer never heard `drain` again: 128 KiB of two 8 MiB answers went out,
 *   then nothing. While an `Upgrade` waits for the answers before it, the socket's `drain` is
 *   passed on to the response holding it ({@link forwardDrain}).
 *
 * node specifics stay here; the rule they serve — answers in order, an `Upgrade` in its turn, all
 * ended with the connection — is the connection state's, and moves with it to the gateway's own
 * codec.
 *
 * @module
 */
import type { ServerResponse } from "node:http";
import type { Duplex } from "node:stream";
import type { ConnectionState } from "./connection_state.ts";

/**
 * Tracks `response` in its connection's order until it closes; if the connection closes first,
 * the response is destroyed and — unless node closed it by then (it does for the one holding the
 * socket, on its next tick) — closed here, so everything listening for its close lets go.
 */
export function trackAnswer(connection: ConnectionState, response: ServerResponse): void {
  let closed = false;
  const answered = connection.arrived(function endAnswer() {
    response.destroy();
    setTimeout(function closeQueued() {
      if (!closed) response.emit("close");
    }, 0);
  });
  response.once("close", function answerClosed() {
    closed = true;
    answered();
  });
}

/**
 * Passes the socket's `drain` on to the response holding it, as node's server did before an
 * `Upgrade` took its listeners off the socket.
 *
 * @returns the function that stops passing it on (the `Upgrade`'s turn came)
 */
export function forwardDrain(socket: Duplex): () => void {
  const forward = () => {
    const holder = (socket as { _httpMessage?: ServerResponse | null })._httpMessage;
    if (holder && !holder.writableEnded) holder.emit("drain");
  };
  socket.on("drain", forward);
  return () => socket.removeListener("drain", forward);
}
