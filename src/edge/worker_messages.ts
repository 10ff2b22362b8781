/**
 * The messages between worker 0 (the owner) and the other request workers. Plain data only: what
 * crosses is structured-cloned.
 *
 * @module
 */
import type { LaneListener } from "../boot/distinct.ts";
import type { GenerationSource, Rejection } from "../live/generations.ts";
import type { DescriptorLimit } from "../server/descriptors.ts";
import type { LedgerBuffers } from "../ledger/memory.ts";
import type { ConfigProblem } from "../config/problems.ts";
import type { PolicyCounts } from "../policy/policy_stats.ts";
import type { MetricCounts } from "../observe/request_metrics.ts";
import type { SharedTables } from "../policy/policy_tables.ts";
import type { StoreCounts } from "../fleet/store_counters.ts";

/** A generation as plain data: enough to rebuild it. */
export interface GenerationData {
  readonly number: number;
  readonly loadedAt: number;
  readonly hash: string;
  readonly source: GenerationSource;
  readonly dir: string;
  readonly texts: [string, string][];
  /** Worker 0's policy tables once it built this generation: every worker uses the same. */
  readonly tables?: SharedTables;
}

/** From the owner to a worker. */
export type ToWorker =
  | {
    readonly type: "start";
    readonly file: string;
    /**
     * The config file's text as the owner read it at boot: every worker, a replacement started
     * later included, runs the bootstrap config the owner runs, whatever the file says by then.
     */
    readonly configText: string;
    readonly version: string;
    readonly index: number;
    readonly count: number;
    readonly ledger: LedgerBuffers;
    readonly stats: SharedArrayBuffer;
    readonly egressChannel: string;
    readonly generation: SharedArrayBuffer;
    readonly first: GenerationData;
    /** The open-file limit the owner measured: every isolate plans with the same one. */
    readonly fileLimit?: DescriptorLimit;
  }
  | { readonly type: "arm" }
  /** The worker may bind its listeners now; with `reasons`, its boot is refused instead. */
  | { readonly type: "bind"; readonly reasons?: readonly string[] }
  | { readonly type: "refuse"; readonly reasons: readonly string[] }
  | ({ readonly type: "prepare" } & GenerationData)
  | { readonly type: "status"; readonly rejected?: Rejection; readonly superseded: boolean }
  | { readonly type: "drain" }
  | { readonly type: "close" }
  | {
    readonly type: "result";
    readonly id: number;
    readonly value?: unknown;
    readonly error?: string;
  };

/** From a worker to the owner. */
export type ToOwner =
  | { readonly type: "listeners"; readonly listeners: readonly LaneListener[] }
  | { readonly type: "boot-failed"; readonly reasons: readonly string[] }
  | { readonly type: "armed" }
  /** The worker is ready to bind its listeners and waits for `bind`. */
  | { readonly type: "may-bind" }
  /** An error nothing caught: the worker closes itself after this message. */
  | { readonly type: "died"; readonly reason: string }
  | {
    readonly type: "counts";
    readonly policy: PolicyCounts;
    readonly requests: MetricCounts;
    readonly stores?: StoreCounts;
  }
  | { readonly type: "finished" }
  | { readonly type: "prepared"; readonly number: number; readonly problems: ConfigProblem[] }
  | { readonly type: "drain" }
  | { readonly type: "call"; readonly id: number; readonly method: "reload" | "hubStatus" };
