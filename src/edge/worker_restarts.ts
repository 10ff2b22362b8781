/**
 * What becomes of a public worker's slot when its worker dies after boot. The slot is never given
 * up while the edge serves: what the dead worker held in the ledger (slots, bytes, connections —
 * kept in its own stripe) is reclaimed, the counters it reported are carried for its successors
 * (worker_counts.ts), one JSON line says why it died and when the next one starts, and after the
 * slot's backoff delay (restart_backoff.ts: 100 ms doubling to 30 s) a replacement is started at
 * the same index. A replacement binds only when worker 0 allows it — at once while another public
 * worker holds the ports, else once no other process is found on them (exclusive_ports.ts) — and
 * serves only when its listener set is the one every public worker held at boot (arm_gate.ts);
 * refused, failing to boot or not armed within 10 s, it is one more death, retried later. Its
 * arming writes one JSON line too. A drain or close stops all of this: no replacement starts once
 * either began. Worker 0 runs this; workers.ts routes the replacements' messages here.
 *
 * @module
 */
import type { LaneListener } from "../boot/distinct.ts";
import type { BootError } from "../boot/boot_error.ts";
import type { Diagnostics } from "../observe/diag.ts";
import type { EdgeServices } from "../pipeline/services.ts";
import type { ArmGate } from "./arm_gate.ts";
import type { EdgePlan } from "./plan.ts";
import type { CarriedCounts } from "./worker_counts.ts";
import type { WorkerSlot } from "./worker_slot.ts";
import { probePublic } from "./exclusive_ports.ts";

/** What the restarts need from the pool of a booted edge. */
export interface RestartContext {
  /** Worker 0's services: the ledger to reclaim from, the counters to carry into. */
  readonly services: EdgeServices;
  readonly plan: EdgePlan<EdgeServices>;
  readonly slots: readonly WorkerSlot[];
  readonly gate: ArmGate;
  readonly counts: CarriedCounts;
  /** Where deaths and restarts are written, one JSON line each. */
  readonly events: Diagnostics;
  /** Starts a replacement in the slot. */
  spawn(slot: WorkerSlot): void;
  /** True once a drain or close began: nothing is started again. */
  stopping(): boolean;
}

/** Deaths and replacements of the public workers of a booted edge. */
export class WorkerRestarts {
  readonly #context: RestartContext;

  constructor(context: RestartContext) {
    this.#context = context;
  }

  /**
   * The worker in `slot` died (or a replacement failed): reclaims what it held, carries its
   * counters, and starts a replacement after the slot's delay unless the edge is stopping.
   */
  died(slot: WorkerSlot, reason: string): void {
    const { services, counts, events } = this.#context;
    const lost = services.ledger.reclaim(slot.index);
    counts.retire(services, slot.index);
    const what = `public request worker ${slot.index} stopped (${reason}); ` +
      `${lost.requests} requests and ${lost.connections} connections it held were reclaimed`;
    const fields = {
      lane: "public",
      request_worker: slot.index,
      reclaimed_requests: lost.requests,
      reclaimed_connections: lost.connections,
    };
    if (this.#context.stopping()) {
      slot.stop();
      events.error(what, fields);
      return;
    }
    const delay = slot.died(performance.now(), () => this.#context.spawn(slot));
    events.error(`${what}; restarting it in ${delay} ms`, {
      ...fields,
      delay_ms: delay,
      deaths: slot.deaths,
    });
  }

  /**
   * Whether a replacement may bind now.
   *
   * @returns undefined when it may, else the reasons to refuse its boot
   */
  async mayBind(slot: WorkerSlot): Promise<readonly string[] | undefined> {
    const { slots, plan } = this.#context;
    if (slots.some((other) => other !== slot && other.state === "live")) return undefined;
    try {
      await probePublic(plan);
      return undefined;
    } catch (error) {
      return [(error as Error).message];
    }
  }

  /**
   * Checks a replacement's bound listeners against the set every public worker held at boot.
   *
   * @returns undefined when they match, else the reasons to refuse its arming
   */
  check(slot: WorkerSlot, listeners: readonly LaneListener[]): readonly string[] | undefined {
    try {
      this.#context.gate.join(slot.index, listeners);
      return undefined;
    } catch (error) {
      return (error as BootError).reasons;
    }
  }

  /** A replacement was armed: the slot serves again. */
  armed(slot: WorkerSlot): void {
    slot.restarts++;
    this.#context.events.info(
      `public request worker ${slot.index} restarted and serving (restart ${slot.restarts})`,
      { lane: "public", request_worker: slot.index, restarts: slot.restarts },
    );
  }
}
