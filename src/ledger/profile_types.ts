/**
 * The ledger profile's shapes: what the operator asks for ({@link ProfileInput}, one
 * {@link LaneProfileInput} per lane) and what validation makes of it ({@link Profile}, one
 * {@link LaneProfile} per lane), plus the {@link ProfileProblem}s it reports instead.
 *
 * Types only, apart from the rules in `profile.ts` (which re-exports them): the ledger, the plan
 * and the lane table need the shapes, and reading them should not mean reading every rule.
 *
 * @module
 */
import type { LaneName } from "./lane_names.ts";

/** A lane's token-bucket rate budget: `burst` back to back, then `per_second`. */
export interface RateBudget {
  readonly per_second: number;
  readonly burst: number;
}

/** What the operator (or the lane's defaults) asked for, per lane. */
export interface LaneProfileInput {
  /** True when the lane has at least one listener. */
  readonly enabled: boolean;
  readonly reserve: number;
  /** The lane's ceiling: its reserve plus the general-pool slots it may borrow. */
  readonly max_slots?: number;
  readonly max_connections: number;
  readonly footprint_bytes: number;
  readonly deadline_ms: number;
  readonly rate?: RateBudget;
  /** The lane refuses to run without a rate budget (provider_health). */
  readonly rate_required?: boolean;
  /**
   * Slots at the top of the lane's ceiling only high-priority routes may fill (public); -1 asks
   * for the default, a tenth of the ceiling (at least one).
   */
  readonly priority_reserve?: number;
}

/** The whole profile as asked for. */
export interface ProfileInput {
  readonly application_slots: number;
  readonly inflight_bytes: number;
  readonly per_connection: number;
  /** One connection's request rate (optional). */
  readonly connection_rate?: RateBudget;
  readonly lanes: Readonly<Record<LaneName, LaneProfileInput>>;
}

/** One lane's validated, derived numbers. */
export interface LaneProfile {
  readonly name: LaneName;
  readonly enabled: boolean;
  readonly reserve: number;
  readonly maxSlots: number;
  readonly maxConnections: number;
  readonly footprint: number;
  readonly deadlineMs: number;
  readonly rate?: RateBudget;
  /** Slots at the top of the ceiling kept for high-priority routes (0: none). */
  readonly priorityReserve: number;
}

/**
 * The validated profile: every number the ledger enforces.
 *
 * @internal
 */
export interface Profile {
  readonly applicationSlots: number;
  readonly inflightBytes: number;
  readonly perConnection: number;
  /** One connection's request-rate bucket, when capped. */
  readonly connectionRate?: RateBudget;
  /** `application_slots − Σ reserves`; at least 1. */
  readonly generalPool: number;
  /** `inflight_bytes − Σ (reserve × footprint)`: the bytes general-pool admissions share. */
  readonly generalBytes: number;
  /** Lanes in ledger index order. */
  readonly lanes: readonly LaneProfile[];
}

/** A profile rule that does not hold, with the field it is about (under `ledger.`). */
export interface ProfileProblem {
  readonly path: readonly (string | number)[];
  readonly value?: unknown;
  readonly message: string;
}
