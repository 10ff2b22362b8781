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
import type { Generation, Rejection } from "../live/generations.ts";
import type { ConfigProblem } from "../config/problems.ts";
import { formatAddress, runsWorkers } from "../config/load.ts";
import { type LedgerBuffers, LedgerMemory } from "../ledger/memory.ts";
import { ResponseStats } from "../observe/response_stats.ts";
import { BootError } from "../boot/boot_error.ts";
import { type Edge, type EdgeOptions, startEdge } from "./edge.ts";
import { type EdgePlan, firstGenerationNumber, type RuntimeSnapshot } from "./plan.ts";
import type { EdgeServices } from "../pipeline/services.ts";
import type { GenerationData, ToOwner, ToWorker } from "./worker_messages.ts";
import type { WorkerRole } from "./worker_role.ts";
import { describeListener } from "./listeners.ts";

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
  const pool = new WorkerPool(plan, options);
  pool.spawnPublicWorkers();
  const edge = await pool.startOwner();
  pool.mirrorRejections(edge);
  pool.log(
    `portcullis: ${publicWorkers} public request worker${publicWorkers === 1 ? "" : "s"} and ` +
      "this isolate (protected lanes) share one ledger",
  );
  return pool.handle(edge);
}

/** The memory every isolate of the edge shares, allocated once by worker 0. */
interface SharedMemory {
  readonly count: number;
  readonly ledger: LedgerBuffers;
  readonly stats: SharedArrayBuffer;
  readonly egressChannel: string;
  readonly generation: SharedArrayBuffer;
}

/** Allocates what `count` isolates share; the live generation starts at `firstNumber`. */
function allocateShared(count: number, firstNumber: number): SharedMemory {
  const ledger = LedgerMemory.create(count, true).buffers;
  const stats = ResponseStats.allocate(count);
  const egressChannel = `portcullis-egress-${crypto.randomUUID()}`;
  const generation = new SharedArrayBuffer(4);
  Atomics.store(new Int32Array(generation), 0, firstNumber);
  return { count, ledger, stats, egressChannel, generation };
}

/** A generation being built in the other workers. */
interface Preparing {
  /** The workers that have not answered yet. */
  readonly left: Set<number>;
  readonly problems: ConfigProblem[];
  /** A worker answered, or stopped. */
  readonly built: (worker: number) => void;
}

/** One public request worker as worker 0 tracks it. */
interface PublicWorker {
  readonly index: number;
  readonly worker: Worker;
  /** It has stopped: finished, failed at boot, or died. */
  readonly done: () => void;
  /** It serves. */
  readonly armed: () => void;
}

/**
 * Worker 0's side of a multi-worker edge: spawns the public request workers, answers what they
 * report, builds each generation in all of them, and drains or closes them all together.
 */
class WorkerPool {
  readonly log: (line: string) => void;
  readonly #plan: EdgePlan<EdgeServices>;
  readonly #options: EdgeOptions;
  readonly #firstNumber: number;
  readonly #shared: SharedMemory;
  readonly #gate: ArmGate;
  readonly #workers: Worker[] = [];
  /** Workers still running: a generation waits for these to build it, and only these. */
  readonly #live = new Set<number>();
  /** Generations being built in the other workers, by number. */
  readonly #preparing = new Map<number, Preparing>();
  /** One per public worker: resolves when it has stopped. */
  readonly #finished: Promise<void>[] = [];
  /** One per public worker: resolves when it serves. */
  readonly #armed: Promise<void>[] = [];
  /** Worker 0's edge, once started. */
  #edge?: Edge;
  #stopping?: Promise<void>;

  constructor(plan: EdgePlan<EdgeServices>, options: EdgeOptions) {
    this.#plan = plan;
    this.#options = options;
    // Worker 0 (this isolate) serves the protected lanes; workers 1 … N the public lane.
    const count = plan.config.workers + 1;
    this.log = options.log ?? ((line: string) => console.error(line));
    this.#firstNumber = firstGenerationNumber(plan.runtime);
    this.#shared = allocateShared(count, this.#firstNumber);
    this.#gate = new ArmGate(count);
  }

