/**
 * What worker 0 of a multi-worker edge does for the other workers (its mirrors) once they run:
 * builds each generation in every running mirror before it swaps the generation in, so no worker
 * is left serving a set it could not build; sends its rejection record whenever that changes, so
 * `/v1/config` reads the same in every worker; and answers a mirror's calls (reload, hub status)
 * on its own edge, since only worker 0 has the runtime source. Split from workers.ts, which
 * spawns, arms and stops the workers; this is what flows to them while they serve.
 *
 * A replacement for a dead worker starts from the generation live when it is spawned; a generation
 * still being built elsewhere at that moment is sent to it too, and waits for it like for the
 * others, so the owner never switches to a generation the replacement does not hold (a mirror can
 * only follow the shared pointer to a generation it built). It is sent the rejection record at
 * once as well.
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
  /** What was sent: a worker that joins meanwhile is sent it too. */
  readonly message: ToWorker;
}

/** Sends one message to one mirror. */
export type SendToWorker = (message: ToWorker) => void;

/** Worker 0's generations and rejection record, relayed to every running mirror. */
export class MirrorRelay {
  /** Workers still running, and how to reach each: a generation waits for these, and only these. */
  readonly #live = new Map<number, SendToWorker>();
  /** Generations being built in the other workers, by number. */
  readonly #preparing = new Map<number, Preparing>();
  /** The owner's config store, once {@link mirrorRejections} was called. */
  #store?: Edge["services"]["config"];

  /**
   * Worker `index` runs (spawned with generation `from`): every generation from now on waits for
   * it, and so does any newer one still being built elsewhere, which it is sent now.
   */
  joined(index: number, send: SendToWorker, from: number): void {
    this.#live.set(index, send);
    for (const [number, pending] of this.#preparing) {
      if (number <= from) continue;
      pending.left.add(index);
      send(pending.message);
    }
    if (this.#store) send(statusMessage(this.#store));
  }

  /** Worker `index` stopped: no generation waits for it any more. */
  lost(index: number): void {
    this.#live.delete(index);
    for (const pending of this.#preparing.values()) pending.built(index);
  }

  /** Sends one message to every running mirror. */
  #post(message: ToWorker): void {
    for (const send of this.#live.values()) send(message);
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
    const left = new Set(this.#live.keys());
    const tables = g.registry.environment.tables.share();
    const message: ToWorker = {
      type: "prepare",
      ...generationData(g, g.number, g.loadedAt),
      tables,
    };
    const ready = new Promise<void>((done) => {
      const built = (worker: number) => {
        left.delete(worker);
        if (left.size === 0) done();
      };
      this.#preparing.set(g.number, { left, problems, built, message });
      if (left.size === 0) done();
    });
    this.#post(message);
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
    const store = this.#store = edge.services.config;
    store.onStatus(() => this.#post(statusMessage(store)));
  }
}

/** The owner's rejection record as a message. */
function statusMessage(store: Edge["services"]["config"]): ToWorker {
  return {
    type: "status",
    rejected: store.lastRejected as Rejection | undefined,
    superseded: store.rejectionSuperseded,
  };
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
