/**
 * Request workers: one edge served by N isolates. Worker 0 runs here and owns the runtime source
 * (folder watch or hub stream), the Unix-socket listeners and the signals; workers 1 … N−1 run in
 * `Worker`s (same permissions) and bind every TCP listener of every lane with `reusePort`, so the
 * kernel spreads connections among them. All of them count in one ledger (`SharedArrayBuffer`
 * gauges and counter stripes) and one set of response counters; generations swapped in by worker 0
 * are rebuilt in every other worker from the same files; egress outcomes are shared in batches.
 *
 * Nothing is served before every worker has bound its listeners and the sets were checked
 * together: each worker must hold exactly worker 0's TCP listeners, lane for lane.
 *
 * @module
 */
import type { LaneListener } from "../boot/distinct.ts";
import type { Rejection } from "../config/generations.ts";
import type { ConfigProblem } from "../config/problems.ts";
import { formatAddress, runsWorkers } from "../config/load.ts";
import { LedgerMemory } from "../ledger/memory.ts";
import { ResponseStats } from "../observe/stats.ts";
import { BootError, type Edge, type EdgeOptions, startEdge } from "./edge.ts";
import { type EdgePlan, firstGenerationNumber, type RuntimeSnapshot } from "./plan.ts";
import type { EdgeServices } from "./services.ts";
import type { GenerationData, ToOwner, ToWorker } from "./worker_messages.ts";

/**
 * Starts an edge with `plan.config.workers` public request workers beside worker 0 — or, with
 * `shared_event_loop` (or no protected lane), a plain {@link startEdge} in this isolate.
 *
 * @throws {BootError} when any worker cannot bind or the workers' listeners disagree
 */
export async function startWorkers(
  plan: EdgePlan<EdgeServices>,
  options: EdgeOptions,
): Promise<Edge> {
  const publicWorkers = plan.config.workers;
  if (!runsWorkers(plan.config)) return await startEdge(plan, options);
  // Worker 0 (this isolate) serves the protected lanes; workers 1 … N the public lane.
  const count = publicWorkers + 1;
  const log = options.log ?? ((line: string) => console.error(line));
  const ledger = LedgerMemory.create(count, true).buffers;
  const stats = ResponseStats.allocate(count);
  const egressChannel = `portcullis-egress-${crypto.randomUUID()}`;
  const generation = new SharedArrayBuffer(4);
  const firstNumber = firstGenerationNumber(plan.runtime);
  Atomics.store(new Int32Array(generation), 0, firstNumber);
  /** Generations being built in the other workers, by number. */
  const preparing = new Map<
    number,
    { left: Set<number>; problems: ConfigProblem[]; built: (worker: number) => void }
  >();
  const gate = new ArmGate(count);
  const workers: Worker[] = [];
  /** Workers still running: a generation waits for these to build it, and only these. */
  const live = new Set<number>();
  const finished: Promise<void>[] = [];
  const armed: Promise<void>[] = [];
  let edge: Edge | undefined;
  const post = (message: ToWorker) => {
    for (const worker of workers) worker.postMessage(message);
  };

  for (let index = 1; index < count; index++) {
    const worker = new Worker(new URL("./worker_entry.ts", import.meta.url), {
      type: "module",
      name: `portcullis-worker-${index}`,
    });
    workers.push(worker);
    live.add(index);
    let resolveDone!: () => void;
    finished.push(new Promise((resolve) => resolveDone = resolve));
    let resolveArmed!: () => void;
    armed.push(new Promise((resolve) => resolveArmed = resolve));
    worker.onerror = (event) => {
      event.preventDefault();
      gate.fail([`Worker ${index} failed: ${event.message}`]);
      // After boot the kernel stops handing connections to a closed socket; the others serve on.
      live.delete(index);
      for (const pending of preparing.values()) pending.built(index);
      if (edge) {
        const lost = edge.services.ledger.reclaim(index);
        log(
          `portcullis: error: public request worker ${index} stopped (${event.message}); ` +
            `${lost.requests} requests and ${lost.connections} connections it held were ` +
            "reclaimed; the other workers serve on; restart the edge to replace it",
        );
      }
      resolveDone();
    };
    worker.onmessage = async (event: MessageEvent<ToOwner>) => {
      const message = event.data;
      if (message.type === "listeners") {
        gate.report(index, message.listeners).then(
          () => worker.postMessage({ type: "arm" } satisfies ToWorker),
          (error: BootError) =>
            worker.postMessage({ type: "refuse", reasons: error.reasons } satisfies ToWorker),
        );
      } else if (message.type === "boot-failed") {
        gate.fail(message.reasons.map((reason) => `Worker ${index}: ${reason}`));
        resolveDone();
      } else if (message.type === "prepared") {
        const pending = preparing.get(message.number);
        pending?.problems.push(...message.problems.map((p) => ({
          ...p,
          message: `Worker ${index} could not build it: ${p.message}`,
        })));
        pending?.built(index);
      } else if (message.type === "counts") {
        edge?.services.policyStats.absorb(index, message.policy);
        edge?.services.observer.metrics.absorb(index, message.requests);
      } else if (message.type === "armed") {
        resolveArmed();
      } else if (message.type === "finished") {
        resolveDone();
      } else if (message.type === "drain") {
        void drainAll();
      } else if (message.type === "call") {
        worker.postMessage(await ownerCall(edge, message.id, message.method));
      }
    };
    worker.postMessage(
      {
        type: "start",
        file: plan.config.file,
        version: options.version,
        index,
        count,
        ledger,
        stats,
        egressChannel,
        generation,
        first: generationData(plan.runtime, firstNumber, Date.now()),
        fileLimit: plan.descriptors?.limit,
      } satisfies ToWorker,
    );
  }

  let stopping: Promise<void> | undefined;
  const all = (stop: () => Promise<void>, message: ToWorker) => {
    stopping ??= (async () => {
      post(message);
      await Promise.all([stop(), ...finished]);
      for (const worker of workers) worker.terminate();
    })();
    return stopping;
  };
  // Every drain — SIGTERM, POST /v1/drain, a worker's request — drains every isolate.
  const drainAll = () => {
    const running = edge;
    return running ? all(() => running.drain(), { type: "drain" }) : Promise.resolve();
  };
  const terminate = async () => {
    post({ type: "close" });
    await within(Promise.all(finished), 2000);
    for (const worker of workers) worker.terminate();
  };
  try {
    edge = await startEdge(plan, {
      ...options,
      log,
      worker: {
        index: 0,
        count,
        ledger,
        stats,
        egressChannel,
        generation,
        armGate: (listeners) => gate.report(0, listeners),
        drainAll: () => drainAll(),
        async prepareElsewhere(g) {
          const problems: ConfigProblem[] = [];
          const left = new Set(live);
          const ready = new Promise<void>((done) => {
            const built = (worker: number) => {
              left.delete(worker);
              if (left.size === 0) done();
            };
            preparing.set(g.number, { left, problems, built });
            if (left.size === 0) done();
          });
          post({ type: "prepare", ...generationData(g, g.number, g.loadedAt) });
          if (await within(ready, 10_000) === LATE) {
            problems.push({
              file: g.dir,
              path: [],
              message: `Worker(s) ${[...left].join(", ")} did not build the set within 10 s`,
            });
          }
          preparing.delete(g.number);
          return problems;
        },
      },
    });
    // Ready means every worker serves: wait for each to be armed, not only this one.
    if (await within(Promise.all(armed), 10_000) === LATE) {
      await edge.close();
      throw new BootError(["A request worker was not armed within 10 s"]);
    }
  } catch (error) {
    gate.fail([(error as Error).message]);
    await terminate();
    throw error;
  }
  const store = edge.services.config;
  store.onStatus(() =>
    post({
      type: "status",
      rejected: store.lastRejected as Rejection | undefined,
      superseded: store.rejectionSuperseded,
    })
  );
  log(
    `portcullis: ${publicWorkers} public request worker${publicWorkers === 1 ? "" : "s"} and ` +
      "this isolate (protected lanes) share one ledger",
  );

  const own = edge;
  return {
    services: own.services,
    listeners: own.listeners,
    drain: drainAll,
    close: () => all(() => own.close(), { type: "close" }),
    finished: own.finished.then(() => Promise.all(finished)).then(() => {}),
  };
}

