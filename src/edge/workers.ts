/**
 * Request workers: one edge served by N isolates. Worker 0 runs here and owns the runtime source
 * (folder watch or hub stream), the Unix-socket listeners and the signals; workers 1 … N−1 run in
 * `Worker`s (same permissions) and bind every TCP listener of every lane with `reusePort`, so the
 * kernel spreads connections among them. All of them count in one ledger (`SharedArrayBuffer`
 * gauges and counter stripes) and one set of response counters; generations swapped in by worker 0
 * are rebuilt in every other worker from the same files; egress outcomes are shared in batches.
 *
 * Nothing is served before every worker has bound its listeners and the sets were checked
 * together: each worker must hold exactly worker 0's TCP listeners, lane for lane (arm_gate.ts).
 * Here is the pool's life — spawn, arm, drain or close, losing a worker — and the memory they all
 * share; what worker 0 relays to the others while they serve (generations, the rejection record,
 * answers to their calls) is mirror_relay.ts.
 *
 * @module
 */
import { runsWorkers } from "../config/load.ts";
import { type LedgerBuffers, LedgerMemory } from "../ledger/memory.ts";
import { ResponseStats } from "../observe/response_stats.ts";
import { diagnosticSink } from "../observe/diag.ts";
import { BootError } from "../boot/boot_error.ts";
import { type Edge, type EdgeOptions, startEdge } from "./edge.ts";
import { type EdgePlan, firstGenerationNumber } from "./plan.ts";
import type { EdgeServices } from "../pipeline/services.ts";
import type { ToOwner, ToWorker } from "./worker_messages.ts";
import type { WorkerRole } from "./worker_role.ts";
import { ArmGate } from "./arm_gate.ts";
import { generationData, MirrorRelay, ownerCall } from "./mirror_relay.ts";
import { LATE, within } from "./within.ts";

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
  readonly #relay: MirrorRelay;
  readonly #workers: Worker[] = [];
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
    this.log = options.log ?? diagnosticSink({ level: plan.config.observe.logLevel });
    this.#firstNumber = firstGenerationNumber(plan.runtime);
    this.#shared = allocateShared(count, this.#firstNumber);
    this.#gate = new ArmGate(count);
    this.#relay = new MirrorRelay((message) => this.#post(message));
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
    this.#relay.joined(index);
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
        first: {
          ...generationData(this.#plan.runtime, this.#firstNumber, Date.now()),
          tables: this.#plan.tenants.environment.tables.share(),
        },
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
    this.#relay.lost(index);
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
      this.#relay.prepared(index, message.number, message.problems);
    } else if (message.type === "counts") {
      edge?.services.policyStats.absorb(index, message.policy);
      edge?.services.observer.metrics.absorb(index, message.requests);
      if (message.stores) edge?.services.storeCounters?.absorb(index, message.stores);
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
      prepareElsewhere: (generation) => this.#relay.prepareElsewhere(generation),
    };
  }

  /** Sends the owner's rejection record to every worker whenever it changes. */
  mirrorRejections(edge: Edge): void {
    this.#relay.mirrorRejections(edge);
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
