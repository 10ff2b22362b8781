/**
 * The one {@link EdgeServices} object every lane handler is given, gathered from what the boot
 * steps made (boot_steps.ts) and the {@link Lifecycle}. Two of its calls depend on where this
 * isolate stands in a multi-worker edge — a reload or a drain is done here by the owner, or asked
 * of the owner by a mirror — and are decided here, once, so no handler has to know.
 *
 * @module
 */
import { ResponseStats } from "../observe/response_stats.ts";
import type { Observer } from "../observe/observer.ts";
import { PolicyStats } from "../policy/policy_stats.ts";
import { PendingBackends } from "../egress/pending.ts";
import { forwardingOf } from "../proxy/forwarding.ts";
import { AddressSet } from "../request/cidr.ts";
import type { CertStore } from "../tls/certificates.ts";
import type { AdminCredential } from "../server/admin.ts";
import type { AdminGate } from "../pipeline/admin_gate.ts";
import type { ErrorPages } from "../request/error_pages.ts";
import type { EdgeServices } from "../pipeline/services.ts";
import type { BootContext } from "./boot_context.ts";
import type { Runtime } from "./boot_steps.ts";
import type { Lifecycle } from "./lifecycle.ts";
import type { WorkerRole } from "./worker_role.ts";
import type { LaneWorkers } from "../observe/worker_census.ts";
import { censusOf } from "./worker_slot.ts";

/** The parts of {@link EdgeServices} the boot steps made. */
export interface ServiceParts {
  readonly runtime: Runtime;
  readonly admin: AdminCredential;
  /** The public lane's admin gate, when configured. */
  readonly adminGate?: AdminGate;
  /** How failures read on the lanes a third party reaches (`errors`). */
  readonly errorPages: ErrorPages;
  readonly certs: CertStore | undefined;
  readonly observer: Observer;
}

/** Everything a lane handler may use, gathered into the one object every handler is given. */
export function assembleServices(
  boot: BootContext,
  life: Lifecycle,
  { runtime, admin, adminGate, errorPages, certs, observer }: ServiceParts,
): EdgeServices {
  const { plan, options, worker, clock, log } = boot;
  return {
    nodeId: plan.config.nodeId,
    version: options.version,
    startedAt: Date.now(),
    ledger: life.ledger,
    stats: new ResponseStats(worker?.stats, worker?.index),
    policyStats: new PolicyStats(),
    storeCounters: plan.fleet?.counters,
    observer,
    state: life.state,
    tenants: () => runtime.store.registry(),
    config: runtime.store,
    ...runtimeCalls(boot, runtime),
    worker: { index: worker?.index ?? 0, count: worker?.count ?? 1, census: censusFor(boot) },
    drain: () => drainEverywhere(worker, life),
    egress: life.egress,
    pending: new PendingBackends(),
    trusted: AddressSet.of(plan.config.trustedProxies),
    paths: plan.config.paths,
    forwarding: forwardingOf(plan.config.forwarding),
    clock,
    log,
    tls: certs,
    admin,
    adminGate,
    errorPages,
    files: plan.descriptors,
    emptyTenants: plan.config.emptyTenants,
    acme: plan.config.acme && {
      challengeDir: plan.config.acme.challengeDir,
      otherwise: plan.config.acme.otherwise,
    },
  };
}

/**
 * How the lanes' workers stand: the owner's count of its workers; alone, every lane is served by
 * this isolate, which is up while it answers; a mirror serves no `local_health` and counts none.
 */
function censusFor({ plan, worker }: BootContext): (() => readonly LaneWorkers[]) | undefined {
  if (worker) return worker.census;
  const alone = censusOf(
    [...new Set(plan.lanes.map((lane) => lane.table.descriptor.name))],
    [],
    false,
  );
  return () => alone;
}

/** Reload and hub status: done by the owner's source here, or asked of the owner by a mirror. */
function runtimeCalls(
  { plan, worker }: BootContext,
  { reloader, follower }: Runtime,
): Pick<EdgeServices, "reloadConfig" | "hubStatus"> {
  return {
    reloadConfig: reloader
      ? () => reloader.reload()
      : follower
      ? () => follower.pollNow()
      : worker?.owner && (() => worker.owner!.reloadConfig()),
    hubStatus: follower
      ? () => follower.status()
      : worker?.owner && plan.config.runtime.kind === "remote"
      ? () => worker.owner!.hubStatus()
      : undefined,
  };
}

/**
 * A drain asked of the services (POST /v1/drain, a signal) stops every isolate: a mirror asks the
 * owner and waits for its own end, the owner drains all workers, a lone edge drains itself.
 */
function drainEverywhere(worker: WorkerRole | undefined, life: Lifecycle): Promise<void> {
  if (worker?.owner) {
    worker.owner.drain();
    return life.finished;
  }
  if (worker?.drainAll) return worker.drainAll();
  return life.drain();
}
