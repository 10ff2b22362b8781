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

/** One instance in full, as `/stats` lists it. */
export interface InstanceStats {
  /** The slot's index in the pool. */
  index: number;
  /** The SOCKS port, the same in every life. */
  socksPort: number;
  /** The control port, the same in every life. */
  controlPort: number;
  /** Where the instance is in its life. */
  state: InstanceState;
  /** How many times the slot has been spawned. */
  life: number;
  /** The current process, or null when none runs. */
  pid: number | null;
  /** Milliseconds since the current life's spawn (0 when dead). */
  uptimeMs: number;
  /** Tor's bootstrap percentage. */
  progress: number;
  /** Tor's last bootstrap summary, or null. */
  summary: string | null;
  /** Moving average latency in milliseconds, or null before any sample. */
  latencyMs: number | null;
  /** Failed probes and reported stream errors, over every life. */
  errors: number;
  /** Streams carried now. */
  active: number;
  /** Failed probes in a row in this life. */
  failedProbes: number;
  /** Milliseconds the SOCKS port has refused connections (0 when it accepts). */
  refusingMs: number;
  /** Why and when the last life ended, or null. */
  lastDeath: { readonly reason: string; readonly at: number } | null;
  /** Lives after the first: how many times the slot was respawned. */
  restarts: number;
  /** Deaths in a row without a life that stayed ready for `timings.stableMs`. */
  deathsInARow: number;
  /** The wait before the current life was spawned (doubling with each death in a row). */
  respawnWaitMs: number;
  /** A control connection owns this life's Tor (it exits when the supervisor does). */
  owned: boolean;
  /** The last lines Tor wrote. */
  tail: readonly string[];
}

/** The whole pool in full, as `/stats` answers it. */
export interface PoolStats {
  /** Instances the pool keeps at least. */
  min: number;
  /** Instances the pool grows to at most. */
  max: number;
  /** Instances now, in every state. */
  instances: number;
  /** Streams at which an instance counts as busy. */
  busyStreams: number;
  /** The share of ready instances that are busy, or null with none ready. */
  busyFraction: number | null;
  /** Since when the pool has been above or below its scaling thresholds. */
  scaler: { readonly aboveSince?: number; readonly belowSince?: number };
  /** The probe and restart timings. */
  timings: Timings;
  /** Processes spawned. */
  spawns: number;
  /** Processes that died. */
  deaths: number;
  /** Instances added by the scaler. */
  scaleUps: number;
  /** Instances removed by the scaler. */
  scaleDowns: number;
  /** Tors left by an earlier run on an instance's ports, ended before its first life. */
  leftoversEnded: number;
  /** Every instance. */
  each: InstanceStats[];
}

/** One instance in full, for `/stats`. */
export function instanceStats(instance: TorInstance, now: number): InstanceStats {
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
    restarts: Math.max(0, i.life - 1),
    deathsInARow: i.deathsInARow,
    respawnWaitMs: i.respawnWaitMs,
    owned: i.owned,
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
    readonly counters: Readonly<
      Record<"spawns" | "deaths" | "scaleUps" | "scaleDowns" | "leftoversEnded", number>
    >;
  },
): PoolStats {
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
