/**
 * The runtime objects of one running edge, created at boot and handed to the lanes' pipelines,
 * grouped by who uses them. No module-level state: two edges in one process do not share anything.
 *
 * @module
 */
import type { ConfigStore, OfferOutcome } from "../live/generations.ts";
import type { EmptyTenants } from "../live/readiness.ts";
import type { ResponseStats } from "../observe/response_stats.ts";
import type { StoreCounters } from "../fleet/store_counters.ts";
import type { PolicyStats } from "../policy/policy_stats.ts";
import type { Observer } from "../observe/observer.ts";
import type { AddressSet } from "../request/cidr.ts";
import type { CertStore } from "../tls/certificates.ts";
import type { DescriptorPlan } from "../server/descriptors.ts";
import type { PipelineServices } from "./runner.ts";
import type { DataplaneServices } from "./tenant_phases.ts";
import type { AdminCredential } from "../server/admin.ts";
import type { LaneWorkers } from "../observe/worker_census.ts";

/** Lifecycle flags of a running edge. */
export interface EdgeState {
  /** Every lane is bound, checked and accepting; false again from the moment a drain begins. */
  ready: boolean;
  /** A drain has begun: health reports it, first while the public lane still admits (lame duck). */
  draining: boolean;
  /** Public admission has stopped; the edge exits when in-flight public work is done. */
  admissionStopped: boolean;
}

/**
 * Who this edge is, for status pages and metrics.
 *
 * @internal
 */
export interface NodeIdentity {
  readonly nodeId: string;
  readonly version: string;
  /** Wall-clock start time (ms since the epoch). */
  readonly startedAt: number;
  /**
   * Which request worker this is (0 when there is one), and how many there are; alone or worker 0,
   * also how each lane's workers stand now (readiness and `/v1/health` read it).
   */
  readonly worker: {
    readonly index: number;
    readonly count: number;
    readonly census?: () => readonly LaneWorkers[];
  };
}

/**
 * What the operator's routes act on (the `local_health` lane): config, certificates, drain.
 *
 * @internal
 */
export interface OperatorServices {
  /** The live configuration generation and the last rejected one. */
  readonly config: ConfigStore;
  /** Reloads the runtime config now: the folder (local mode), or a fresh poll of the hub. */
  readonly reloadConfig?: () => Promise<OfferOutcome>;
  /** Remote mode: the hub connection's state, for `/v1/config`. */
  readonly hubStatus?: () => Record<string, unknown> | Promise<Record<string, unknown>>;
  /** Starts draining (idempotent); resolves when the edge has stopped. */
  drain(): Promise<void>;
  /** The public lane's certificates, when it has TLS. */
  readonly tls?: CertStore;
  /** Who may act through `local_health` (drain, reloads). */
  readonly admin: AdminCredential;
  /** The open-file limit measured at boot and the public lane's share; absent when unknown. */
  readonly files?: DescriptorPlan;
  /** What readiness says of a live set with no tenant (`readiness.empty_tenants`; default not ready). */
  readonly emptyTenants?: EmptyTenants;
}

/**
 * The ACME http-01 companion listener's settings (the public lane with ACME).
 *
 * @internal
 */
export interface AcmeServices {
  /** The challenge folder, and what everything else gets. */
  readonly acme?: { readonly challengeDir: string; readonly otherwise: "404" | "redirect" };
}

/**
 * Everything a running edge has, in one object the edge builds once. Each lane is typed by the
 * part it uses (lanes/): the runner by {@link PipelineServices}, the tenant phases by
 * {@link DataplaneServices}, the operator's lane by all of it.
 */
export interface EdgeServices
  extends PipelineServices, DataplaneServices, NodeIdentity, OperatorServices, AcmeServices {
  /** Responses counted by status class and cut-off reason. */
  readonly stats: ResponseStats;
  /** Policy denials and dry-run would-be denials. */
  readonly policyStats: PolicyStats;
  /** The fleet stores' counters (this isolate's, and worker 0's sum of every worker's). */
  readonly storeCounters?: StoreCounters;
  /** Per-request metrics, the access log and traces. */
  readonly observer: Observer;
  /** Whether the edge is draining. */
  readonly state: EdgeState;
  /** Peers whose X-Forwarded-For is believed (required here: the runner's is optional). */
  readonly trusted: AddressSet;
}
