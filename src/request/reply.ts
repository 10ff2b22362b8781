/**
 * What a phase answers with: a plain value that one writer turns into bytes on the wire.
 *
 * @module
 */
import type { FailureKind } from "./errors.ts";
import type { StreamedBody } from "./body_stream.ts";
import type { Duplex } from "node:stream";

/** A response a phase produced. */
export interface Reply {
  /** The HTTP status. */
  readonly status: number;
  /** Response headers by name (the writer adds framing and the request id). */
  readonly headers?: Readonly<Record<string, string>>;
  /** A fixed body. */
  readonly body?: string | Uint8Array;
  /** Headers as a flat `[name, value, …]` list (a proxied response), instead of `headers`. */
  readonly rawHeaders?: readonly string[];
  /**
   * Stream this body: a proxied response's (with `rawHeaders`), or a body file opened at this
   * request (with `headers`, Content-Length included).
   */
  readonly stream?: StreamedBody;
  /** A 101 from upstream: splice the client socket with this upstream socket (`rawHeaders` too). */
  readonly tunnel?: { readonly socket: Duplex; readonly head: Uint8Array };
  /**
   * No response at all: `drop` closes the connection now; `hold` keeps it open, unanswered, until
   * the lane's deadline, then closes it.
   */
  readonly withhold?: "drop" | "hold";
  /** Set when the gateway answered a failure itself (for counters and logs). */
  readonly failure?: FailureKind;
}

/** A JSON reply with status 200 unless given. */
export function jsonReply(value: unknown, status = 200): Reply {
  return {
    status,
    headers: { "content-type": "application/json" },
    body: JSON.stringify(value),
  };
}
