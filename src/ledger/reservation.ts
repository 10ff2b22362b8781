/**
 * A move-only admission ticket: released exactly once, by `complete()` when the response was fully
 * delivered or `cancel()` on timeout, abort or error. A second release (or a release of a handle
 * that was moved away) changes nothing and is counted.
 *
 * @module
 */
import type { LaneName } from "./lane_names.ts";

/** The connection a reservation counts against (see `ConnectionBudget` in ledger.ts). */
export interface ConnectionHold {
  active: number;
  released?(): void;
}

/**
 * What a reservation needs from the ledger that issued it.
 *
 * @internal
 */
export interface ReservationOwner {
  settle(ticket: Reservation, completed: boolean): void;
  countDoubleRelease(): void;
}

/**
 * One admitted request's hold on the ledger.
 *
 * @internal
 */
export class Reservation {
  /** The lane the slot was charged to. */
  readonly lane: LaneName;
  /** The lane's ledger index. */
  readonly laneIndex: number;
  /** True when the slot came from the lane's private reserve. */
  readonly fromReserve: boolean;
  /** Absolute deadline for the response headers, on the ledger's clock (ms). */
  readonly deadline: number;
  /** The connection budget the request counts against, if any. */
  readonly connection?: ConnectionHold;
  #owner: ReservationOwner;
  #live = true;

  /** Issued by the ledger only. */
  constructor(
    owner: ReservationOwner,
    lane: LaneName,
    laneIndex: number,
    fromReserve: boolean,
    deadline: number,
    connection?: ConnectionHold,
  ) {
    this.#owner = owner;
    this.lane = lane;
    this.laneIndex = laneIndex;
    this.fromReserve = fromReserve;
    this.deadline = deadline;
    this.connection = connection;
  }

  /** True until this handle is released or moved. */
  get live(): boolean {
    return this.#live;
  }

  /** Releases the ticket as served. @returns false when it was already released or moved */
  complete(): boolean {
    return this.#release(true);
  }

  /** Releases the ticket as not served. @returns false when it was already released or moved */
  cancel(): boolean {
    return this.#release(false);
  }

  /** True when the deadline has passed at time `now` (or `now` is not a number). */
  expired(now: number): boolean {
    return !(now < this.deadline);
  }

  /**
   * Moves ownership to a new handle; this handle becomes spent (releasing it is a counted no-op).
   *
   * @throws {TypeError} when this handle was already released or moved
   */
  move(): Reservation {
    if (!this.#live) throw new TypeError("Cannot move a released reservation");
    this.#live = false;
    return new Reservation(
      this.#owner,
      this.lane,
      this.laneIndex,
      this.fromReserve,
      this.deadline,
      this.connection,
    );
  }

  #release(completed: boolean): boolean {
    if (!this.#live) {
      this.#owner.countDoubleRelease();
      return false;
    }
    this.#live = false;
    this.#owner.settle(this, completed);
    return true;
  }
}
