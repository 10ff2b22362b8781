/**
 * What the pool shows of itself: the backends a traffic carrier may use, the pool's health, and
 * the full statistics — plain values read from the instances, so the API only serialises them.
 *
 * @module
 */
import type { InstanceState, Timings, TorInstance } from "./instance.ts";

/** A live SOCKS port a carrier may send streams to. */
export interface Backend {
  readonly index: number;
  readonly host: string;
  readonly port: number;
  /** Moving average over control probes and traffic reports; null before any sample. */
  readonly latencyMs: number | null;
  /** Failed probes and reported stream errors, over every life of the instance. */
  readonly errors: number;
  readonly active: number;
}

/** The pool at a glance. */
export interface PoolHealth {
  /** `ok`: every instance ready; `degraded`: some; `down`: none. */
  readonly status: "ok" | "degraded" | "down";
  readonly live: number;
  readonly instances: number;
  readonly min: number;
  readonly max: number;
  /** The lowest bootstrap progress among running instances (100 once all are bootstrapped). */
  readonly bootstrap: number;
  readonly each: readonly {
    readonly index: number;
    readonly port: number;
    readonly state: InstanceState;
    readonly progress: number;
    readonly summary: string | null;
  }[];
}

/** Latency rounded to 0.1 ms, or null. */
function latency(instance: TorInstance): number | null {
  return instance.latencyMs === undefined ? null : Math.round(instance.latencyMs * 10) / 10;
}

/** The ready instances, by index. */
export function backendsOf(instances: readonly TorInstance[], host: string): Backend[] {
  return instances.filter((i) => i.state === "ready").map((i) => ({
    index: i.index,
    host,
    port: i.ports.socks,
    latencyMs: latency(i),
    errors: i.errors,
    active: i.active,
  }));
}

/** The pool's health. */
export function healthOf(
  instances: readonly TorInstance[],
  limits: { readonly min: number; readonly max: number },
): PoolHealth {
  const live = instances.filter((i) => i.state === "ready").length;
  const running = instances.filter((i) => i.state !== "dead");
  return {
    status: live === 0 ? "down" : live < instances.length ? "degraded" : "ok",
    live,
    instances: instances.length,
    min: limits.min,
    max: limits.max,
    bootstrap: running.length === 0 ? 0 : Math.min(...running.map((i) => i.progress)),
    each: instances.map((i) => ({
      index: i.index,
      port: i.ports.socks,
      state: i.state,
      progress: i.progress,
      summary: i.summary ?? null,
    })),
  };
}

/** One instance in full, for `/stats`. */
export function instanceStats(instance: TorInstance, now: number) {
  const i = instance;
  return {
    index: i.index,
    socksPort: i.ports.socks,
    controlPort: i.ports.control,
    state: i.state,
    life: i.life,
    pid: i.pid ?? null,
    uptimeMs: i.state === "dead" ? 0 : now - i.spawnedAt,
    progress: i.progress,
    summary: i.summary ?? null,
    latencyMs: latency(i),
    errors: i.errors,
    active: i.active,
    failedProbes: i.failedProbes,
    refusingMs: i.refusedSince === undefined ? 0 : now - i.refusedSince,
    lastDeath: i.lastDeath ?? null,
    tail: i.tail,
  };
}

/** The whole pool, for `/stats`. */
export function poolStats(
  instances: readonly TorInstance[],
  pool: {
    readonly now: number;
    readonly limits: { readonly min: number; readonly max: number };
    readonly busyStreams: number;
    readonly scaler: { readonly aboveSince?: number; readonly belowSince?: number };
    readonly timings: Timings;
    readonly counters: Readonly<Record<"spawns" | "deaths" | "scaleUps" | "scaleDowns", number>>;
  },
) {
  const live = instances.filter((i) => i.state === "ready");
  const busy = live.filter((i) => i.active >= pool.busyStreams).length;
  return {
    ...pool.limits,
    instances: instances.length,
    busyStreams: pool.busyStreams,
    busyFraction: live.length > 0 ? busy / live.length : null,
    scaler: pool.scaler,
    timings: pool.timings,
    ...pool.counters,
    each: instances.map((i) => instanceStats(i, pool.now)),
  };
}
