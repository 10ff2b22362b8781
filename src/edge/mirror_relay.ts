/**
 * What worker 0 of a multi-worker edge does for the other workers (its mirrors) once they run:
 * builds each generation in every running mirror before it swaps the generation in, so no worker
 * is left serving a set it could not build; sends its rejection record whenever that changes, so
 * `/v1/config` reads the same in every worker; and answers a mirror's calls (reload, hub status)
 * on its own edge, since only worker 0 has the runtime source. Split from workers.ts, which
 * spawns, arms and stops the workers; this is what flows to them while they serve.
 *
 * @module
 */
import type { Generation, Rejection } from "../live/generations.ts";
import type { ConfigProblem } from "../config/problems.ts";
import type { Edge } from "./edge.ts";
import type { RuntimeSnapshot } from "./plan.ts";
import type { GenerationData, ToWorker } from "./worker_messages.ts";
import { LATE, within } from "./within.ts";

/** A generation being built in the other workers. */
interface Preparing {
  /** The workers that have not answered yet. */
  readonly left: Set<number>;
  readonly problems: ConfigProblem[];
  /** A worker answered, or stopped. */
  readonly built: (worker: number) => void;
}

/** Worker 0's generations and rejection record, relayed to every running mirror. */
export class MirrorRelay {
  /** Workers still running: a generation waits for these to build it, and only these. */
  readonly #live = new Set<number>();
  /** Generations being built in the other workers, by number. */
  readonly #preparing = new Map<number, Preparing>();
  readonly #post: (message: ToWorker) => void;

  /** @param post sends one message to every mirror */
  constructor(post: (message: ToWorker) => void) {
    this.#post = post;
  }

  /** Worker `index` runs: every generation from now on waits for it. */
  joined(index: number): void {
    this.#live.add(index);
  }

  /** Worker `index` stopped: no generation waits for it any more. */
  lost(index: number): void {
    this.#live.delete(index);
    for (const pending of this.#preparing.values()) pending.built(index);
  }

  /** Worker `index` answered a `prepare` of generation `number` with `problems`. */
  prepared(index: number, number: number, problems: readonly ConfigProblem[]): void {
    const pending = this.#preparing.get(number);
    pending?.problems.push(...problems.map((p) => ({
      ...p,
      message: `Worker ${index} could not build it: ${p.message}`,
    })));
    pending?.built(index);
  }

  /** Builds a generation in every running public worker (10 s at most) before worker 0 swaps. */
  async prepareElsewhere(g: Generation): Promise<ConfigProblem[]> {
    const problems: ConfigProblem[] = [];
    const left = new Set(this.#live);
    const ready = new Promise<void>((done) => {
      const built = (worker: number) => {
        left.delete(worker);
        if (left.size === 0) done();
      };
      this.#preparing.set(g.number, { left, problems, built });
      if (left.size === 0) done();
    });
    const tables = g.registry.environment.tables.share();
    this.#post({ type: "prepare", ...generationData(g, g.number, g.loadedAt), tables });
    if (await within(ready, 10_000) === LATE) {
      problems.push({
        file: g.dir,
        path: [],
        message: `Worker(s) ${[...left].join(", ")} did not build the set within 10 s`,
      });
    }
    this.#preparing.delete(g.number);
    return problems;
  }

  /** Sends the owner's rejection record to every worker whenever it changes. */
  mirrorRejections(edge: Edge): void {
    const store = edge.services.config;
    store.onStatus(() =>
      this.#post({
        type: "status",
        rejected: store.lastRejected as Rejection | undefined,
        superseded: store.rejectionSuperseded,
      })
    );
  }
}

/** A generation as plain data for another worker. */
export function generationData(
  set: RuntimeSnapshot,
  number: number,
  loadedAt: number,
): GenerationData {
  return {
    number,
    loadedAt,
    hash: set.hash,
    source: set.source,
    dir: set.dir,
    texts: [...set.texts],
  };
}

/** Answers a mirror's call on the owner's edge. */
export async function ownerCall(
  edge: Edge | undefined,
  id: number,
  method: "reload" | "hubStatus",
): Promise<ToWorker> {
  try {
    if (!edge) throw new Error("The edge is not running yet");
    const services = edge.services;
    if (method === "hubStatus") {
      return { type: "result", id, value: await services.hubStatus?.() ?? null };
    }
    if (!services.reloadConfig) throw new Error("This edge has no runtime source to reload");
    const outcome = await services.reloadConfig();
    return {
      type: "result",
      id,
      value: outcome.outcome === "rejected"
        ? { outcome: "rejected", rejection: outcome.rejection }
        : { outcome: outcome.outcome },
    };
  } catch (error) {
    return { type: "result", id, error: (error as Error).message };
  }
}
