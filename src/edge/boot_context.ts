/**
 * What every boot step of an edge reads: the plan, the options with their defaults resolved once
 * (log, clock), and this isolate's part in a multi-worker edge. It sits in its own module so the
 * steps (boot_steps.ts, bind_steps.ts, …) and the `Lifecycle` they feed can all read it
 * without importing edge.ts, which imports them.
 *
 * @module
 */
import { diagnostics, type LogLevel } from "../observe/access_log.ts";
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
  /** Where boot and drain lines go; defaults to stderr. */
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
    log: options.log ?? levelled(plan.config.observe.logLevel),
    clock: options.clock ?? (() => performance.timeOrigin + performance.now()),
    worker,
    owns: !worker || worker.index === 0,
  };
}

/**
 * Diagnostics on stderr at `level`: lines that say `warning:` are warnings, lines about a failure
 * or refusal are errors, boot and reload lines are info; the access log is separate (stdout).
 */
function levelled(level: LogLevel): (line: string) => void {
  const write = diagnostics(level);
  return (line) => {
    // "info:" marks a line that names a failure it recovered from (a retry absorbed it).
    if (line.includes(" info: ")) write.info(line);
    else if (line.includes(" warning: ")) write.warn(line);
    else if (/\b(failed|refused|rejected|cannot|error)\b/i.test(line)) write.error(line);
    else write.info(line);
  };
}
