/**
 * The ingress ledger: one per process, shared by every lane. Admission happens at handler entry and
 * returns either a move-only {@link Reservation} or a typed {@link Overload}; nothing queues.
 *
 * Slot arithmetic: a protected lane takes from its private reserve first, then borrows from the
 * general pool up to its ceiling; the public lane draws from the general pool only, so public
 * overload never converts into protected capacity. Reserve admissions carry pre-carved bytes;
 * general-pool admissions draw their footprint from the general byte budget.
 *
 * @module
 */
import { laneIndex, type LaneName } from "./lane_names.ts";
import { COUNTER_INDEX, GAUGE_INDEX, LedgerMemory } from "./memory.ts";
import type { Overload, OverloadKind } from "./overload.ts";
import type { Profile } from "./profile.ts";
import { type CompiledRate, compileRate, spendConnectionToken, spendToken } from "./rate_budget.ts";
import { Reservation, type ReservationOwner } from "./reservation.ts";

/** A monotonic clock in milliseconds. May throw or return NaN when it cannot be read. */
export type Clock = () => number;

/**
 * Concurrency bookkeeping for one connection (one per accepted socket).
 *
 * @internal
 */
export interface ConnectionBudget {
  /** Requests from this connection currently admitted. */
  active: number;
  /** The connection's request-rate bucket (GCRA arrival time, µs), with `connection_rate`. */
  rateTat?: number;
  /** Called after one of its reservations was released (the next pipelined request may go). */
  released?(): void;
}

/** Options for {@link Ledger}. */
export interface LedgerOptions {
  /** Defaults to `performance.timeOrigin + performance.now()`. */
  readonly clock?: Clock;
  /** Defaults to fresh, unshared memory with one stripe. */
  readonly memory?: LedgerMemory;
}

const defaultClock: Clock = () => performance.timeOrigin + performance.now();

/**
 * The shared admission ledger.
 *
 * @example
 * ```ts
 * import { Ledger } from "./ledger.ts";
 * import { validateProfile } from "./profile.ts";
 * import { snapshotLedger } from "./snapshot.ts";
 * const lane = { enabled: true, reserve: 0, max_connections: 8, footprint_bytes: 1024, deadline_ms: 1000 };
 * const off = { ...lane, enabled: false };
 * const checked = validateProfile({
 *   application_slots: 1, inflight_bytes: 4096, per_connection: 1,
 *   lanes: { public: lane, local_health: off, provider_health: off },
 * });
 * if (!checked.ok) throw new Error("bad profile");
 * const ledger = new Ledger(checked.profile);
 * const ticket = ledger.admit("public");
 * if ("overload" in ticket) throw new Error("refused");
 * const second = ledger.admit("public"); // the only slot is held
 * if (!("overload" in second) || second.overload !== "lane_pool_full") throw new Error("admitted");
 * ticket.complete();
 * if (!snapshotLedger(ledger).release_balanced) throw new Error("unbalanced");
 * ```
 */
export class Ledger implements ReservationOwner {
  /** The validated profile the ledger enforces. */
  readonly profile: Profile;
  /** The counters and gauges, in memory request workers can share. */
  readonly memory: LedgerMemory;
  /** The clock of deadlines and rate budgets. */
  readonly clock: Clock;
  readonly #rates: (CompiledRate | undefined)[];
  readonly #connectionRate?: CompiledRate;

  /**
   * Creates a ledger with every counter at zero (or over shared memory a worker was given).
   *
   * @param profile a validated profile
   * @param options clock and memory
   */
  constructor(profile: Profile, options: LedgerOptions = {}) {
    this.profile = profile;
    this.clock = options.clock ?? defaultClock;
    this.memory = options.memory ?? LedgerMemory.create();
    this.#rates = profile.lanes.map((lane) => lane.rate ? compileRate(lane.rate) : undefined);
    if (profile.connectionRate) this.#connectionRate = compileRate(profile.connectionRate);
  }

