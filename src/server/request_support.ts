/**
 * Small pieces of the lane server: where a request's connection budget lives, its SNI name, the
 * overload reply, and the pending-reply record the deadline sweep watches.
 *
 * @module
 */
import type http from "node:http";
import type { Overload } from "../ledger/overload.ts";
import { failureReply } from "../proxy/errors.ts";
import type { AdmittedRequest } from "./admitted.ts";
import type { Outlet } from "./outlet.ts";
import type { Reply } from "./reply.ts";

/** The object a request's connection budget is kept under (its HTTP/2 session, or its socket). */
export function connectionOf(request: http.IncomingMessage): object {
  return (request as unknown as { stream?: { session?: object } }).stream?.session ??
    request.socket;
}

/** The SNI name of a TLS connection (lower case), or undefined for plain connections. */
export function serverNameOf(request: http.IncomingMessage): string | undefined {
  const stream = (request as unknown as { stream?: { session?: { socket?: unknown } } }).stream;
  const socket = (stream?.session?.socket ?? request.socket) as { servername?: string | false };
  const name = socket?.servername;
  return typeof name === "string" && name !== "" ? name.toLowerCase() : undefined;
}

export function overloadReply(overload: Overload, requestId: string): Reply {
  const headers = overload.retryAfterMs !== undefined
    ? { "retry-after": String(Math.max(1, Math.ceil(overload.retryAfterMs / 1000))) }
    : undefined;
  return failureReply(overload.overload, requestId, { headers });
}

export function describe(error: unknown): string {
  return error instanceof Error ? `${error.name}: ${error.message}` : String(error);
}

/** A reply being awaited, as the deadline sweep sees it. */
export class WaitingReply {
  readonly #outlet: Outlet;
  readonly #context: AdmittedRequest;
  readonly #onExpire: (outlet: Outlet, context: AdmittedRequest) => void;

  constructor(
    outlet: Outlet,
    context: AdmittedRequest,
    onExpire: (outlet: Outlet, context: AdmittedRequest) => void,
  ) {
    this.#outlet = outlet;
    this.#context = context;
    this.#onExpire = onExpire;
  }

  get deadline(): number {
    return this.#context.ticket.deadline;
  }

  expire(): void {
    this.#onExpire(this.#outlet, this.#context);
  }
}
