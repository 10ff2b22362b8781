/**
 * What one isolate of a multi-worker edge is told at start: its stripe of the shared ledger and
 * response counters, whether it owns the runtime source (the folder watch or the hub stream — the
 * first worker does; the others mirror its generations), whether it binds the Unix-socket
 * listeners (only one socket can own a path), and how it asks the owner for what only the owner
 * can do.
 *
 * @module
 */
import type { LaneListener } from "../boot/distinct.ts";
import type { Generation, OfferOutcome } from "../live/generations.ts";
import type { ConfigProblem } from "../config/problems.ts";
import type { LedgerBuffers } from "../ledger/memory.ts";
import type { LaneName } from "../ledger/lane_names.ts";
import type { ListenerAddress } from "../config/load.ts";
import type { LaneWorkers } from "../observe/worker_census.ts";

/** The owner's side of what a mirror may ask for. */
export interface OwnerCalls {
  reloadConfig(): Promise<OfferOutcome>;
  hubStatus(): Promise<Record<string, unknown>>;
  /** Starts the drain of every worker. */
  drain(): void;
}

/**
 * One worker's part in a multi-worker edge.
 *
 * @internal
 */
export interface WorkerRole {
  /** 0 … count − 1; worker 0 owns the runtime source and the Unix sockets. */
  readonly index: number;
  readonly count: number;
  readonly ledger: LedgerBuffers;
  readonly stats: SharedArrayBuffer;
  /** The live generation's number, shared (`Int32Array(1)`). */
  readonly generation: SharedArrayBuffer;
  /** The owner: builds a generation in every other worker before switching to it. */
  readonly prepareElsewhere?: (generation: Generation) => Promise<ConfigProblem[]>;
  /** The `BroadcastChannel` on which the workers share egress outcomes. */
  readonly egressChannel: string;
  /** The first generation's number and load time, as the owner has them. */
  readonly first?: { readonly number: number; readonly loadedAt: number };
  /**
   * Resolves once every worker's bound listeners are checked together (this worker's are given);
   * rejects, with the reasons, to refuse the boot. Nothing is served before it resolves.
   */
  armGate(listeners: readonly LaneListener[]): Promise<void>;
  /**
   * Resolves when this worker may bind its listeners; rejects, with the reasons, to refuse the
   * boot. The owner first proves that no other process listens on the public workers' addresses
   * (they bind with `reusePort`, which any process of the same user could join); a public worker
   * waits until the owner has bound its own listeners (an exclusive bind: of two processes started
   * at once, only one gets past it) or, when it replaces a dead worker, until the owner allows it.
   */
  readonly mayBind?: () => Promise<void>;
  /** Mirrors: the owner's calls. */
  readonly owner?: OwnerCalls;
  /** The owner: drains every worker (a drain asked of this isolate alone would leave them up). */
  readonly drainAll?: () => Promise<void>;
  /** The owner: how each lane's workers stand now (readiness, `/v1/health`, `/metrics`). */
  readonly census?: () => readonly LaneWorkers[];
}

/**
 * Which listeners an isolate binds. Alone, all of them. With request workers, worker 0 binds the
 * protected lanes (`local_health`, `provider_health`) and every Unix socket (one socket per path),
 * so a flooded public event loop can never delay a health probe; workers 1 … N bind the public
 * lane's TCP listeners, all of them, with `reusePort`.
 */
export function bindsHere(
  worker: Pick<WorkerRole, "index"> | undefined,
  lane: LaneName,
  address: ListenerAddress,
): boolean {
  if (!worker) return true;
  if (worker.index === 0) return lane !== "public" || address.kind === "unix";
  return lane === "public" && address.kind === "tcp";
}

/**
 * Whether this isolate binds its TCP listeners with `reusePort`: only the public workers, which
 * share every public address. Worker 0 and a lone edge bind exclusively, so a second process on
 * the same ports fails to bind there.
 */
export function sharesPorts(worker: Pick<WorkerRole, "index"> | undefined): boolean {
  return worker !== undefined && worker.index > 0;
}
