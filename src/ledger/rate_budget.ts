/**
 * A lane's rate budget: a token bucket (refill `per_second`, capacity `burst`) kept as one number,
 * the theoretical arrival time of the next conforming request (the GCRA formulation), so a
 * compare-and-swap on one shared 64-bit slot updates it from any worker.
 *
 * @module
 */
import type { RateBudget } from "./profile.ts";

/** A rate budget compiled to microsecond integers. */
export interface CompiledRate {
  /** Microseconds one token takes to refill. */
  readonly intervalUs: bigint;
  /** `burst × intervalUs`: how far ahead of now the arrival time may run. */
  readonly toleranceUs: bigint;
}

/** Compiles a validated budget. */
export function compileRate(budget: RateBudget): CompiledRate {
  const intervalUs = BigInt(Math.max(1, Math.round(1_000_000 / budget.per_second)));
  return { intervalUs, toleranceUs: intervalUs * BigInt(budget.burst) };
}

/**
 * Spends one token from the bucket in `state[slot]` at time `nowMs`.
 *
 * @param state the shared rate-state array
 * @param slot the lane's slot in it
 * @param rate the compiled budget
 * @param nowMs the clock reading, in milliseconds
 * @returns 0 when a token was spent, otherwise the milliseconds until one is due
 * @example
 * ```ts
 * import { compileRate, spendToken } from "./rate_budget.ts";
 * const state = new BigInt64Array(1);
 * const rate = compileRate({ per_second: 1, burst: 2 });
 * spendToken(state, 0, rate, 0); // 0
 * spendToken(state, 0, rate, 0); // 0
 * spendToken(state, 0, rate, 0); // 1000
 * ```
 */
export function spendToken(
  state: BigInt64Array,
  slot: number,
  rate: CompiledRate,
  nowMs: number,
): number {
  const now = BigInt(Math.floor(nowMs * 1000));
  for (;;) {
    const arrival = Atomics.load(state, slot);
    const next = (arrival > now ? arrival : now) + rate.intervalUs;
    const ahead = next - now;
    if (ahead > rate.toleranceUs) return Number(ahead - rate.toleranceUs) / 1000;
    if (Atomics.compareExchange(state, slot, arrival, next) === arrival) return 0;
  }
}

/**
 * Spends one token from a single connection's bucket (one writer: no atomics needed).
 *
 * @param bucket the connection's state (`rateTat` in microseconds, set on first use)
 * @param rate the compiled budget
 * @param nowMs the clock reading, in milliseconds
 * @returns 0 when a token was spent, otherwise the milliseconds until one is due
 * @example
 * ```ts
 * import { compileRate, spendConnectionToken } from "./rate_budget.ts";
 * const bucket: { rateTat?: number } = {};
 * const rate = compileRate({ per_second: 1, burst: 1 });
 * spendConnectionToken(bucket, rate, 0); // 0
 * spendConnectionToken(bucket, rate, 0); // 1000
 * ```
 */
export function spendConnectionToken(
  bucket: { rateTat?: number },
  rate: CompiledRate,
  nowMs: number,
): number {
  const now = Math.floor(nowMs * 1000);
  const interval = Number(rate.intervalUs);
  const next = Math.max(bucket.rateTat ?? now, now) + interval;
  const ahead = next - now;
  const tolerance = Number(rate.toleranceUs);
  if (ahead > tolerance) return (ahead - tolerance) / 1000;
  bucket.rateTat = next;
  return 0;
}
