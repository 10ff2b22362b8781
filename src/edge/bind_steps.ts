/**
 * The boot steps of an edge that bind and check its listeners, in the order `startEdge` runs
 * them: create one server object per listener this isolate binds and prove them pairwise
 * distinct, bind them one by one (with workers, once this isolate's `mayBind` allows: see
 * worker_role.ts), prove the bound addresses pairwise non-overlapping (and, with
 * workers, wait for the arm gate that checks every worker's set together), and, once armed, say
 * what listens where. Every failure closes what was bound and refuses the boot: nothing is served
 * from a listener set that was not proven.
 *
 * @module
 */
import { BootError } from "../boot/boot_error.ts";
import { checkDistinctObjects, checkListeners, type LaneListener } from "../boot/distinct.ts";
import { formatAddress } from "../config/load.ts";
import type { CertStore } from "../tls/certificates.ts";
import type { EdgeServices } from "../pipeline/services.ts";
import {
  type BindContext,
  type Bound,
  boundAddress,
  createListener,
  describeListener,
  listen,
} from "./listeners.ts";
import { bindsHere, sharesPorts } from "./worker_role.ts";
import type { BootContext } from "./boot_context.ts";
import type { Lifecycle } from "./lifecycle.ts";

/**
 * Creates this isolate's listeners, proves the server objects distinct, then binds them one by
 * one into `life.listening`; any failure closes what was bound and refuses the boot.
 */
export async function bindListeners(
  boot: BootContext,
  life: Lifecycle,
  services: EdgeServices,
): Promise<void> {
  const { plan, worker } = boot;
  const context = bindContext(boot, life, services);
  const bound: Bound[] = plan.lanes.flatMap((lane) =>
    lane.listen.flatMap((address, index) =>
      bindsHere(worker, lane.table.descriptor.name, address)
        ? [createListener(lane.table, lane.role, index, address, context)]
        : []
    )
  );
  const objectProblems = checkDistinctObjects(bound);
  if (objectProblems.length > 0) {
    await life.abandon();
    throw new BootError(objectProblems.map((p) => p.message));
  }
  try {
    // The owner proves the public addresses free of other processes; a public worker waits for it.
    await worker?.mayBind?.();
    for (const grant of bound) {
      await listen(grant, sharesPorts(worker));
      life.listening.push(grant);
    }
  } catch (error) {
    await life.abandon();
    throw error instanceof BootError ? error : new BootError([(error as Error).message]);
  }
}

/** What every listener is built with: the services, the limits, and whether the edge is armed. */
function bindContext(
  { plan }: BootContext,
  life: Lifecycle,
  services: EdgeServices,
): BindContext {
  const limits = {
    ...plan.config.timeouts,
    headerBytes: plan.config.limits.headerBytes,
    headers: plan.config.limits.headers,
    targetBytes: plan.config.limits.targetBytes,
    paths: plan.config.paths,
  };
  return {
    services,
    limits,
    armed: () => life.armed,
    tls: plan.config.tls,
    helloTimeoutMs: plan.config.passthrough?.helloTimeoutMs ?? 5000,
  };
}

/**
 * Proves the addresses actually bound pairwise non-overlapping, then (with workers) waits for the
 * arm gate, which checks every worker's set together; a refusal closes everything.
 *
 * @returns the bound listeners with their actual addresses
 */
export async function checkBound(boot: BootContext, life: Lifecycle): Promise<LaneListener[]> {
  const actual: LaneListener[] = life.listening.map((grant) => ({
    lane: grant.lane,
    role: grant.role,
    index: grant.index,
    address: boundAddress(grant),
  }));
  const overlap = checkListeners(actual);
  if (overlap.length > 0) {
    await life.abandon();
    throw new BootError(overlap.map((p) => p.message));
  }
  if (boot.worker) {
    try {
      await boot.worker.armGate(actual);
    } catch (error) {
      await life.abandon();
      throw error instanceof BootError ? error : new BootError([(error as Error).message]);
    }
  }
  return actual;
}

/** Logs one line per listener now serving, so an operator sees what is exposed where. */
export function announce(
  { log }: BootContext,
  actual: readonly LaneListener[],
  certs: CertStore | undefined,
): void {
  for (const grant of actual) {
    const tls = !grant.role && grant.lane === "public" && certs ? " (TLS)" : "";
    log(
      `portcullis: ${describeListener(grant)} listening on ${formatAddress(grant.address)}${tls}`,
    );
  }
}