  /** Starts workers 1 … N, each told to load the config and bind the public lane's listeners. */
  spawnPublicWorkers(): void {
    for (let index = 1; index < this.#shared.count; index++) this.#spawn(index);
  }

  /** Starts one public worker and wires its messages and its death to this pool. */
  #spawn(index: number): void {
    const worker = new Worker(new URL("./worker_entry.ts", import.meta.url), {
      type: "module",
      name: `portcullis-worker-${index}`,
    });
    this.#workers.push(worker);
    this.#live.add(index);
    let done!: () => void;
    this.#finished.push(new Promise((resolve) => done = resolve));
    let armed!: () => void;
    this.#armed.push(new Promise((resolve) => armed = resolve));
    const tracked: PublicWorker = { index, worker, done, armed };
    worker.onerror = (event) => {
      event.preventDefault();
      this.#lost(tracked, event.message);
    };
    worker.onmessage = (event: MessageEvent<ToOwner>) => this.#receive(tracked, event.data);
    worker.postMessage(
      {
        type: "start",
        file: this.#plan.config.file,
        version: this.#options.version,
        index,
        ...this.#shared,
        first: generationData(this.#plan.runtime, this.#firstNumber, Date.now()),
        fileLimit: this.#plan.descriptors?.limit,
      } satisfies ToWorker,
    );
  }

  /**
   * A worker died: before boot that refuses the boot; after it, the requests and connections it
   * held are reclaimed and the others serve on.
   */
  #lost({ index, done }: PublicWorker, reason: string): void {
    this.#gate.fail([`Worker ${index} failed: ${reason}`]);
    // After boot the kernel stops handing connections to a closed socket; the others serve on.
    this.#live.delete(index);
    for (const pending of this.#preparing.values()) pending.built(index);
    if (this.#edge) {
      const lost = this.#edge.services.ledger.reclaim(index);
      this.log(
        `portcullis: error: public request worker ${index} stopped (${reason}); ` +
          `${lost.requests} requests and ${lost.connections} connections it held were ` +
          "reclaimed; the other workers serve on; restart the edge to replace it",
      );
    }
    done();
  }

  /** Answers one message of a public worker (see worker_messages.ts). */
  async #receive({ index, worker, done, armed }: PublicWorker, message: ToOwner): Promise<void> {
    const edge = this.#edge;
    if (message.type === "listeners") {
      this.#gate.report(index, message.listeners).then(
        () => worker.postMessage({ type: "arm" } satisfies ToWorker),
        (error: BootError) =>
          worker.postMessage({ type: "refuse", reasons: error.reasons } satisfies ToWorker),
      );
    } else if (message.type === "boot-failed") {
      this.#gate.fail(message.reasons.map((reason) => `Worker ${index}: ${reason}`));
      done();
    } else if (message.type === "prepared") {
      const pending = this.#preparing.get(message.number);
      pending?.problems.push(...message.problems.map((p) => ({
        ...p,
        message: `Worker ${index} could not build it: ${p.message}`,
      })));
      pending?.built(index);
    } else if (message.type === "counts") {
      edge?.services.policyStats.absorb(index, message.policy);
      edge?.services.observer.metrics.absorb(index, message.requests);
    } else if (message.type === "armed") {
      armed();
    } else if (message.type === "finished") {
      done();
    } else if (message.type === "drain") {
      void this.drainAll();
    } else if (message.type === "call") {
      worker.postMessage(await ownerCall(edge, message.id, message.method));
    }
  }

  /**
   * Starts worker 0's edge here (its arming waits for every worker's listeners), then waits for
   * every public worker to be armed; any failure stops them all and refuses the boot.
   */
  async startOwner(): Promise<Edge> {
    try {
      const edge = this.#edge = await startEdge(this.#plan, {
        ...this.#options,
        log: this.log,
        worker: this.#ownerRole(),
      });
      // Ready means every worker serves: wait for each to be armed, not only this one.
      if (await within(Promise.all(this.#armed), 10_000) === LATE) {
        await edge.close();
        throw new BootError(["A request worker was not armed within 10 s"]);
      }
      return edge;
    } catch (error) {
      this.#gate.fail([(error as Error).message]);
      await this.#terminate();
      throw error;
    }
  }

  /** Worker 0's part: its stripe of the shared memory, and the owner's duties towards the rest. */
  #ownerRole(): WorkerRole {
    return {
      index: 0,
      ...this.#shared,
      armGate: (listeners) => this.#gate.report(0, listeners),
      drainAll: () => this.drainAll(),
      prepareElsewhere: (generation) => this.#prepareElsewhere(generation),
    };
  }

  /** Builds a generation in every running public worker (10 s at most) before worker 0 swaps. */
  async #prepareElsewhere(g: Generation): Promise<ConfigProblem[]> {
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
    this.#post({ type: "prepare", ...generationData(g, g.number, g.loadedAt) });
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

  /** The edge as callers see it: worker 0's services; drain, close and finished span all. */
  handle(own: Edge): Edge {
    return {
      services: own.services,
      listeners: own.listeners,
      drain: () => this.drainAll(),
      close: () => this.#stopAll(() => own.close(), { type: "close" }),
      finished: own.finished.then(() => Promise.all(this.#finished)).then(() => {}),
    };
  }

  /** Every drain — SIGTERM, POST /v1/drain, a worker's request — drains every isolate. */
  drainAll(): Promise<void> {
    const running = this.#edge;
    return running ? this.#stopAll(() => running.drain(), { type: "drain" }) : Promise.resolve();
  }

  /** Stops worker 0 with `stop` and every other worker with `message`, once (idempotent). */
  #stopAll(stop: () => Promise<void>, message: ToWorker): Promise<void> {
    this.#stopping ??= (async () => {
      this.#post(message);
      await Promise.all([stop(), ...this.#finished]);
      for (const worker of this.#workers) worker.terminate();
    })();
    return this.#stopping;
  }

  /** After a failed boot: asks every worker to close, gives them 2 s, then terminates them. */
  async #terminate(): Promise<void> {
    this.#post({ type: "close" });
    await within(Promise.all(this.#finished), 2000);
    for (const worker of this.#workers) worker.terminate();
  }

  /** Sends one message to every public worker. */
  #post(message: ToWorker): void {
    for (const worker of this.#workers) worker.postMessage(message);
  }
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

/**
 * One listener of one worker, as the workers' sets are compared and as a refusal names it:
 * `lane "public" listener 0 on 127.0.0.1:8080`.
 */
function describeWorkerListener(listener: LaneListener): string {
  return `${describeListener(listener)} listener ${listener.index} on ${
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
      reasons.push(`Worker 0 bound ${describeWorkerListener(listener)}; the public workers own it`);
    }
  }
  const reference = new Set((reports.get(1) ?? []).map(describeWorkerListener));
  for (const [index, listeners] of reports) {
    if (index === 0) continue;
    const mine = new Set(listeners.map(describeWorkerListener));
    for (const listener of listeners) {
      if (listener.lane !== "public" || listener.address.kind !== "tcp") {
        reasons.push(
          `Worker ${index} bound ${describeWorkerListener(listener)}; only worker 0 may`,
        );
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
