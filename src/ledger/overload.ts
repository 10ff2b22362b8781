/**
 * The typed overloads the ledger answers instead of queueing, and their HTTP statuses.
 *
 * @module
 */

/** Every overload kind, in counter order. */
export const OVERLOAD_KINDS = [
  "lane_pool_full",
  "per_connection_limit",
  "rate_budget",
  "aggregate_full",
  "byte_budget",
  "deadline_exceeded",
  "priority_shed",
  "connection_rate",
] as const;

/** Why an admission was refused. */
export type OverloadKind = typeof OVERLOAD_KINDS[number];

/**
 * A refused admission: the kind, and for `rate_budget` how long until a token is due.
 *
 * @internal
 */
export interface Overload {
  readonly overload: OverloadKind;
  /** Milliseconds until a retry can succeed (rate budgets only). */
  readonly retryAfterMs?: number;
}

/**
 * The status an overload answers with: the caller doing too much is 429 (one connection over its
 * request rate included), the service out of
 * admitted capacity is 503 (a priority shed included: a low-priority request found the lane's
 * remaining slots kept for high-priority routes).
 *
 * @example
 * ```ts
 * import { overloadStatus } from "./overload.ts";
 * overloadStatus("rate_budget"); // 429
 * overloadStatus("byte_budget"); // 503
 * ```
 */
export function overloadStatus(kind: OverloadKind): 429 | 503 {
  return kind === "lane_pool_full" || kind === "per_connection_limit" ||
      kind === "rate_budget" || kind === "connection_rate"
    ? 429
    : 503;
}
