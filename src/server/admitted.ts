/**
 * The context of one admitted request. Aborting it (deadline, client gone) calls the listeners a
 * waiting phase registered — a plain list, not an `AbortController`: fixed replies never register
 * one, and the proxy registers one per attempt.
 *
 * @module
 */
import type { IncomingHttpHeaders, IncomingMessage } from "node:http";
import type { Duplex } from "node:stream";
import type { LaneName } from "../ledger/lane.ts";
import type { Reservation } from "../ledger/reservation.ts";
import type { FailureKind } from "../proxy/errors.ts";
import type { RequestContext } from "./lane.ts";
import type { Reply } from "./reply.ts";
import type { RequestHead } from "./request_head.ts";
import type { RequestRecord } from "../observe/observer.ts";

/** A request that holds a reservation. */
export class AdmittedRequest implements RequestContext {
  readonly lane: LaneName;
  readonly head: RequestHead;
  readonly headers: IncomingHttpHeaders;
  readonly requestId: string;
  readonly peer: string;
  readonly serverName?: string;
  readonly tls: boolean;
  readonly secure: boolean;
  readonly ticket: Reservation;
  readonly request: IncomingMessage;
  readonly upgrade?: { readonly socket: Duplex; readonly head: Uint8Array };
  readonly record?: RequestRecord;
  timeoutKind: FailureKind = "deadline_exceeded";
  finishReply?: (reply: Reply) => Reply;
  aborted = false;
  /** True once the request's body turned out malformed (the reply is then a 400). */
  bodyBroken = false;
  #listeners?: Set<() => void>;

  /** @param fields everything but the abort state */
  constructor(
    fields: Omit<RequestContext, "aborted" | "onAbort" | "timeoutKind" | "finishReply">,
  ) {
    this.lane = fields.lane;
    this.head = fields.head;
    this.headers = fields.headers;
    this.requestId = fields.requestId;
    this.peer = fields.peer;
    this.serverName = fields.serverName;
    this.tls = fields.tls;
    this.secure = fields.secure;
    this.ticket = fields.ticket;
    this.request = fields.request;
    this.upgrade = fields.upgrade;
    this.record = fields.record;
  }

  /** Calls `listener` once on {@link abort}; returns a function that unregisters it. */
  onAbort(listener: () => void): () => void {
    if (this.aborted) {
      listener();
      return () => {};
    }
    (this.#listeners ??= new Set()).add(listener);
    return () => this.#listeners?.delete(listener);
  }

  /** The parser gave up on this request's body: abort what waits on it, and answer 400. */
  breakBody(): void {
    this.bodyBroken = true;
    this.abort();
  }

  /** Aborts whatever waits on this request (deadline, client gone); idempotent. */
  abort(): void {
    if (this.aborted) return;
    this.aborted = true;
    const listeners = this.#listeners;
    this.#listeners = undefined;
    for (const listener of listeners ?? []) listener();
  }
}
