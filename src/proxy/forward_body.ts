/**
 * Forwarding a request body upstream, inside the frame the gateway wrote. The upstream request
 * already carries `Content-Length: n` or `Transfer-Encoding: chunked` (see hygiene.ts), so node's
 * client writes the bytes raw (length) or as chunks (chunked); this pump makes sure they are the
 * bytes that frame promised:
 *
 * - never more than the declared length: a byte past it would sit on the upstream connection
 *   outside any frame and be read as the start of the next request (request smuggling). The
 *   server's parser already stops a body at its length, so this is a second lock, not the first;
 *   a body that ends short of its length is cut off too, and so is one whose stream closes before
 *   its end (the client left, or its bytes stopped parsing);
 * - never more than the caps policy's `max_body_bytes`: the exchange is cut off before the
 *   upstream has a complete body, and the connection is destroyed, never reused;
 * - with backpressure both ways, like `pipe`, and with nothing kept once stopped.
 *
 * `pipe` cannot be told to stop at a count, and node's `strictContentLength` throws from `write`
 * inside a stream callback, which would end the process; hence this small pump.
 *
 * @module
 */
import type { ClientRequest, IncomingMessage } from "node:http";
import { relayed } from "../request/relay_memory.ts";

/** The rules one body is forwarded by. */
export interface BodyRules {
  /** The declared `Content-Length`; undefined for a chunked body. */
  readonly declared?: number;
  /** The caps policy's limit, when on. */
  readonly limit?: number;
  /** Called once when the body crossed the limit or did not match its declared length. */
  readonly overflow: (reason: "limit" | "length") => void;
}

/**
 * Streams `source` into `sink` and ends `sink` when the body is complete.
 *
 * @param source the client request, body unread
 * @param sink the upstream request, its framing header already set
 * @param rules the declared length, the limit, and what to do when either is broken
 * @returns a function that stops forwarding (the rest of the body stays unread)
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { PassThrough } from "node:stream";
 * import { forwardBody } from "./forward_body.ts";
 * const source = new PassThrough();
 * const sink = new PassThrough();
 * let broken = "";
 * // deno-lint-ignore no-explicit-any
 * forwardBody(source as any, sink as any, { declared: 3, overflow: (why) => broken = why });
 * source.end("abcd");
 * await new Promise((resolve) => setTimeout(resolve, 0));
 * assert.equal(broken, "length");
 * ```
 */
export function forwardBody(
  source: IncomingMessage,
  sink: ClientRequest,
  rules: BodyRules,
): () => void {
  const { declared, limit } = rules;
  let seen = 0;
  let stopped = false;
  const stop = () => {
    if (stopped) return;
    stopped = true;
    source.off("data", onData);
    source.off("end", onEnd);
    source.off("close", onClose);
    sink.off("drain", onDrain);
    source.pause();
  };
  const fail = (reason: "limit" | "length") => {
    stop();
    rules.overflow(reason);
  };
  function onData(chunk: Uint8Array): void {
    seen += chunk.byteLength;
    relayed(chunk.byteLength);
    if (limit !== undefined && seen > limit) return fail("limit");
    if (declared !== undefined && seen > declared) return fail("length");
    if (!sink.write(chunk)) source.pause();
  }
  function onDrain(): void {
    source.resume();
  }
  function onEnd(): void {
    if (declared !== undefined && seen !== declared) return fail("length");
    stop();
    sink.end();
  }
  function onClose(): void {
    if (!stopped) fail("length");
  }
  source.on("data", onData);
  source.once("end", onEnd);
  source.once("close", onClose);
  sink.on("drain", onDrain);
  return stop;
}
