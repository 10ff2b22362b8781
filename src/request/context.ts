/**
 * One admitted request as every phase and handler sees it: its head as checked, its lane, its
 * reservation, its abort signal and what is noted about it for observation. The pipeline's
 * exchange (src/pipeline/exchange.ts) implements it.
 *
 * @module
 */
import type { IncomingHttpHeaders, IncomingMessage } from "node:http";
import type { Duplex } from "node:stream";
import type { LaneName } from "../ledger/lane_names.ts";
import type { Reservation } from "../ledger/reservation.ts";
import type { FailureKind } from "./errors.ts";
import type { RequestHead } from "./head.ts";

/**
 * What the phases write about a request for metrics, the access log and the trace. The observer's
 * record implements it; the pipeline runner owns the rest of the record (spans, status, timing).
 *
 * @internal
 */
export interface RequestNotes {
  /** The tenant's host, once resolved. */
  tenantHost?: string;
  /** The matched route's name ("-" when unnamed or unmatched). */
  route: string;
  /** Upstream attempts made so far. */
  attempts: number;
  /** Milliseconds spent waiting for upstream response headers, over all attempts. */
  upstreamMs: number;
  /** The overload, policy or failure kind that decided the reply, if any. */
  outcome?: string;
  /** Opens the span of one upstream attempt; undefined when the request is not traced. */
  attempt(attempt: number, egress: string, backend: string): AttemptNotes | undefined;
}

/** One upstream attempt as traced: the `traceparent` it sends, and how it ended. */
export interface AttemptNotes {
  readonly traceparent: string;
  answered(status: number): void;
  failed(kind: string): void;
}

/**
 * Why an admitted request was given up.
 *
 * @internal
 */
export type AbortCause = "deadline" | "client";

/** One admitted request, as every handler sees it. */
export interface RequestContext {
  /** The lane fixed by the listener that accepted the connection. */
  readonly lane: LaneName;
  /** The request head as the head checks accepted it, with its canonical path. */
  readonly head: RequestHead;
  /** The request headers as received (names in lower case). */
  readonly headers: IncomingHttpHeaders;
  /** The request id: the client's `X-Request-Id` when acceptable, else a fresh one. */
  readonly requestId: string;
  /** The direct peer's address ("" on a Unix socket). */
  readonly peer: string;
  /** The SNI name of a TLS connection, lower case; undefined on plain HTTP. */
  readonly serverName?: string;
  /** True when the listener that accepted the request speaks TLS. */
  readonly tls: boolean;
  /** True when the client's own connection is TLS: ours, or a trusted proxy's that says so. */
  readonly secure: boolean;
  /** The request's ledger reservation. */
  readonly ticket: Reservation;
  /** The request itself, for its body (read it only to forward it). */
  readonly request: IncomingMessage;
  /** True once the lane's deadline passed or the client went away. */
  readonly aborted: boolean;
  /**
   * Why the request was aborted: its deadline passed (an upstream that kept it waiting is to
   * blame), or the client went away or broke its body (nobody upstream is).
   */
  readonly abortedBy?: AbortCause;
  /** Calls `listener` once when the request is aborted; returns a function that unregisters it. */
  onAbort(listener: () => void): () => void;
  /** What the deadline answers with; a phase waiting on an upstream sets `upstream_timeout`. */
  timeoutKind: FailureKind;
  /** Present on an `Upgrade` request: the client socket and the bytes read past the head. */
  readonly upgrade?: { readonly socket: Duplex; readonly head: Uint8Array };
  /** What is observed about the request (metrics, access log, trace). */
  readonly record?: RequestNotes;
}
