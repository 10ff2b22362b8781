/**
 * The ledger profile: validated once at boot, fail closed. A zero footprint or zero capacity is an
 * error, never "unbounded"; every enabled protected lane has a private reserve, and the reserves
 * always leave a general pool of at least one slot. The rules are here, in the order they are
 * reported; the shapes they read and produce are in `profile_types.ts`.
 *
 * @module
 */
import { LANE_NAMES, type LaneName } from "./lane_names.ts";
import type {
  LaneProfile,
  LaneProfileInput,
  Profile,
  ProfileInput,
  ProfileProblem,
} from "./profile_types.ts";

export type {
  LaneProfile,
  LaneProfileInput,
  Profile,
  ProfileInput,
  ProfileProblem,
  RateBudget,
} from "./profile_types.ts";

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
  const problems = new ProblemList();
  checkGlobalNumbers(input, problems);
  const claims = checkLanes(input, problems);
  const { generalPool, generalBytes } = checkReservesFit(input, claims, problems);
  const lanes = LANE_NAMES.map((name) =>
    deriveLane({ name, lane: input.lanes[name] }, generalPool, problems)
  );
  if (problems.list.length > 0) return { ok: false, problems: problems.list };
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

/** Collects every broken rule in the order found, so the operator sees them all at once. */
class ProblemList {
  readonly list: ProfileProblem[] = [];

  /** Records `message` about `path` unless `ok` holds. */
  need(ok: boolean, path: (string | number)[], value: unknown, message: string): void {
    if (!ok) this.list.push({ path, value, message });
  }
}

/** True for a whole number from `min` up to what a ledger gauge can hold. */
function whole(value: number, min: number): boolean {
  return Number.isInteger(value) && value >= min && value <= GAUGE_MAX;
}

/** One lane as asked for, with the name its problems sit under (`lanes.<name>`). */
interface NamedLane {
  readonly name: LaneName;
  readonly lane: LaneProfileInput;
}

/** What the enabled lanes reserve: slots, bytes, and the widest single request. */
interface ReserveClaims {
  readonly reserves: number;
  readonly reserveBytes: number;
  readonly widestFootprint: number;
}

/** The three process-wide numbers: zero or a fraction is an error, never "unbounded". */
function checkGlobalNumbers(input: ProfileInput, problems: ProblemList): void {
  problems.need(
    whole(input.application_slots, 1),
    ["application_slots"],
    input.application_slots,
    "Capacity must be a whole number of slots above 0 (zero is an error, never unbounded)",
  );
  problems.need(
    whole(input.inflight_bytes, 1),
    ["inflight_bytes"],
    input.inflight_bytes,
    `Byte budget must be a whole number from 1 to ${GAUGE_MAX}`,
  );
  problems.need(
    whole(input.per_connection, 1),
    ["per_connection"],
    input.per_connection,
    "Per-connection bound must be a whole number above 0",
  );
}

/** Checks every lane in ledger order and sums what the enabled ones reserve. */
function checkLanes(input: ProfileInput, problems: ProblemList): ReserveClaims {
  let reserves = 0;
  let reserveBytes = 0;
  let widestFootprint = 0;
  for (const name of LANE_NAMES) {
    const lane = input.lanes[name];
    if (!lane.enabled) {
      checkAbsentLane({ name, lane }, problems);
      continue;
    }
    checkLaneNumbers({ name, lane }, input.inflight_bytes, problems);
    checkLaneReserve({ name, lane }, problems);
    checkLaneRate({ name, lane }, problems);
    reserves += lane.reserve;
    reserveBytes += lane.reserve * lane.footprint_bytes;
    widestFootprint = Math.max(widestFootprint, lane.footprint_bytes);
  }
  return { reserves, reserveBytes, widestFootprint };
}

/** An absent lane costs nothing: only its reserve is checked (it must be 0). */
function checkAbsentLane({ name, lane }: NamedLane, problems: ProblemList): void {
  problems.need(
    lane.reserve === 0,
    ["lanes", name, "reserve"],
    lane.reserve,
    `Lane "${name}" has no listener, so its reserve must be 0`,
  );
}

/** An enabled lane's footprint, deadline and connection ceiling: above 0, within the budget. */
function checkLaneNumbers({ name, lane }: NamedLane, inflightBytes: number, problems: ProblemList) {
  const at = (field: string) => ["lanes", name, field];
  problems.need(
    whole(lane.footprint_bytes, 1),
    at("footprint_bytes"),
    lane.footprint_bytes,
    "A zero footprint is a profile error, never unbounded",
  );
  problems.need(
    lane.footprint_bytes <= inflightBytes,
    at("footprint_bytes"),
    lane.footprint_bytes,
    `One request's footprint exceeds the whole byte budget (inflight_bytes ${inflightBytes})`,
  );
  problems.need(
    whole(lane.deadline_ms, 1),
    at("deadline_ms"),
    lane.deadline_ms,
    "Deadline must be above 0",
  );
  problems.need(
    whole(lane.max_connections, 1),
    at("max_connections"),
    lane.max_connections,
    "Connection ceiling must be above 0",
  );
}

