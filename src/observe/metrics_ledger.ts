/**
 * The metrics page's ledger and response families: admissions, overloads and slots per lane, the
 * reservations and shared pools, open connections, and replies withheld, refused or cut off — what
 * a lane let in and what became of it.
 *
 * Split from `metrics.ts`, which lists every group in page order; each function here reads one
 * snapshot and returns its families as data (`Family`, in `exposition.ts`).
 *
 * @module
 */
import { LANE_NAMES, type LaneName } from "../ledger/lane_names.ts";
import { OVERLOAD_KINDS } from "../ledger/overload.ts";
import type { LedgerSnapshot } from "../ledger/snapshot.ts";
import { byLane, byLaneAnd, counter, type Family, gauge, only } from "./exposition.ts";
import { CUT_REASONS, type ResponseStats } from "./response_stats.ts";

/** The admission ledger per lane: listeners, admissions, refusals, slots held and reserved. */
export function ledgerFamilies(ledger: LedgerSnapshot): Family[] {
  const lane = (l: LaneName) => ledger.lanes[l];
  return [
    gauge(
      "lane_enabled",
      "1 when the lane has a listener.",
      byLane((l) => lane(l).enabled ? 1 : 0),
    ),
    counter("ledger_admitted_total", "Requests admitted.", byLane((l) => lane(l).admitted)),
    counter(
      "ledger_overload_total",
      "Requests refused with a typed overload.",
      byLaneAnd("kind", OVERLOAD_KINDS, (l, kind) => lane(l).overload[kind]),
    ),
    counter(
      "ledger_denied_route_total",
      "Requests outside the lane's routes.",
      byLane((l) => lane(l).denied_route),
    ),
    gauge("ledger_in_use", "Slots held per lane.", byLane((l) => lane(l).in_use)),
    gauge("ledger_reserve", "Private reserve per lane.", byLane((l) => lane(l).reserve)),
  ];
}

/** The ledger's reservations and shared pools: releases, high water, slot and byte budgets. */
export function reservationFamilies(ledger: LedgerSnapshot): Family[] {
  return [
    counter("ledger_completed_total", "Reservations released as served.", only(ledger.completed)),
    counter(
      "ledger_cancelled_total",
      "Reservations released as not served.",
      only(ledger.cancelled),
    ),
    counter(
      "ledger_double_release_total",
      "Releases of already released reservations.",
      only(ledger.double_release),
    ),
    gauge("ledger_outstanding", "Reservations not yet released.", only(ledger.outstanding)),
    gauge(
      "ledger_high_water_slots",
      "Most slots ever held at once.",
      only(ledger.high_water_slots),
    ),
    gauge(
      "ledger_application_slots",
      "Process-wide slot ceiling.",
      only(ledger.application_slots),
    ),
    gauge("ledger_general_pool", "Slots not reserved to a lane.", only(ledger.general_pool)),
    gauge("ledger_bytes_in_use", "In-flight bytes held.", only(ledger.bytes_in_use)),
    gauge("ledger_inflight_bytes", "Shared in-flight byte budget.", only(ledger.inflight_bytes)),
  ];
}

/** Open connections per lane, and those refused at the lane's ceiling. */
export function connectionFamilies(ledger: LedgerSnapshot): Family[] {
  return [
    gauge(
      "lane_connections",
      "Open connections per lane.",
      byLane((l) => ledger.lanes[l].connections),
    ),
    counter(
      "lane_connections_refused_total",
      "Connections closed at the lane's ceiling.",
      byLane((l) => ledger.lanes[l].connections_refused),
    ),
  ];
}

/**
 * What became of requests and replies per lane beyond their status (which `requests_total` in
 * `metrics_requests.ts` counts): withheld, protocol errors, cut-off and abandoned replies.
 */
export function responseFamilies(stats: ResponseStats): Family[] {
  const reads = new Map(LANE_NAMES.map((lane) => [lane, stats.read(lane)]));
  const read = (lane: LaneName) => reads.get(lane)!;
  return [
    counter(
      "responses_withheld_total",
      "Requests answered by dropping or holding the connection.",
      byLane((l) => read(l).withheld),
    ),
    counter(
      "protocol_errors_total",
      "Malformed or timed-out request heads.",
      byLane((l) => read(l).protocol_errors),
    ),
    counter(
      "responses_cut_total",
      "Replies cut off after they started: the client did not take them (send_timeout) or a tunnel idled out (tunnel_idle).",
      byLaneAnd("reason", CUT_REASONS, (l, reason) => read(l).cut[reason]),
    ),
    counter(
      "pipelined_abandoned_total",
      "Pipelined requests dropped unserved because their client closed the connection.",
      byLane((l) => read(l).abandoned),
    ),
    counter(
      "connection_errors_total",
      "Connections the transport owned (upgrade, tunnel, raw reply) that ended on a socket error such as a reset; each ended alone.",
      byLane((l) => read(l).connection_errors),
    ),
  ];
}
