/**
 * The context of one admitted request. Its abort signal is created only when a phase asks for it
 * (the proxy does; fixed replies never pay for it).
 *
 * @module
 */
import type { IncomingHttpHeaders, IncomingMessage } from "node:http";
import type { Duplex } from "node:stream";
import type { LaneName } from "../ledger/lane.ts";
import type { Reservation } from "../ledger/reservation.ts";
import type { FailureKind } from "../proxy/errors.ts";
import type { RequestContext } from "./lane.ts";
import type { RequestHead } from "./request_head.ts";

/** A request that holds a reservation. */
export class AdmittedRequest implements RequestContext {
  readonly lane: LaneName;
  readonly head: RequestHead;
  readonly headers: IncomingHttpHeaders;
  readonly requestId: string;
  readonly peer: string;
  readonly ticket: Reservation;
  readonly request: IncomingMessage;
  readonly upgrade?: { readonly socket: Duplex; readonly head: Uint8Array };
  timeoutKind: FailureKind = "deadline_exceeded";
  #controller?: AbortController;

  /** @param fields everything but the signal */
  constructor(fields: Omit<RequestContext, "signal" | "timeoutKind">) {
    this.lane = fields.lane;
    this.head = fields.head;
    this.headers = fields.headers;
    this.requestId = fields.requestId;
    this.peer = fields.peer;
    this.ticket = fields.ticket;
    this.request = fields.request;
    this.upgrade = fields.upgrade;
  }

  /** Aborted by {@link abort}. */
  get signal(): AbortSignal {
    this.#controller ??= new AbortController();
    return this.#controller.signal;
  }

  /** Aborts whatever waits on this request (deadline, client gone). */
  abort(reason: string): void {
    this.#controller?.abort(reason);
  }
}