  /**
   * Admits one request on `lane`, or says why not.
   *
   * @param lane the lane fixed by the listener that accepted the connection
   * @param connection the connection's budget (omit for requests not tied to a connection)
   * @returns a reservation to release exactly once, or a typed overload
   * @throws {RangeError} when the lane is not enabled (it has no listener)
   */
  admit(lane: LaneName, connection?: ConnectionBudget): Reservation | Overload {
    const index = laneIndex(lane);
    const profile = this.profile.lanes[index];
    if (!profile.enabled) throw new RangeError(`Lane "${lane}" is not enabled`);
    const memory = this.memory;

    let now: number;
    try {
      now = this.clock();
    } catch {
      now = NaN;
    }
    if (!Number.isFinite(now)) return this.#refuse(index, "deadline_exceeded");
    if (connection && connection.active >= this.profile.perConnection) {
      return this.#refuse(index, "per_connection_limit");
    }
    if (connection && this.#connectionRate) {
      const waitMs = spendConnectionToken(connection, this.#connectionRate, now);
      if (waitMs > 0) return this.#refuse(index, "connection_rate", waitMs);
    }
    const rate = this.#rates[index];
    if (rate) {
      const waitMs = spendToken(memory.rate, index, rate, now);
      if (waitMs > 0) return this.#refuse(index, "rate_budget", waitMs);
    }

    let fromReserve = false;
    if (profile.reserve > 0 && memory.tryTake(GAUGE_INDEX.reserveUsed(index), 1, profile.reserve)) {
      fromReserve = true;
    } else {
      if (!memory.tryTake(GAUGE_INDEX.generalUsed(index), 1, profile.maxSlots - profile.reserve)) {
        return this.#refuse(index, "lane_pool_full");
      }
      if (!memory.tryTake(GAUGE_INDEX.generalTotal, 1, this.profile.generalPool)) {
        memory.give(GAUGE_INDEX.generalUsed(index), 1);
        return this.#refuse(index, "aggregate_full");
      }
      if (!memory.tryTake(GAUGE_INDEX.generalBytes, profile.footprint, this.profile.generalBytes)) {
        memory.give(GAUGE_INDEX.generalTotal, 1);
        memory.give(GAUGE_INDEX.generalUsed(index), 1);
        return this.#refuse(index, "byte_budget");
      }
    }
    memory.add(
      fromReserve ? COUNTER_INDEX.heldReserve(index) : COUNTER_INDEX.heldGeneral(index),
      1,
    );
    const inUse = Atomics.add(memory.gauges, GAUGE_INDEX.inUse, 1) + 1;
    memory.raise(GAUGE_INDEX.highWater, inUse);
    memory.bump(COUNTER_INDEX.admitted(index));
    if (connection) connection.active++;
    return new Reservation(this, lane, index, fromReserve, now + profile.deadlineMs, connection);
  }

  /** Releases a reservation's slot and bytes; called by {@link Reservation} only. */
  settle(ticket: Reservation, completed: boolean): void {
    const memory = this.memory;
    const index = ticket.laneIndex;
    memory.add(
      ticket.fromReserve ? COUNTER_INDEX.heldReserve(index) : COUNTER_INDEX.heldGeneral(index),
      -1,
    );
    if (ticket.fromReserve) {
      memory.give(GAUGE_INDEX.reserveUsed(index), 1);
    } else {
      memory.give(GAUGE_INDEX.generalBytes, this.profile.lanes[index].footprint);
      memory.give(GAUGE_INDEX.generalTotal, 1);
      memory.give(GAUGE_INDEX.generalUsed(index), 1);
    }
    memory.give(GAUGE_INDEX.inUse, 1);
    memory.bump(completed ? COUNTER_INDEX.completed : COUNTER_INDEX.cancelled);
    const connection = ticket.connection;
    if (connection) {
      connection.active--;
      connection.released?.();
    }
  }

  /** Counts a release of an already released reservation (a no-op otherwise). */
  countDoubleRelease(): void {
    this.memory.bump(COUNTER_INDEX.doubleRelease);
  }

  /**
   * Cancels a reservation whose deadline passed before its response headers, counting a
   * `deadline_exceeded` overload on its lane.
   */
  expire(ticket: Reservation): Overload {
    if (ticket.cancel()) {
      this.memory.bump(COUNTER_INDEX.overload(ticket.laneIndex, "deadline_exceeded"));
    }
    return { overload: "deadline_exceeded" };
  }

  /** Reads the clock; NaN when it cannot be read. */
  now(): number {
    try {
      return this.clock();
    } catch {
      return NaN;
    }
  }

  /** Slots `lane` holds right now (reserve and borrowed). */
  inUse(lane: LaneName): number {
    const index = laneIndex(lane);
    return this.memory.gauge(GAUGE_INDEX.reserveUsed(index)) +
      this.memory.gauge(GAUGE_INDEX.generalUsed(index));
  }

  /**
   * Sheds a low-priority request that holds one of the slots its lane keeps for high-priority
   * routes: the reservation is cancelled and a `priority_shed` overload counted. The priority is
   * known only after routing, so admission lets every request use the whole ceiling and this check
   * takes a low-priority one back out.
   *
   * @returns true when the request was shed
   */
  shed(ticket: Reservation): boolean {
    const profile = this.profile.lanes[ticket.laneIndex];
    if (profile.priorityReserve === 0 || !ticket.live) return false;
    if (this.inUse(ticket.lane) <= profile.maxSlots - profile.priorityReserve) return false;
    ticket.cancel();
    this.memory.bump(COUNTER_INDEX.overload(ticket.laneIndex, "priority_shed"));
    return true;
  }

  /** Counts a request denied by its lane's route allowlist. */
  denyRoute(lane: LaneName): void {
    this.memory.bump(COUNTER_INDEX.deniedRoute(laneIndex(lane)));
  }

  /**
   * Accounts an accepted connection against its lane's connection ceiling, before any request
   * byte is parsed.
   *
   * @returns false (and counts the refusal) when the lane is at its ceiling
   */
  openConnection(lane: LaneName): boolean {
    const index = laneIndex(lane);
    const { maxConnections } = this.profile.lanes[index];
    if (this.memory.tryTake(GAUGE_INDEX.connections(index), 1, maxConnections)) {
      this.memory.add(COUNTER_INDEX.heldConnections(index), 1);
      this.memory.bump(COUNTER_INDEX.connectionsAccepted(index));
      return true;
    }
    this.memory.bump(COUNTER_INDEX.connectionsRefused(index));
    return false;
  }

  /** Returns a connection's place under its lane's ceiling. */
  closeConnection(lane: LaneName): void {
    const index = laneIndex(lane);
    this.memory.add(COUNTER_INDEX.heldConnections(index), -1);
    this.memory.give(GAUGE_INDEX.connections(index), 1);
  }

  /**
   * Returns everything request worker `stripe` held — slots, bytes, connections — after it
   * stopped without releasing them; its unreleased requests count as cancelled.
   *
   * @returns how many requests and connections were reclaimed
   */
  reclaim(stripe: number): { requests: number; connections: number } {
    const memory = this.memory;
    let requests = 0;
    let connections = 0;
    this.profile.lanes.forEach((profile, index) => {
      const reserve = memory.read(stripe, COUNTER_INDEX.heldReserve(index));
      const general = memory.read(stripe, COUNTER_INDEX.heldGeneral(index));
      const open = memory.read(stripe, COUNTER_INDEX.heldConnections(index));
      if (reserve > 0) memory.give(GAUGE_INDEX.reserveUsed(index), reserve);
      if (general > 0) {
        memory.give(GAUGE_INDEX.generalBytes, general * profile.footprint);
        memory.give(GAUGE_INDEX.generalTotal, general);
        memory.give(GAUGE_INDEX.generalUsed(index), general);
      }
      if (open > 0) memory.give(GAUGE_INDEX.connections(index), open);
      for (
        const entry of [
          COUNTER_INDEX.heldReserve(index),
          COUNTER_INDEX.heldGeneral(index),
          COUNTER_INDEX.heldConnections(index),
        ]
      ) {
        memory.write(stripe, entry, 0);
      }
      requests += Math.max(0, reserve) + Math.max(0, general);
      connections += Math.max(0, open);
    });
    if (requests > 0) {
      memory.give(GAUGE_INDEX.inUse, requests);
      memory.add(COUNTER_INDEX.cancelled, requests);
    }
    return { requests, connections };
  }

  #refuse(index: number, kind: OverloadKind, retryAfterMs?: number): Overload {
    this.memory.bump(COUNTER_INDEX.overload(index, kind));
    return retryAfterMs === undefined ? { overload: kind } : { overload: kind, retryAfterMs };
  }
}