const LATE = Symbol("late");

/** Resolves with `promise`'s value, or {@link LATE} when `ms` pass first. */
async function within<T>(promise: Promise<T>, ms: number): Promise<T | typeof LATE> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<typeof LATE>((resolve) => timer = setTimeout(() => resolve(LATE), ms));
  try {
    return await Promise.race([promise, late]);
  } finally {
    clearTimeout(timer);
  }
}

/** A generation as plain data for another worker. */
function generationData(
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
async function ownerCall(
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

/**
 * Holds every worker's arming until all have bound, then checks the sets together: each worker
 * must hold worker 0's TCP listeners exactly (same lane, role and index for each address).
 */
class ArmGate {
  readonly #count: number;
  readonly #reports = new Map<number, readonly LaneListener[]>();
  readonly #decided: Promise<void>;
  #resolve!: () => void;
  #reject!: (error: BootError) => void;
  #failed = false;

  constructor(count: number) {
    this.#count = count;
    this.#decided = new Promise((resolve, reject) => {
      this.#resolve = resolve;
      this.#reject = reject;
    });
    this.#decided.catch(() => {});
  }

  report(index: number, listeners: readonly LaneListener[]): Promise<void> {
    this.#reports.set(index, listeners);
    if (this.#reports.size === this.#count && !this.#failed) {
      const reasons = compareWorkers(this.#reports);
      if (reasons.length > 0) this.fail(reasons);
      else this.#resolve();
    }
    return this.#decided;
  }

  fail(reasons: readonly string[]): void {
    if (this.#failed) return;
    this.#failed = true;
    this.#reject(new BootError(reasons));
  }
}

function describe(listener: LaneListener): string {
  const role = listener.role ? ` (${listener.role})` : "";
  return `lane "${listener.lane}"${role} listener ${listener.index} on ${
    formatAddress(listener.address)
  }`;
}

/**
 * Reasons the workers' listener sets are wrong; empty when worker 0 holds only protected-lane and
 * Unix listeners and every public worker holds exactly the same public TCP listeners.
 */
export function compareWorkers(reports: ReadonlyMap<number, readonly LaneListener[]>): string[] {
  const reasons: string[] = [];
  for (const listener of reports.get(0) ?? []) {
    if (listener.lane === "public" && listener.address.kind === "tcp") {
      reasons.push(`Worker 0 bound ${describe(listener)}; the public workers own it`);
    }
  }
  const reference = new Set((reports.get(1) ?? []).map(describe));
  for (const [index, listeners] of reports) {
    if (index === 0) continue;
    const mine = new Set(listeners.map(describe));
    for (const listener of listeners) {
      if (listener.lane !== "public" || listener.address.kind !== "tcp") {
        reasons.push(`Worker ${index} bound ${describe(listener)}; only worker 0 may`);
      }
    }
    if (index === 1) continue;
    for (const item of mine) {
      if (!reference.has(item)) reasons.push(`Worker ${index} bound ${item}; worker 1 did not`);
    }
    for (const item of reference) {
      if (!mine.has(item)) reasons.push(`Worker ${index} did not bind ${item}`);
    }
  }
  return reasons;
}
