/**
 * One public request worker's place in a multi-worker edge — its index, its stripe of the shared
 * memory — across the workers that fill it: the one started at boot, and each replacement started
 * after a death. The slot knows which state it is in (starting, live, waiting out a restart delay,
 * stopped), counts its deaths and restarts for the census, and holds the restart timer, so a drain
 * or close can cancel a pending restart; the census of every lane's workers is read from the
 * slots. workers.ts and worker_restarts.ts decide what happens; this is the bookkeeping.
 *
 * @module
 */
import type { LaneName } from "../ledger/lane_names.ts";
import type { LaneWorkers } from "../observe/worker_census.ts";
import { RestartBackoff } from "./restart_backoff.ts";

/** Where a slot stands. */
export type SlotState = "starting" | "live" | "waiting" | "stopped";

/** One worker that fills a slot, from spawn to death or finish. */
export interface Incarnation {
  readonly worker: Worker;
  /** It has been armed (serves). */
  armed: boolean;
  /** It has stopped: what it sends after this is ignored. */
  ended: boolean;
  /** A replacement's arming deadline. */
  deadline?: ReturnType<typeof setTimeout>;
}

/** One public worker slot (index 1 … N) across its workers. */
export class WorkerSlot {
  readonly index: number;
  readonly backoff: RestartBackoff;
  state: SlotState = "starting";
  /** The worker filling the slot now (or the last one, once it ended). */
  current?: Incarnation;
  /** Replacements armed since boot. */
  restarts = 0;
  /** Workers of this slot (and failed replacements) that died after boot. */
  deaths = 0;
  /** Resolves when the worker started at boot is armed. */
  readonly bootArmed: Promise<void>;
  /** Resolves when the slot is stopped for good (a drain, a close, a failed boot). */
  readonly stopped: Promise<void>;
  readonly #armed: () => void;
  readonly #stopped: () => void;
  #timer?: ReturnType<typeof setTimeout>;

  constructor(index: number, backoff = new RestartBackoff()) {
    this.index = index;
    this.backoff = backoff;
    const armed = Promise.withResolvers<void>();
    const stopped = Promise.withResolvers<void>();
    this.bootArmed = armed.promise;
    this.#armed = armed.resolve;
    this.stopped = stopped.promise;
    this.#stopped = stopped.resolve;
  }

  /** A worker was spawned into the slot. */
  begin(worker: Worker): Incarnation {
    this.state = "starting";
    return this.current = { worker, armed: false, ended: false };
  }

  /** The slot's worker was armed at `now` (a monotonic time in ms). */
  armed(life: Incarnation, now: number): void {
    life.armed = true;
    clearTimeout(life.deadline);
    this.state = "live";
    this.backoff.served(now);
    this.#armed();
  }

  /**
   * The slot's worker died at `now`: `restart` runs after the backoff's delay (unless the slot is
   * stopped first).
   *
   * @returns the delay, in ms
   */
  died(now: number, restart: () => void): number {
    this.deaths++;
    this.state = "waiting";
    const delay = this.backoff.died(now);
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      if (this.state === "waiting") restart();
    }, delay);
    return delay;
  }

  /** Stops the slot for good: a pending restart is cancelled. */
  stop(): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    this.state = "stopped";
    this.#stopped();
  }
}

/**
 * How each lane's workers stand: the public lane's are the public workers' slots (when they bind
 * any of its listeners); every other lane is served by worker 0, up while it answers.
 *
 * @param lanes the edge's lanes
 * @param slots the public workers' slots
 * @param publicBound whether the public workers bind any listener at all
 */
export function censusOf(
  lanes: readonly LaneName[],
  slots: readonly WorkerSlot[],
  publicBound: boolean,
): LaneWorkers[] {
  const count = (state: SlotState) => slots.filter((slot) => slot.state === state).length;
  const sum = (pick: (slot: WorkerSlot) => number) =>
    slots.reduce((total, slot) => total + pick(slot), 0);
  return lanes.map((lane): LaneWorkers =>
    lane === "public" && publicBound
      ? {
        lane,
        workers: slots.length,
        live: count("live"),
        starting: count("starting"),
        waiting: count("waiting"),
        restarts: sum((slot) => slot.restarts),
        deaths: sum((slot) => slot.deaths),
      }
      : { lane, workers: 1, live: 1, starting: 0, waiting: 0, restarts: 0, deaths: 0 }
  );
}
