/**
 * The relay's read of the `socks5_tls` preamble (`egress/relay_preamble.ts`): the first bytes an
 * admitted edge sends inside TLS, naming the pool port. Bounded three ways, so a peer that holds a
 * certificate still cannot hold the relay: at most {@link PREAMBLE_BYTES} are taken (whatever
 * follows them is the SOCKS stream and is handed back to the socket, unread), a wrong byte ends
 * the read when it arrives, and the whole preamble must be in within the deadline.
 *
 * @module
 */
import { Buffer } from "node:buffer";
import type { Duplex } from "node:stream";
import { decodePreamble, PREAMBLE_BYTES } from "../egress/relay_preamble.ts";

/** What the read found: the port, or why there is none. */
export type PreambleOutcome =
  | { readonly ok: true; readonly port: number }
  | { readonly ok: false; readonly why: "garbage" | "short" | "slow" };

/**
 * Reads the preamble from `socket`, leaving the socket paused with any bytes after it unshifted.
 *
 * @param socket the relay's TLS socket, after the handshake and the node's checks
 * @param timeoutMs the most the whole preamble may take to arrive
 * @returns the port (`ok`), `garbage` (a byte that is not a preamble's), `short` (the stream ended
 *   or failed first), `slow` (the deadline passed)
 */
export function readPreamble(socket: Duplex, timeoutMs: number): Promise<PreambleOutcome> {
  return new Promise((resolve) => {
    let held: Uint8Array = new Uint8Array(0);
    const timer = setTimeout(() => finish({ ok: false, why: "slow" }), timeoutMs);
    const onEnd = () => finish({ ok: false, why: "short" });
    function finish(outcome: PreambleOutcome, rest?: Uint8Array): void {
      clearTimeout(timer);
      socket.off("data", onData);
      socket.off("end", onEnd);
      socket.off("close", onEnd);
      socket.off("error", onEnd);
      socket.pause();
      if (rest && rest.length > 0) socket.unshift(Buffer.from(rest));
      resolve(outcome);
    }
    function onData(chunk: Uint8Array): void {
      held = held.length === 0 ? chunk : Buffer.concat([held, chunk]);
      const read = decodePreamble(held.subarray(0, PREAMBLE_BYTES));
      if (read.kind === "garbage") return finish({ ok: false, why: "garbage" });
      if (read.kind === "port") {
        finish({ ok: true, port: read.port }, held.subarray(PREAMBLE_BYTES));
      }
    }
    socket.on("data", onData);
    socket.once("end", onEnd);
    socket.once("close", onEnd);
    socket.once("error", onEnd);
  });
}
