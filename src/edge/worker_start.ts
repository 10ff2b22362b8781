/**
 * What a public worker is told when it starts: the memory every isolate shares (allocated once by
 * worker 0: ledger gauges and counter stripes, response counters, the live-generation pointer),
 * the config text worker 0 booted with, and the generation to begin from — the first one at boot;
 * for a replacement of a dead worker, the one live when it is spawned (a mirror can only follow
 * the shared pointer to generations it built, so starting from the first one would leave it
 * serving that one for ever).
 *
 * @module
 */
import { type LedgerBuffers, LedgerMemory } from "../ledger/memory.ts";
import type { Generation } from "../live/generations.ts";
import { ResponseStats } from "../observe/response_stats.ts";
import type { EdgeServices } from "../pipeline/services.ts";
import type { EdgePlan } from "./plan.ts";
import { generationData } from "./mirror_relay.ts";
import type { ToWorker } from "./worker_messages.ts";

/** The memory every isolate of the edge shares, allocated once by worker 0. */
export interface SharedMemory {
  readonly count: number;
  readonly ledger: LedgerBuffers;
  readonly stats: SharedArrayBuffer;
  readonly egressChannel: string;
  readonly generation: SharedArrayBuffer;
}

/** Allocates what `count` isolates share; the live generation starts at `firstNumber`. */
export function allocateShared(count: number, firstNumber: number): SharedMemory {
  const ledger = LedgerMemory.create(count, true).buffers;
  const stats = ResponseStats.allocate(count);
  const egressChannel = `portcullis-egress-${crypto.randomUUID()}`;
  const generation = new SharedArrayBuffer(4);
  Atomics.store(new Int32Array(generation), 0, firstNumber);
  return { count, ledger, stats, egressChannel, generation };
}

/** Everything {@link startMessage} needs. */
export interface StartFacts {
  readonly plan: EdgePlan<EdgeServices>;
  readonly shared: SharedMemory;
  /** The config file's text as worker 0 read it at boot. */
  readonly configText: string;
  readonly version: string;
  /** The first generation's number. */
  readonly firstNumber: number;
  /** The generation live now; undefined at boot (the plan's first one is used). */
  readonly live?: Generation;
}

/** The `start` message for public worker `index`. */
export function startMessage(facts: StartFacts, index: number): ToWorker & { type: "start" } {
  const { plan, live } = facts;
  const first = live
    ? {
      ...generationData(live, live.number, live.loadedAt),
      tables: live.registry.environment.tables.share(),
    }
    : {
      ...generationData(plan.runtime, facts.firstNumber, Date.now()),
      tables: plan.tenants.environment.tables.share(),
    };
  return {
    type: "start",
    file: plan.config.file,
    configText: facts.configText,
    version: facts.version,
    index,
    ...facts.shared,
    first,
    fileLimit: plan.descriptors?.limit,
  };
}
