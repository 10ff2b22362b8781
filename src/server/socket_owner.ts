/**
 * No socket without an owner. node's HTTP server removes its own `error` listener from a socket
 * before it emits `upgrade` (and `connect`), and its client does the same before its `upgrade`:
 * measured in Deno 2.9.6, a plain listener's `upgrade` handler sees `listenerCount("error") === 0`.
 * A socket handed over that way with no listener added turns a client's reset — `ECONNRESET` on a
 * read, `EPIPE` on a write — into an uncaught error that ends the isolate: one request stopped a
 * public request worker, and with `shared_event_loop` the whole process (issue 31). Measured beside
 * it: a TLS listener's upgrade socket keeps node's `onSocketTLSError`, which swallows errors once
 * the handshake is done (so only plain listeners crashed); a socket the parser gave up on gets a
 * `noop` listener before `clientError`; a `CONNECT` with no `connect` listener is destroyed unread.
 *
 * So every socket the transport takes over gets an owner in the same tick it is handed over,
 * before anything is awaited: an error ends that connection alone. The socket is destroyed, so
 * its `close` — which the reply channel and the connection count already listen to — releases
 * what the connection held exactly once; the error is counted once per connection. Owning a
 * socket twice keeps the first owner: whoever took it over first says what an error is counted as.
 *
 * A listener also keeps the sockets it took over ({@link TakenSockets}): node's
 * `closeAllConnections()` no longer knows an upgraded socket, so an open tunnel (or a reply still
 * lingering) held a closing edge open until its client left.
 *
 * @module
 */

/** Marks a socket that has an owner (a property on the socket: no module state). */
const OWNED = Symbol("portcullis.socketOwner");

/** What an owner needs of a socket or stream. */
export interface OwnableSocket {
  on(event: "error", listener: (error: Error) => void): unknown;
  destroy(): unknown;
}

/**
 * Gives `socket` an owner: an `error` listener, for as long as the socket lives, that destroys it
 * and tells `onError` of the first error. A socket that already has an owner keeps it.
 *
 * @param socket a socket the transport took over (upgrade, raw reply, tunnel side)
 * @param onError told once, of the first error (to count it)
 * @returns true when this call made the owner, false when the socket had one already
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { PassThrough } from "node:stream";
 * import { ownSocket } from "./socket_owner.ts";
 *
 * const socket = new PassThrough();
 * let errors = 0;
 * assert.equal(ownSocket(socket, () => errors++), true);
 * socket.emit("error", new Error("read ECONNRESET")); // would otherwise throw
 * assert.equal(socket.destroyed, true);
 * assert.equal(errors, 1);
 * ```
 */
export function ownSocket(socket: OwnableSocket, onError?: (error: Error) => void): boolean {
  const marked = socket as OwnableSocket & { [OWNED]?: true };
  if (marked[OWNED]) return false;
  marked[OWNED] = true;
  let told = false;
  socket.on("error", function socketOwnerError(error: Error) {
    if (!told) {
      told = true;
      onError?.(error);
    }
    socket.destroy();
  });
  return true;
}

/** The sockets one listener took over from node: each owned, all closed with the listener. */
export class TakenSockets {
  readonly #open = new Set<OwnableSocket>();
  readonly #onError: (error: Error) => void;

  /** @param onError told of the first error of each socket (to count it) */
  constructor(onError: (error: Error) => void) {
    this.#onError = onError;
  }

  /** Owns `socket` ({@link ownSocket}) and keeps it until it closes. */
  take(socket: OwnableSocket & { once(event: "close", listener: () => void): unknown }): void {
    ownSocket(socket, this.#onError);
    this.#open.add(socket);
    socket.once("close", () => this.#open.delete(socket));
  }

  /** Closes every socket taken over (the listener is closing). */
  closeAll(): void {
    for (const socket of this.#open) socket.destroy();
  }
}

/** True when `socket` has an owner ({@link ownSocket}). */
export function isOwned(socket: object): boolean {
  return (socket as { [OWNED]?: true })[OWNED] === true;
}
