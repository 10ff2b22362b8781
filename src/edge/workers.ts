/**
 * Request workers: one edge served by N isolates. Worker 0 runs here and owns the runtime source
 * (folder watch or hub stream), the Unix-socket listeners and the signals; workers 1 … N run in
 * `Worker`s (same permissions) and bind every TCP listener of every lane with `reusePort`, so the
 * kernel spreads connections among them. All of them count in one ledger (`SharedArrayBuffer`
 * gauges and counter stripes) and one set of response counters; generations swapped in by worker 0
 * are rebuilt in every other worker from the same files; egress outcomes are shared in batches.
 *
 * Nothing is served before every worker has bound its listeners and the sets were checked
 * together: each worker must hold exactly worker 0's TCP listeners, lane for lane (arm_gate.ts).
 * No public worker binds before worker 0 has proven the public ports free of other processes and
 * bound its own listeners exclusively (exclusive_ports.ts). A public worker that dies after boot is
 * replaced at the same index after a growing delay (worker_restarts.ts); meanwhile readiness
 * counts the public lane's live workers (worker_census.ts). Here is the pool's life — spawn, arm,
 * drain or close, and routing each worker's messages — and the memory they all share; what worker
 * 0 relays to the others while they serve is mirror_relay.ts.
 *
 * @module
 */
import { runsWorkers } from "../config/load.ts";
import { type Diagnostics, diagnostics, diagnosticSink } from "../observe/diag.ts";
import { BootError } from "../boot/boot_error.ts";
import type { LaneListener } from "../boot/distinct.ts";
import type { LaneName } from "../ledger/lane_names.ts";
import { type Edge, type EdgeOptions, startEdge } from "./edge.ts";
import { type EdgePlan, firstGenerationNumber } from "./plan.ts";
import type { EdgeServices } from "../pipeline/services.ts";
import type { ToOwner, ToWorker } from "./worker_messages.ts";
import type { WorkerRole } from "./worker_role.ts";
import { ArmGate } from "./arm_gate.ts";
import { MirrorRelay, ownerCall } from "./mirror_relay.ts";
import { allocateShared, type SharedMemory, startMessage } from "./worker_start.ts";
import { LATE, within } from "./within.ts";
import { CarriedCounts } from "./worker_counts.ts";
import { censusOf, type Incarnation, WorkerSlot } from "./worker_slot.ts";
import { probePublic, publicWorkersBind } from "./exclusive_ports.ts";
import { WorkerRestarts } from "./worker_restarts.ts";

/**
 * Starts an edge with `plan.config.workers` public request workers beside worker 0 — or, with
 * `shared_event_loop` (or no protected lane), a plain {@link startEdge} in this isolate.
 *
 * @throws {BootError} when any worker cannot bind, another process listens on a public address,
 *   or the workers' listeners disagree
 */
export async function startWorkers(
  plan: EdgePlan<EdgeServices>,
  options: EdgeOptions,
): Promise<Edge> {
  const publicWorkers = plan.config.workers;
  if (!runsWorkers(plan.config)) return await startEdge(plan, options);
  const pool = new WorkerPool(plan, options, await Deno.readTextFile(plan.config.file));
  pool.spawnPublicWorkers();
  const edge = await pool.startOwner();
  pool.mirrorRejections(edge);
  pool.log(
    `portcullis: ${publicWorkers} public request worker${publicWorkers === 1 ? "" : "s"} and ` +
      "this isolate (protected lanes) share one ledger",
  );
  return pool.handle(edge);
}

/** How long a worker has to be armed, at boot and as a replacement. */
const ARM_WITHIN_MS = 10_000;

/**
 * Worker 0's side of a multi-worker edge: spawns the public request workers, answers what they
 * report, replaces those that die, builds each generation in all of them, and drains or closes
 * them all together.
 */
class WorkerPool {
  readonly log: (line: string) => void;
  /** Deaths and restarts, as JSON lines with their own fields. */
  readonly #events: Diagnostics;
  readonly #plan: EdgePlan<EdgeServices>;
  readonly #options: EdgeOptions;
  readonly #configText: string;
  readonly #firstNumber: number;
  readonly #shared: SharedMemory;
  readonly #gate: ArmGate;
  readonly #relay = new MirrorRelay();
  readonly #counts = new CarriedCounts();
  readonly #slots: WorkerSlot[] = [];
  /** The edge's lanes, and whether the public workers bind any of their listeners (the census). */
  readonly #lanes: readonly LaneName[];
  readonly #publicBound: boolean;
  /** Resolves once worker 0 has bound its own listeners: then the public workers may bind. */
  readonly #ownerBound = Promise.withResolvers<void>();
  /** Rejects when a worker stops before the boot is done. */
  readonly #bootLost = Promise.withResolvers<never>();
  /** Worker 0's edge, once started. */
  #edge?: Edge;
  /** Set once every worker was armed: a death from now on is replaced, not a refused boot. */
  #restarts?: WorkerRestarts;
  /** A drain or close began (or the boot failed): no worker is started again. */
  #stopRequested = false;
  #stopping?: Promise<void>;

