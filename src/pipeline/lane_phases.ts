/**
 * The phases every lane runs first, in this order (DESIGN §3):
 *
 * 1. `admit` — a draining lane refuses (503); else `ledger.admit` takes a reservation or answers the
 *    typed overload (429/503, with `Retry-After` when the ledger knows when). The reservation is
 *    released exactly once by the request's reply channel: complete when delivered, cancel when
 *    the connection went first.
 * 2. `head` — the request-head checks (framing, Host, target, header caps: 400/414/431) and the
 *    canonical path, computed once here and used by every later phase.
 * 3. `allowlist` — the lane's built-in routes (`/healthz`, the health and admin routes): a route
 *    the allowlist names is answered by its handler; anything else goes on to the lane's own
 *    phases (the public lane's tenant dataplane), or is a typed 404 on a lane without them.
 *
 * @module
 */
import type { Ledger } from "../ledger/ledger.ts";
import type { Overload } from "../ledger/overload.ts";
import { Reservation } from "../ledger/reservation.ts";
import { type AddressSet, canonicalAddress } from "../request/cidr.ts";
import { failureReply } from "../request/errors.ts";
import { carriesBody, readHead } from "../request/head.ts";
import type { Reply } from "../request/reply.ts";
import type { ServerLimits } from "../server/lane_listener.ts";
import type { Exchange } from "./exchange.ts";
import type { LaneTable } from "./lane_table.ts";
import type { Phase } from "./phase.ts";

/** What the first phases need from the edge. */
export interface LanePhaseServices {
  readonly ledger: Ledger;
  readonly state: { readonly admissionStopped: boolean };
  /** Peers whose `X-Forwarded-Proto` is believed (a TLS-terminating proxy in front). */
  readonly trusted?: AddressSet;
}

/** The `admit` phase; `drains` when the lane stops admitting as the gateway drains. */
export function admitPhase(drains: boolean): Phase<LanePhaseServices> {
  return {
    name: "admit",
    span: "portcullis.admission",
    run(exchange, services) {
      if (drains && services.state.admissionStopped) {
        return failureReply("draining", exchange.requestId);
      }
      const admission = services.ledger.admit(exchange.lane, exchange.arrival.connection);
      if (!(admission instanceof Reservation)) return overloadReply(admission, exchange.requestId);
      exchange.ticket = admission;
      const record = exchange.record;
      const channel = exchange.arrival.open(admission, (reason) => {
        if (record) record.outcome = reason;
      });
      channel.onAbandon(() => exchange.abort("client"));
      exchange.channel = channel;
      return undefined;
    },
  };
}

/** The `head` phase, with the server's caps and path rules. */
export function headPhase(limits: ServerLimits): Phase<LanePhaseServices> {
  return {
    name: "head",
    run(exchange, services) {
      const head = readHead(exchange.request, limits);
      if (!("path" in head)) return failureReply(head.kind, exchange.requestId);
      exchange.head = head;
      exchange.record?.canonical(head.path);
      exchange.secure = exchange.tls || trustedHttps(exchange, services.trusted);
      if (carriesBody(head.body) && !exchange.request.complete) {
        exchange.arrival.onBodyBroken(() => exchange.breakBody());
      }
      return undefined;
    },
  };
}

/** The `allowlist` phase of a lane's compiled route table. */
export function allowlistPhase<S>(table: LaneTable<S>): Phase<S> {
  return {
    name: "allowlist",
    run(exchange, services) {
      const route = table.find(exchange.head.method, exchange.head.path);
      return route ? route.handle(exchange, services) : undefined;
    },
  };
}

/** A refused admission: the overload's failure, with `Retry-After` when the ledger knows when. */
export function overloadReply(overload: Overload, requestId: string): Reply {
  const headers = overload.retryAfterMs !== undefined
    ? { "retry-after": String(Math.max(1, Math.ceil(overload.retryAfterMs / 1000))) }
    : undefined;
  return failureReply(overload.overload, requestId, { headers });
}

/** True when a trusted proxy in front says its client came over https. */
function trustedHttps(exchange: Exchange, trusted: AddressSet | undefined): boolean {
  const claim = exchange.headers["x-forwarded-proto"];
  if (typeof claim !== "string") return false;
  return claim.trim().toLowerCase() === "https" && fromTrustedPeer(exchange.peer, trusted);
}

/** True when the request's direct peer is in `trusted_proxies`. */
export function fromTrustedPeer(peer: string, trusted: AddressSet | undefined): boolean {
  if (trusted === undefined) return false;
  const address = canonicalAddress(peer);
  return address !== undefined && address !== "" && trusted.has(address);
}
