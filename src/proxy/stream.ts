/**
 * Streaming an upstream response body down to the client with backpressure: nothing collects a
 * body. The stream fails when the upstream goes quiet (see egress/idle_watch.ts) or breaks
 * mid-body; then the client response is cut off too (HTTP/1.1 truncation, never a synthesized
 * tail).
 *
 * @module
 */
import type http from "node:http";
import type { IdleWatch } from "../egress/idle_watch.ts";

/** A body to stream; `settle` learns once whether the upstream delivered all of it. */
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
 * @param idle the watch that cuts off a body whose upstream goes quiet
 * @param settle called once: true when the upstream delivered the whole body (or the client left
 *   first), false when the upstream broke it or went idle
 */
export function streamUpstream(
  source: http.IncomingMessage,
  idle: IdleWatch,
  settle: (ok: boolean) => void,
): StreamedBody {
  let done = false;
  const finish = (ok: boolean) => {
    if (done) return;
    done = true;
    settle(ok);
  };
  return {
    pipeTo(target) {
      const unwatch = source.socket
        ? idle.watch(source.socket, () => source.destroy(new Error("Upstream body idle")))
        : () => {};
      source.once("end", () => {
        unwatch();
        finish(true);
      });
      source.once("close", () => {
        unwatch();
        if (!source.complete) {
          finish(false);
          target.destroy();
        }
      });
      source.on("error", () => {/* reported through "close" */});
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