/** An enabled lane's reserve: none for public, a floor above 0 for every protected lane. */
function checkLaneReserve({ name, lane }: NamedLane, problems: ProblemList): void {
  const at = ["lanes", name, "reserve"];
  problems.need(whole(lane.reserve, 0), at, lane.reserve, "Reserve must be a whole number");
  if (name === "public") {
    problems.need(
      lane.reserve === 0,
      at,
      lane.reserve,
      "The public lane has no reserve: it draws from the general pool only",
    );
  } else {
    problems.need(
      lane.reserve > 0,
      at,
      lane.reserve,
      `Lane "${name}" has a listener, so it needs a reserve above 0 (its deterministic floor)`,
    );
  }
}

/** An enabled lane's rate budget: a positive refill and whole burst, present where required. */
function checkLaneRate({ name, lane }: NamedLane, problems: ProblemList): void {
  if (!lane.rate) {
    const message = `Lane "${name}" requires a rate budget`;
    problems.need(!lane.rate_required, ["lanes", name, "rate"], undefined, message);
    return;
  }
  problems.need(
    Number.isFinite(lane.rate.per_second) && lane.rate.per_second > 0,
    ["lanes", name, "rate", "per_second"],
    lane.rate.per_second,
    "Refill rate must be above 0",
  );
  problems.need(
    whole(lane.rate.burst, 1),
    ["lanes", name, "rate", "burst"],
    lane.rate.burst,
    "Burst must be a whole number above 0",
  );
}

/** The reserves against capacity: they must leave a general pool of a slot and a request. */
function checkReservesFit(input: ProfileInput, claims: ReserveClaims, problems: ProblemList) {
  const { reserves, reserveBytes, widestFootprint } = claims;
  const generalPool = input.application_slots - reserves;
  problems.need(
    generalPool >= 1,
    ["application_slots"],
    input.application_slots,
    `The reserves (${reserves} slots) leave no general pool; application_slots must exceed them`,
  );
  const generalBytes = input.inflight_bytes - reserveBytes;
  problems.need(
    generalBytes >= widestFootprint,
    ["inflight_bytes"],
    input.inflight_bytes,
    `The reserves hold ${reserveBytes} bytes, leaving less than one request's footprint ` +
      `(${widestFootprint} bytes) for the general pool`,
  );
  return { generalPool, generalBytes };
}

/** One lane's validated numbers: its ceiling and priority reserve derived and checked. */
function deriveLane(named: NamedLane, generalPool: number, problems: ProblemList): LaneProfile {
  const { name, lane } = named;
  const maxSlots = laneCeiling(named, generalPool, problems);
  const priorityReserve = priorityReserveOf(named, maxSlots, problems);
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
}

/** The lane's ceiling: `max_slots` (reserve to reserve plus pool), else what it may borrow. */
function laneCeiling({ name, lane }: NamedLane, generalPool: number, problems: ProblemList) {
  const borrowDefault = name === "public" ? generalPool : Math.min(lane.reserve, generalPool);
  const maxSlots = lane.max_slots ?? lane.reserve + borrowDefault;
  if (lane.max_slots !== undefined) {
    problems.need(
      Number.isInteger(maxSlots) && maxSlots >= Math.max(1, lane.reserve) &&
        maxSlots <= lane.reserve + generalPool,
      ["lanes", name, "max_slots"],
      lane.max_slots,
      `Lane ceiling must be from ${Math.max(1, lane.reserve)} (its reserve) to ` +
        `${lane.reserve + Math.max(generalPool, 0)} (reserve plus the general pool)`,
    );
  }
  return maxSlots;
}

/** Slots kept for high-priority routes; they must leave ordinary routes at least one. */
function priorityReserveOf({ name, lane }: NamedLane, maxSlots: number, problems: ProblemList) {
  // -1 asks for the default: a tenth of the ceiling, at least one slot.
  const priorityReserve = lane.priority_reserve === -1
    ? Math.max(1, Math.floor(maxSlots / 10))
    : lane.priority_reserve ?? 0;
  if (priorityReserve > 0) {
    problems.need(
      Number.isInteger(priorityReserve) && priorityReserve < maxSlots,
      ["lanes", name, "priority_reserve"],
      priorityReserve,
      `The priority reserve must leave slots for ordinary routes (ceiling ${maxSlots})`,
    );
  }
  return priorityReserve;
}
