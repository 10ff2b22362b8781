/**
 * Streaming an upstream response body down to the client with backpressure: nothing collects a
 * body. The stream fails when the upstream breaks mid-body or goes quiet (the egress's idle watch
 * destroys the upstream response, see egress/idle_watch.ts); then the client response is cut off
 * too (HTTP/1.1 truncation, never a synthesized tail).
 *
 * @module
 */
import type http from "node:http";
import { relayed } from "./relay_memory.ts";

/**
 * A body to stream; `settle` learns once whether the upstream delivered all of it.
 *
 * @internal
 */
export interface StreamedBody {
  /** Pipes the body into the client response (or raw client socket). */
  pipeTo(
    target: NodeJS.WritableStream & { destroy(): void; once: http.ServerResponse["once"] },
  ): void;
  /** Drops the body unread (the reply was never sent). */
  cancel(): void;
}

/**
 * Wraps an upstream response for streaming.
 *
 * @param source the upstream response (headers already read)
 * @param settle called once: true when the upstream delivered the whole body (or the client left
 *   first), false when the upstream broke it or went idle
 */
export function streamUpstream(
  source: http.IncomingMessage,
  settle: (ok: boolean) => void,
): StreamedBody {
  const finish = settleOnce(settle);
  return {
    pipeTo(target) {
      // One listener for both outcomes: "close" follows "end" on a delivered body.
      source.once("close", () => {
        if (source.complete) return finish(true);
        finish(false);
        target.destroy();
      });
      source.on("error", () => {/* reported through "close" */});
      // Counted for the collections that free its buffers (relay_memory.ts).
      source.on("data", (chunk: Uint8Array) => relayed(chunk.byteLength));
      target.once("close", () => {
        if (!source.complete) {
          source.destroy();
          finish(true);
        }
      });
      source.pipe(target);
    },
    cancel() {
      source.destroy();
      finish(true);
    },
  };
}

/**
 * `settle`, called at most once whatever calls it later: a body's outcome is told once.
 *
 * @internal
 */
export function settleOnce(settle: (ok: boolean) => void): (ok: boolean) => void {
  let done = false;
  return (ok) => {
    if (done) return;
    done = true;
    settle(ok);
  };
}
