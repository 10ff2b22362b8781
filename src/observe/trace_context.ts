/**
 * The W3C Trace Context `traceparent` field (https://www.w3.org/TR/trace-context/ §3.2), read
 * and written by the gateway itself. Deno's own propagator has to stay off while the gateway
 * traces (`OTEL_PROPAGATORS=none`, see tracing.ts): it would let any client's `traceparent` make
 * the runtime's own spans of a request recorded, and it would overwrite the gateway's
 * `traceparent` upstream with one of a span it never exports. With it off, `propagation` in
 * `@opentelemetry/api` is a no-op, so the one field is parsed here (a fixed 55-character format)
 * rather than by pulling in `@opentelemetry/core` for it.
 *
 * @module
 */
import type { SpanContext } from "@opentelemetry/api";

const TRACEPARENT = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$/;
const ZERO_TRACE = "0".repeat(32);
const ZERO_SPAN = "0".repeat(16);

/**
 * Reads a `traceparent` value: the remote span context it names, or undefined when it is absent or
 * invalid (then a receiver starts a new trace, W3C Trace Context §3.2.2.1). Version `00` must be
 * exactly 55 characters; a later version may carry more after a `-`; version `ff` is invalid, as
 * are all-zero ids and upper-case hex.
 *
 * @param value the field's value as received (several fields joined by node are invalid)
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { parseTraceparent } from "./trace_context.ts";
 * const context = parseTraceparent("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
 * assert.equal(context?.traceId, "0af7651916cd43dd8448eb211c80319c");
 * assert.equal(context?.traceFlags, 1);
 * assert.equal(parseTraceparent("00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01"), undefined);
 * ```
 */
export function parseTraceparent(value: string | undefined): SpanContext | undefined {
  if (value === undefined) return undefined;
  const match = TRACEPARENT.exec(value.trim());
  if (!match) return undefined;
  const [, version, traceId, spanId, flags, rest] = match;
  if (version === "ff" || (version === "00" && rest !== undefined)) return undefined;
  if (traceId === ZERO_TRACE || spanId === ZERO_SPAN) return undefined;
  return { traceId, spanId, traceFlags: parseInt(flags, 16), isRemote: true };
}

/**
 * Writes a span context as a version-00 `traceparent` value.
 *
 * @param context the span context to name
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { formatTraceparent } from "./trace_context.ts";
 * const traceId = "0af7651916cd43dd8448eb211c80319c";
 * assert.equal(
 *   formatTraceparent({ traceId, spanId: "b7ad6b7169203331", traceFlags: 1 }),
 *   `00-${traceId}-b7ad6b7169203331-01`,
 * );
 * ```
 */
export function formatTraceparent(context: SpanContext): string {
  const flags = (context.traceFlags & 0xff).toString(16).padStart(2, "0");
  return `00-${context.traceId}-${context.spanId}-${flags}`;
}

/** A fresh, sampled remote span context with random ids (never all zeros). */
export function mintSpanContext(): SpanContext {
  const bytes = crypto.getRandomValues(new Uint8Array(24));
  bytes[0] |= 1;
  bytes[16] |= 1;
  const hex = Array.from(bytes, (byte) => byte.toString(16).padStart(2, "0")).join("");
  return { traceId: hex.slice(0, 32), spanId: hex.slice(32), traceFlags: 1, isRemote: true };
}
