/**
 * A point-in-time reading of the ledger, as served by `GET /v1/ledger` and `/metrics`.
 *
 * @module
 */
import { LANE_NAMES, type LaneName } from "./lane_names.ts";
import type { Ledger } from "./ledger.ts";
import { COUNTER_INDEX, GAUGE_INDEX } from "./memory.ts";
import { OVERLOAD_KINDS, type OverloadKind } from "./overload.ts";
import type { Reservation } from "./reservation.ts";

/** One lane's part of a snapshot. */
export interface LaneSnapshot {
  /** Whether the lane is configured. */
  enabled: boolean;
  /** Slots kept for this lane alone. */
  reserve: number;
  /** The lane's ceiling: its reserve plus what it may borrow. */
  max_slots: number;
  /** Top slots only routes with priority ≥ 8 may fill (public lane). */
  priority_reserve: number;
  /** Bytes each admitted request is charged. */
  footprint_bytes: number;
  /** How long a request on the lane may take. */
  deadline_ms: number;
  /** The lane's rate budget, or null without one. */
  rate: { per_second: number; burst: number } | null;
  /** Slots held now. */
  in_use: number;
  /** Of those, slots taken from the reserve. */
  reserve_in_use: number;
  /** Requests admitted since start. */
  admitted: number;
  /** Requests refused by the lane's allowlist. */
  denied_route: number;
  /** Refusals since start, by overload kind. */
  overload: Record<OverloadKind, number>;
  /** Connections open now. */
  connections: number;
  /** Connections the lane may hold at most. */
  max_connections: number;
  /** Connections accepted since start. */
  connections_accepted: number;
  /** Connections refused at accept since start. */
  connections_refused: number;
}

/** The whole ledger at one moment. */
export interface LedgerSnapshot {
  /** Each lane's part. */
  lanes: Record<LaneName, LaneSnapshot>;
  /** Slots in all (`ledger.application_slots`). */
  application_slots: number;
  /** Slots not reserved to a lane, which the lanes share. */
  general_pool: number;
  /** General-pool slots held now. */
  general_in_use: number;
  /** Concurrent requests one connection may have admitted. */
  per_connection: number;
  /** The byte budget (`ledger.inflight_bytes`). */
  inflight_bytes: number;
  /** Bytes charged by the requests admitted now. */
  bytes_in_use: number;
  /** Requests admitted since start, every lane. */
  admitted: number;
  /** Reservations released after a full response. */
  completed: number;
  /** Reservations released without one. */
  cancelled: number;
  /** Reservations held now. */
  outstanding: number;
  /** Releases of an already released reservation (0 unless there is a bug). */
  double_release: number;
  /** The most slots ever held at once. */
  high_water_slots: number;
  /** True when every admitted reservation was released exactly once and none is outstanding. */
  release_balanced: boolean;
  /** True when the reading leaves out the request that asked for it. */
  excludes_observer: boolean;
}

/**
 * Reads the ledger.
 *
 * @param ledger the ledger to read
 * @param observer the reservation of the request asking, left out of the reading so an observer
 *   on a protected lane does not see itself
 */
export function snapshotLedger(ledger: Ledger, observer?: Reservation): LedgerSnapshot {
  const memory = ledger.memory;
  const self = observer?.live ? observer : undefined;
  const lanes = {} as Record<LaneName, LaneSnapshot>;
  let admitted = 0;
  let bytesInUse = memory.gauge(GAUGE_INDEX.generalBytes);
  LANE_NAMES.forEach((name, index) => {
    const profile = ledger.profile.lanes[index];
    const mine = self?.laneIndex === index ? 1 : 0;
    const overload = {} as Record<OverloadKind, number>;
    for (const kind of OVERLOAD_KINDS) {
      overload[kind] = memory.total(COUNTER_INDEX.overload(index, kind));
    }
    const reserveInUse = memory.gauge(GAUGE_INDEX.reserveUsed(index)) -
      (mine && self!.fromReserve ? 1 : 0);
    const inUse = reserveInUse + memory.gauge(GAUGE_INDEX.generalUsed(index)) -
      (mine && !self!.fromReserve ? 1 : 0);
    const laneAdmitted = memory.total(COUNTER_INDEX.admitted(index)) - mine;
    admitted += laneAdmitted;
    bytesInUse += memory.gauge(GAUGE_INDEX.reserveUsed(index)) * profile.footprint;
    lanes[name] = {
      enabled: profile.enabled,
      reserve: profile.reserve,
      max_slots: profile.maxSlots,
      priority_reserve: profile.priorityReserve,
      footprint_bytes: profile.footprint,
      deadline_ms: profile.deadlineMs,
      rate: profile.rate ? { ...profile.rate } : null,
      in_use: inUse,
      reserve_in_use: reserveInUse,
      admitted: laneAdmitted,
      denied_route: memory.total(COUNTER_INDEX.deniedRoute(index)),
      overload,
      connections: memory.gauge(GAUGE_INDEX.connections(index)),
      max_connections: profile.maxConnections,
      connections_accepted: memory.total(COUNTER_INDEX.connectionsAccepted(index)),
      connections_refused: memory.total(COUNTER_INDEX.connectionsRefused(index)),
    };
  });
  if (self) {
    bytesInUse -= ledger.profile.lanes[self.laneIndex].footprint;
  }
  const completed = memory.total(COUNTER_INDEX.completed);
  const cancelled = memory.total(COUNTER_INDEX.cancelled);
  const outstanding = memory.gauge(GAUGE_INDEX.inUse) - (self ? 1 : 0);
  return {
    lanes,
    application_slots: ledger.profile.applicationSlots,
    general_pool: ledger.profile.generalPool,
    general_in_use: memory.gauge(GAUGE_INDEX.generalTotal) - (self && !self.fromReserve ? 1 : 0),
    per_connection: ledger.profile.perConnection,
    inflight_bytes: ledger.profile.inflightBytes,
    bytes_in_use: bytesInUse,
    admitted,
    completed,
    cancelled,
    outstanding,
    double_release: memory.total(COUNTER_INDEX.doubleRelease),
    high_water_slots: memory.gauge(GAUGE_INDEX.highWater),
    release_balanced: completed + cancelled === admitted && outstanding === 0,
    excludes_observer: self !== undefined,
  };
}