  constructor(plan: EdgePlan<EdgeServices>, options: EdgeOptions, configText: string) {
    this.#plan = plan;
    this.#options = options;
    this.#configText = configText;
    // Worker 0 (this isolate) serves the protected lanes; workers 1 … N the public lane.
    const count = plan.config.workers + 1;
    const level = plan.config.observe.logLevel;
    this.log = options.log ?? diagnosticSink({ level });
    this.#events = diagnostics(options.log ? { level, write: options.log } : { level });
    this.#firstNumber = firstGenerationNumber(plan.runtime);
    this.#shared = allocateShared(count, this.#firstNumber);
    this.#gate = new ArmGate(count);
    this.#lanes = [...new Set(plan.lanes.map((lane) => lane.table.descriptor.name))];
    this.#publicBound = publicWorkersBind(plan);
    this.#bootLost.promise.catch(() => {});
    this.#ownerBound.promise.catch(() => {});
  }

  /** Starts workers 1 … N, each told to load the config and bind the public lane's listeners. */
  spawnPublicWorkers(): void {
    for (let index = 1; index < this.#shared.count; index++) {
      const slot = new WorkerSlot(index);
      this.#slots.push(slot);
      this.#spawn(slot);
    }
  }

  /**
   * Starts a worker in `slot` and wires its messages and its death to this pool: at boot with the
   * first generation, as a replacement with the one live now (and any being built, via the relay).
   */
  #spawn(slot: WorkerSlot): void {
    const worker = new Worker(new URL("./worker_entry.ts", import.meta.url), {
      type: "module",
      name: `portcullis-worker-${slot.index}`,
    });
    const life = slot.begin(worker);
    worker.onerror = (event) => {
      event.preventDefault();
      this.#ended(slot, life, event.message);
    };
    worker.onmessage = (event: MessageEvent<ToOwner>) => this.#receive(slot, life, event.data);
    const start = startMessage({
      plan: this.#plan,
      shared: this.#shared,
      configText: this.#configText,
      version: this.#options.version,
      firstNumber: this.#firstNumber,
      live: this.#edge?.services.config.current,
    }, slot.index);
    worker.postMessage(start);
    this.#relay.joined(slot.index, (message) => worker.postMessage(message), start.first.number);
    if (this.#restarts) {
      life.deadline = setTimeout(
        () => this.#ended(slot, life, `not armed within ${ARM_WITHIN_MS / 1000} s`),
        ARM_WITHIN_MS,
      );
    }
  }

  /**
   * A worker stopped without being asked: before boot that refuses the boot; after it, the slot's
   * restarts take over (worker_restarts.ts). Idempotent per worker (an error and a message may
   * both report one death).
   */
  #ended(slot: WorkerSlot, life: Incarnation, reason: string, reasons?: readonly string[]): void {
    if (life.ended) return;
    life.ended = true;
    clearTimeout(life.deadline);
    life.worker.terminate();
    this.#relay.lost(slot.index);
    if (this.#restarts) return this.#restarts.died(slot, reason);
    const why = reasons ?? [`Worker ${slot.index} failed: ${reason}`];
    this.#gate.fail(why);
    this.#bootLost.reject(new BootError(why));
    slot.stop();
  }

  /** Answers one message of a public worker (see worker_messages.ts). */
  async #receive(slot: WorkerSlot, life: Incarnation, message: ToOwner): Promise<void> {
    if (life.ended) return;
    const { index } = slot;
    const { worker } = life;
    const edge = this.#edge;
    if (message.type === "may-bind") {
      await this.#allowBind(life, slot);
    } else if (message.type === "listeners") {
      this.#check(slot, life, message.listeners);
    } else if (message.type === "boot-failed") {
      const reasons = message.reasons.map((reason) => `Worker ${index}: ${reason}`);
      this.#ended(slot, life, message.reasons.join("; "), reasons);
    } else if (message.type === "died") {
      this.#ended(slot, life, message.reason);
    } else if (message.type === "armed") {
      this.#armed(slot, life);
    } else if (message.type === "finished") {
      if (this.#stopRequested) slot.stop();
      else this.#ended(slot, life, "it finished unasked");
    } else if (message.type === "prepared") {
      this.#relay.prepared(index, message.number, message.problems);
    } else if (message.type === "counts") {
      if (edge) this.#counts.absorb(edge.services, index, message);
    } else if (message.type === "drain") {
      void this.drainAll();
    } else if (message.type === "call") {
      worker.postMessage(await ownerCall(edge, message.id, message.method));
    }
  }

  /** A worker may bind: at boot once worker 0 has bound its own listeners; later as restarts say. */
  async #allowBind(life: Incarnation, slot: WorkerSlot): Promise<void> {
    const send = (reasons?: readonly string[]) =>
      life.worker.postMessage({ type: "bind", reasons } satisfies ToWorker);
    if (this.#restarts) return send(await this.#restarts.mayBind(slot));
    this.#ownerBound.promise.then(() => send(), (error: Error) => send([error.message]));
  }

  /** Checks a worker's bound listeners: at boot together with all others, later against boot's. */
  #check(slot: WorkerSlot, life: Incarnation, listeners: readonly LaneListener[]): void {
    const answer = (reasons?: readonly string[]) =>
      life.worker.postMessage(reasons ? { type: "refuse", reasons } : { type: "arm" });
    if (this.#restarts) return answer(this.#restarts.check(slot, listeners));
    this.#gate.report(slot.index, listeners).then(
      () => answer(),
      (error: BootError) => answer(error.reasons),
    );
  }

  /** A worker serves: at boot one more is ready; later a replacement has taken its slot back. */
  #armed(slot: WorkerSlot, life: Incarnation): void {
    slot.armed(life, performance.now());
    this.#restarts?.armed(slot);
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
      const armed = Promise.race([
        Promise.all(this.#slots.map((slot) => slot.bootArmed)),
        this.#bootLost.promise,
      ]);
      try {
        if (await within(armed, ARM_WITHIN_MS) === LATE) {
          throw new BootError(["A request worker was not armed within 10 s"]);
        }
      } catch (error) {
        await edge.close();
        throw error;
      }
      this.#restarts = new WorkerRestarts({
        services: edge.services,
        plan: this.#plan,
        slots: this.#slots,
        gate: this.#gate,
        counts: this.#counts,
        events: this.#events,
        spawn: (slot) => this.#spawn(slot),
        stopping: () => this.#stopRequested,
      });
      return edge;
    } catch (error) {
      this.#gate.fail([(error as Error).message]);
      this.#ownerBound.reject(new Error("The boot was refused"));
      await this.#terminate();
      throw error;
    }
  }

  /** Worker 0's part: its stripe of the shared memory, and the owner's duties towards the rest. */
  #ownerRole(): WorkerRole {
    return {
      index: 0,
      ...this.#shared,
      mayBind: () => probePublic(this.#plan),
      armGate: (listeners) => {
        // Worker 0's own listeners are bound (exclusively): the public workers may bind now.
        this.#ownerBound.resolve();
        return this.#gate.report(0, listeners);
      },
      drainAll: () => this.drainAll(),
      prepareElsewhere: (generation) => this.#relay.prepareElsewhere(generation),
      census: () => censusOf(this.#lanes, this.#slots, this.#publicBound),
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
      finished: own.finished.then(() => Promise.all(this.#slots.map((slot) => slot.stopped)))
        .then(() => {}),
    };
  }

  /** Every drain — SIGTERM, POST /v1/drain, a worker's request — drains every isolate. */
  drainAll(): Promise<void> {
    const running = this.#edge;
    return running ? this.#stopAll(() => running.drain(), { type: "drain" }) : Promise.resolve();
  }

  /**
   * Stops worker 0 with `stop` and every other worker with `message`, once (idempotent): a pending
   * restart is cancelled, a replacement not armed yet is ended at once.
   */
  #stopAll(stop: () => Promise<void>, message: ToWorker): Promise<void> {
    this.#stopRequested = true;
    this.#stopping ??= (async () => {
      for (const slot of this.#slots) this.#stopSlot(slot, message);
      await Promise.all([stop(), ...this.#slots.map((slot) => slot.stopped)]);
      for (const slot of this.#slots) slot.current?.worker.terminate();
    })();
    return this.#stopping;
  }

  /** Asks one slot's worker to stop with `message`, or stops the slot when it serves none. */
  #stopSlot(slot: WorkerSlot, message: ToWorker): void {
    const life = slot.current;
    if (life && !life.ended && life.armed) return life.worker.postMessage(message);
    if (life && !life.ended) {
      // A replacement not armed yet serves nothing: it is ended here, holding nothing to wait for.
      life.ended = true;
      clearTimeout(life.deadline);
      life.worker.terminate();
      this.#relay.lost(slot.index);
      this.#edge?.services.ledger.reclaim(slot.index);
    }
    slot.stop();
  }

  /** After a failed boot: asks every worker to close, gives them 2 s, then terminates them. */
  async #terminate(): Promise<void> {
    this.#stopRequested = true;
    for (const slot of this.#slots) slot.current?.worker.postMessage({ type: "close" });
    await within(Promise.all(this.#slots.map((slot) => slot.stopped)), 2000);
    for (const slot of this.#slots) slot.current?.worker.terminate();
  }
}
