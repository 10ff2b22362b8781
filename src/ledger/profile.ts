/**
 * The ledger profile: validated once at boot, fail closed. A zero footprint or zero capacity is an
 * error, never "unbounded"; every enabled protected lane has a private reserve, and the reserves
 * always leave a general pool of at least one slot.
 *
 * @module
 */
import { LANE_NAMES, type LaneName } from "./lane_names.ts";

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

/** The validated profile: every number the ledger enforces. */
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

/** Largest value a ledger gauge can hold (gauges are 32-bit integers). */
export const GAUGE_MAX = 0x7fffffff;

/**
 * Validates a profile and derives the general pool and the general byte budget.
 *
 * @param input the profile asked for
 * @returns the profile, or every rule that does not hold
 * @example
 * ```ts
 * import { validateProfile } from "./profile.ts";
 * const lane = { enabled: true, reserve: 0, max_connections: 8, footprint_bytes: 1024, deadline_ms: 1000 };
 * const off = { ...lane, enabled: false };
 * const result = validateProfile({
 *   application_slots: 8, inflight_bytes: 65536, per_connection: 2,
 *   lanes: { public: lane, local_health: off, provider_health: off },
 * });
 * if (result.ok) result.profile.generalPool; // 8
 * ```
 */
export function validateProfile(
  input: ProfileInput,
): { ok: true; profile: Profile } | { ok: false; problems: ProfileProblem[] } {
  const problems: ProfileProblem[] = [];
  const need = (ok: boolean, path: (string | number)[], value: unknown, message: string) => {
    if (!ok) problems.push({ path, value, message });
  };
  const whole = (value: number, min: number) =>
    Number.isInteger(value) && value >= min && value <= GAUGE_MAX;

  need(
    whole(input.application_slots, 1),
    ["application_slots"],
    input.application_slots,
    "Capacity must be a whole number of slots above 0 (zero is an error, never unbounded)",
  );
  need(
    whole(input.inflight_bytes, 1),
    ["inflight_bytes"],
    input.inflight_bytes,
    `Byte budget must be a whole number from 1 to ${GAUGE_MAX}`,
  );
  need(
    whole(input.per_connection, 1),
    ["per_connection"],
    input.per_connection,
    "Per-connection bound must be a whole number above 0",
  );

  let reserves = 0;
  let reserveBytes = 0;
  let widestFootprint = 0;
  for (const name of LANE_NAMES) {
    const lane = input.lanes[name];
    const at = (field: string) => ["lanes", name, field];
    if (!lane.enabled) {
      // An absent lane costs nothing: only its reserve is checked (it must be 0).
      need(
        lane.reserve === 0,
        at("reserve"),
        lane.reserve,
        `Lane "${name}" has no listener, so its reserve must be 0`,
      );
      continue;
    }
    need(
      whole(lane.footprint_bytes, 1),
      at("footprint_bytes"),
      lane.footprint_bytes,
      "A zero footprint is a profile error, never unbounded",
    );
    need(
      lane.footprint_bytes <= input.inflight_bytes,
      at("footprint_bytes"),
      lane.footprint_bytes,
      `One request's footprint exceeds the whole byte budget (inflight_bytes ${input.inflight_bytes})`,
    );
    need(
      whole(lane.deadline_ms, 1),
      at("deadline_ms"),
      lane.deadline_ms,
      "Deadline must be above 0",
    );
    need(
      whole(lane.max_connections, 1),
      at("max_connections"),
      lane.max_connections,
      "Connection ceiling must be above 0",
    );
    need(whole(lane.reserve, 0), at("reserve"), lane.reserve, "Reserve must be a whole number");
    if (name === "public") {
      need(
        lane.reserve === 0,
        at("reserve"),
        lane.reserve,
        "The public lane has no reserve: it draws from the general pool only",
      );
    } else {
      need(
        lane.reserve > 0,
        at("reserve"),
        lane.reserve,
        `Lane "${name}" has a listener, so it needs a reserve above 0 (its deterministic floor)`,
      );
    }
    if (lane.rate) {
      need(
        Number.isFinite(lane.rate.per_second) && lane.rate.per_second > 0,
        [...at("rate"), "per_second"],
        lane.rate.per_second,
        "Refill rate must be above 0",
      );
      need(
        whole(lane.rate.burst, 1),
        [...at("rate"), "burst"],
        lane.rate.burst,
        "Burst must be a whole number above 0",
      );
    } else {
      need(!lane.rate_required, at("rate"), undefined, `Lane "${name}" requires a rate budget`);
    }
    reserves += lane.reserve;
    reserveBytes += lane.reserve * lane.footprint_bytes;
    widestFootprint = Math.max(widestFootprint, lane.footprint_bytes);
  }

  const generalPool = input.application_slots - reserves;
  need(
    generalPool >= 1,
    ["application_slots"],
    input.application_slots,
    `The reserves (${reserves} slots) leave no general pool; application_slots must exceed them`,
  );
  const generalBytes = input.inflight_bytes - reserveBytes;
  need(
    generalBytes >= widestFootprint,
    ["inflight_bytes"],
    input.inflight_bytes,
    `The reserves hold ${reserveBytes} bytes, leaving less than one request's footprint ` +
      `(${widestFootprint} bytes) for the general pool`,
  );

  const lanes = LANE_NAMES.map((name): LaneProfile => {
    const lane = input.lanes[name];
    const borrowDefault = name === "public" ? generalPool : Math.min(lane.reserve, generalPool);
    const maxSlots = lane.max_slots ?? lane.reserve + borrowDefault;
    if (lane.max_slots !== undefined) {
      need(
        Number.isInteger(maxSlots) && maxSlots >= Math.max(1, lane.reserve) &&
          maxSlots <= lane.reserve + generalPool,
        ["lanes", name, "max_slots"],
        lane.max_slots,
        `Lane ceiling must be from ${Math.max(1, lane.reserve)} (its reserve) to ` +
          `${lane.reserve + Math.max(generalPool, 0)} (reserve plus the general pool)`,
      );
    }
    // -1 asks for the default: a tenth of the ceiling, at least one slot.
    const priorityReserve = lane.priority_reserve === -1
      ? Math.max(1, Math.floor(maxSlots / 10))
      : lane.priority_reserve ?? 0;
    if (priorityReserve > 0) {
      need(
        Number.isInteger(priorityReserve) && priorityReserve < maxSlots,
        ["lanes", name, "priority_reserve"],
        priorityReserve,
        `The priority reserve must leave slots for ordinary routes (ceiling ${maxSlots})`,
      );
    }
    return {
      name,
      enabled: lane.enabled,
      reserve: lane.reserve,
      priorityReserve,
      maxSlots,
      maxConnections: lane.max_connections,
      footprint: lane.footprint_bytes,
      deadlineMs: lane.deadline_ms,
      rate: lane.rate,
    };
  });

  if (problems.length > 0) return { ok: false, problems };
  return {
    ok: true,
    profile: {
      applicationSlots: input.application_slots,
      inflightBytes: input.inflight_bytes,
      perConnection: input.per_connection,
      connectionRate: input.connection_rate,
      generalPool,
      generalBytes,
      lanes,
    },
  };
}
