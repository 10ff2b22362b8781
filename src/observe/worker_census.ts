/**
 * How each lane's request workers stand: how many the lane runs, how many serve right now, how many
 * are being started again after a death or wait out their restart delay, and how many deaths and
 * restarts the lane has seen. Worker 0 of a multi-worker edge counts its public workers; the
 * protected lanes are served by worker 0 itself, so while it answers they have their one worker.
 *
 * Readiness reads it: a lane with no live worker refuses every connection of its addresses (with
 * `workers: 1`, one dead public worker is the whole public lane), so the edge is not ready then,
 * whatever its boot said — a load balancer polling `/readyz` moves users away until a restarted
 * worker is armed. The same counts are rendered for `/metrics` here.
 *
 * @module
 */
import type { LaneName } from "../ledger/lane_names.ts";
import { counter, type Family, gauge, type Sample } from "./exposition.ts";

/** One lane's workers. */
export interface LaneWorkers {
  readonly lane: LaneName;
  /** How many isolates serve the lane's listeners when all are up. */
  readonly workers: number;
  /** Armed and serving. */
  readonly live: number;
  /** Started again after a death, not armed yet. */
  readonly starting: number;
  /** Dead, waiting out their restart delay. */
  readonly waiting: number;
  /** Replacements armed since boot. */
  readonly restarts: number;
  /** Workers (and failed replacements) that died since boot. */
  readonly deaths: number;
}

/** The lanes that have no live worker: each refuses every connection on its addresses. */
export function lanesDown(census: readonly LaneWorkers[]): LaneWorkers[] {
  return census.filter((lane) => lane.live === 0);
}

/**
 * Why a lane is down, in an operator's words: `lane "public" has no live request worker (0 of 1;
 * 1 restarting)`.
 */
export function describeDown(lane: LaneWorkers): string {
  const back = lane.starting + lane.waiting;
  return `lane "${lane.lane}" has no live request worker (0 of ${lane.workers}` +
    `${back > 0 ? `; ${back} restarting` : ""})`;
}

/** The workers' families of the metrics page: by lane and state, restarts and deaths. */
export function workerFamilies(census: readonly LaneWorkers[] | undefined): Family[] {
  if (!census || census.length === 0) return [];
  const states = ["live", "starting", "waiting"] as const;
  const byState: Sample[] = census.flatMap((lane) =>
    states.map((state): Sample => [`{lane="${lane.lane}",state="${state}"}`, lane[state]])
  );
  const byLane = (pick: (lane: LaneWorkers) => number): Sample[] =>
    census.map((lane): Sample => [`{lane="${lane.lane}"}`, pick(lane)]);
  return [
    gauge(
      "request_workers",
      "Request workers of each lane by state: live (serving), starting (a replacement not armed " +
        "yet), waiting (dead, before its restart).",
      byState,
    ),
    gauge(
      "request_workers_configured",
      "Request workers each lane runs.",
      byLane((l) => l.workers),
    ),
    counter(
      "request_worker_restarts_total",
      "Replacement request workers armed after a death.",
      byLane((l) => l.restarts),
    ),
    counter(
      "request_worker_deaths_total",
      "Request workers (and failed replacements) that died after boot.",
      byLane((l) => l.deaths),
    ),
  ];
}
