/**
 * Starting an edge. Boot order, fail closed at every step:
 *
 * 1. create one server object per configured listener, each a closure over its lane;
 * 2. prove the server objects pairwise distinct;
 * 3. bind every listener (a failure closes all of them);
 * 4. prove the bound addresses pairwise non-overlapping;
 * 5. arm: only now may a connection reach a handler (earlier ones are closed unread).
 *
 * {@link startEdge} reads as the list of boot steps, in the order they run; each step is a named
 * function in the module that holds its kind: boot_steps.ts (runtime source, credentials,
 * certificates, observer — before any listener exists), services_assembly.ts (the services every
 * handler is given), bind_steps.ts (steps 1–4 above, and the lines saying what listens where) and
 * descriptor_watch.ts (re-arming after descriptor exhaustion, once armed). What changes while the
 * edge runs, and how it drains or closes, is its {@link Lifecycle} (lifecycle.ts); what every step
 * reads is its `BootContext` (boot_context.ts).
 *
 * @module
 */
import { BootError } from "../boot/boot_error.ts";
import type { LaneListener } from "../boot/distinct.ts";
import { formatAddress } from "../config/load.ts";
import type { LaneName } from "../ledger/lane_names.ts";
import { Tracing } from "../observe/tracing.ts";
import { setRelayPacing } from "../request/relay_memory.ts";
import type { EdgeServices } from "../pipeline/services.ts";
import type { EdgePlan } from "./plan.ts";
import { bootContext, type EdgeOptions } from "./boot_context.ts";
import { Lifecycle } from "./lifecycle.ts";
import {
  createObserver,
  loadAdminGateStep,
  loadCredentials,
  loadErrorPagesStep,
  startCertificates,
  startFleet,
  startRuntime,
} from "./boot_steps.ts";
import { assembleServices } from "./services_assembly.ts";
import { announce, bindListeners, checkBound } from "./bind_steps.ts";
import { watchDescriptors } from "./descriptor_watch.ts";
import { stopWhenRevoked } from "./revocation.ts";

export type { EdgeOptions } from "./boot_context.ts";

/** A running edge. */
export interface Edge {
  /** Everything the running edge holds: ledger, config store, observer, state. */
  readonly services: EdgeServices;
  /** Every bound listener, by lane. */
  readonly listeners: readonly { lane: LaneName; address: string }[];
  /** Drains (see lifecycle.ts); resolves when every listener is closed. */
  drain(): Promise<void>;
  /** Closes every listener and connection now. */
  close(): Promise<void>;
  /** Resolves when the edge has stopped, by drain or close. */
  readonly finished: Promise<void>;
}

/**
 * Boots an edge from a plan.
 *
 * @param plan a checked plan (from `planEdge`)
 * @param options version, clock, log
 * @throws {BootError} when a listener cannot bind or the bound set is not distinct, when a
 *   credential or the bootstrap certificate cannot be loaded, or when Deno's tracing would export
 *   its own spans of requests (observe/tracing.ts)
 */
export async function startEdge(
  plan: EdgePlan<EdgeServices>,
  options: EdgeOptions,
): Promise<Edge> {
  const boot = bootContext(plan, options);
  setRelayPacing(plan.config.memory);
  const tracing = Tracing.detect(options.version);
  if (tracing.refusal) throw new BootError([tracing.refusal]);
  const life = new Lifecycle(boot);
  const runtime = startRuntime(boot, life);
  const admin = await loadCredentials(boot, life);
  const adminGate = await loadAdminGateStep(boot, life);
  const errorPages = await loadErrorPagesStep(boot, life);
  const certs = await startCertificates(boot, life);
  const observer = await createObserver(boot, tracing, runtime.lines);
  await startFleet(boot, life);
  const parts = { runtime, admin, adminGate, errorPages, certs, observer };
  const services = assembleServices(boot, life, parts);
  const source = plan.config.runtime;
  if (runtime.follower && source.kind === "remote") {
    stopWhenRevoked({
      follower: runtime.follower,
      nodeId: plan.config.nodeId,
      cacheDir: source.cacheDir,
      graceSeconds: source.hub.graceSeconds,
      drain: () => services.drain(),
      log: boot.log,
    });
  }
  await bindListeners(boot, life, services);
  const actual = await checkBound(boot, life);
  life.arm();
  life.descriptors = watchDescriptors(boot, life);
  announce(boot, actual, certs);
  return edgeHandle(life, services, actual);
}

/** The running edge as callers see it: its services, its listeners, and drain and close. */
function edgeHandle(
  life: Lifecycle,
  services: EdgeServices,
  actual: readonly LaneListener[],
): Edge {
  return {
    services,
    listeners: actual.map((grant) => ({ lane: grant.lane, address: formatAddress(grant.address) })),
    drain: () => life.drain(),
    close: () => life.close(),
    finished: life.finished,
  };
}
