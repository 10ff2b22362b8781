/**
 * One request on its way through the pipeline: what the transport handed over, what each phase
 * learnt (the reservation, the checked head, the tenant, the route, the policies' trail), and the
 * request's abort signal. It is the {@link RequestContext} every phase and handler sees.
 *
 * Aborting it (deadline, client gone, body broken) calls the listeners a waiting phase registered —
 * a plain list, not an `AbortController`: fixed replies never register one, and the proxy
 * registers one per attempt. One class, so a request costs one allocation here.
 *
 * @module
 */
import type { IncomingHttpHeaders, IncomingMessage } from "node:http";
import type { Duplex } from "node:stream";
import type { LaneName } from "../ledger/lane_names.ts";
import type { Reservation } from "../ledger/reservation.ts";
import type { RequestRecord } from "../observe/observer.ts";
import type { PolicyTrail } from "../policy/checks.ts";
import type { TenantPolicies } from "../policy/policies.ts";
import type { Action } from "../proxy/actions.ts";
import type { RouteMatch } from "../proxy/routes.ts";
import type { Tenant } from "../proxy/tenants.ts";
import type { Forward } from "../proxy/upstream.ts";
import type { AbortCause, RequestContext } from "../request/context.ts";
import type { FailureKind } from "../request/errors.ts";
import type { RequestHead } from "../request/head.ts";
import type { Arrival } from "../server/arrival.ts";
import type { ReplyChannel } from "../server/reply_channel.ts";

/** A request in the pipeline. Fields marked "set by" are undefined until that phase ran. */
export class Exchange implements RequestContext {
  readonly lane: LaneName;
  readonly requestId: string;
  readonly arrival: Arrival;
  readonly request: IncomingMessage;
  readonly headers: IncomingHttpHeaders;
  readonly peer: string;
  readonly serverName?: string;
  readonly tls: boolean;
  readonly upgrade?: { readonly socket: Duplex; readonly head: Uint8Array };
  readonly record?: RequestRecord;
  /** True when the client's own connection is TLS; set by `head` (a trusted proxy may say so). */
  secure: boolean;
  /** Set by `admit`. */
  ticket!: Reservation;
  /** Set by `admit`: where the reply goes. */
  channel?: ReplyChannel;
  /** Set by `head`. */
  head!: RequestHead;
  /** Set by `tenant`: the tenant the Host names (undefined: none, 421). */
  tenant?: Tenant;
  /** Set by `tenant`: the tenant's policies, or the globals' for an unknown host. */
  policies?: TenantPolicies;
  /** Set by `tenant` when a policy is on: headers every reply carries, the body limit. */
  trail?: PolicyTrail;
  /** Set by `route`. */
  match?: RouteMatch<Action>;
  /** Set by `hygiene`: the upstream request, decided once for every attempt. */
  forward?: Forward;
  timeoutKind: FailureKind = "deadline_exceeded";
  aborted = false;
  abortedBy?: AbortCause;
  /** True once the request's body turned out malformed (the reply is then a 400). */
  bodyBroken = false;
  #listeners?: Set<() => void>;

  constructor(lane: LaneName, arrival: Arrival, requestId: string, record?: RequestRecord) {
    const request = arrival.request;
    this.lane = lane;
    this.arrival = arrival;
    this.requestId = requestId;
    this.request = request;
    this.headers = request.headers;
    this.peer = request.socket?.remoteAddress ?? "";
    this.serverName = arrival.serverName;
    this.tls = arrival.tls;
    this.secure = arrival.tls;
    this.upgrade = arrival.upgrade;
    this.record = record;
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
    this.abort("client");
  }

  /** Aborts whatever waits on this request (deadline, client gone); idempotent. */
  abort(cause: AbortCause): void {
    if (this.aborted) return;
    this.aborted = true;
    this.abortedBy = cause;
    const listeners = this.#listeners;
    this.#listeners = undefined;
    for (const listener of listeners ?? []) listener();
  }
}
