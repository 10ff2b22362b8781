/**
 * What every boot step of an edge reads: the plan, the options with their defaults resolved once
 * (log, clock), and this isolate's part in a multi-worker edge. It sits in its own module so the
 * steps (boot_steps.ts, bind_steps.ts, …) and the `Lifecycle` they feed can all read it
 * without importing edge.ts, which imports them.
 *
 * @module
 */
import { diagnosticSink } from "../observe/diag.ts";
import type { Clock } from "../ledger/ledger.ts";
import type { EdgePlan } from "./plan.ts";
import type { WorkerRole } from "./worker_role.ts";
import type { EdgeServices } from "../pipeline/services.ts";

/** Options for `startEdge`. */
export interface EdgeOptions {
  /** The version the edge reports (status pages, metrics, `Server` header). */
  readonly version: string;
  /** The clock of the ledger and the egress (tests inject one). */
  readonly clock?: Clock;
  /** Randomness for backend weights and backoff jitter (tests inject one). */
  readonly random?: () => number;
  /** Where boot and drain lines go; defaults to JSON lines on stderr (observe/diag.ts). */
  readonly log?: (line: string) => void;
  /** This isolate's part in a multi-worker edge; absent for a single isolate. */
  readonly worker?: WorkerRole;
  /** Where access-log lines go (default: stdout, in batches). */
  readonly accessLog?: (line: string) => void;
}

/** What every boot step reads: the plan, the options, and this isolate's part in the edge. */
export interface BootContext {
  readonly plan: EdgePlan<EdgeServices>;
  readonly options: EdgeOptions;
  readonly log: (line: string) => void;
  readonly clock: Clock;
  readonly worker?: WorkerRole;
  /** Alone or worker 0: owns the runtime source and writes the once-per-edge notices. */
  readonly owns: boolean;
}

/** Resolves the options' defaults once, so no step has to know them. */
export function bootContext(plan: EdgePlan<EdgeServices>, options: EdgeOptions): BootContext {
  const worker = options.worker;
  return {
    plan,
    options,
    // JSON lines on stderr at the configured level (observe/diag.ts reads each line's level).
    log: options.log ?? diagnosticSink({ level: plan.config.observe.logLevel }),
    clock: options.clock ?? (() => performance.timeOrigin + performance.now()),
    worker,
    owns: !worker || worker.index === 0,
  };
}
