/**
 * The public ports of a multi-worker edge belong to this process alone. The public workers bind
 * them with `SO_REUSEPORT`, which lets any process of the same user bind beside them — a second
 * `serve` of the same config did, said `ready`, and the kernel split users between the two
 * (issue 31). So, before any public worker binds (and before a replacement binds while no public
 * worker holds the ports), worker 0 binds each public TCP address once without port sharing and
 * closes it again ({@link probePublic}): another process listening there makes the boot fail,
 * naming the address.
 *
 * The probe alone leaves a window: two processes started at once may both probe before either
 * binds. Worker 0 closes it where it can: it binds its own listeners (the protected lanes, every
 * Unix socket) exclusively, and lets the public workers bind only after that, so of two processes
 * on one config only one gets past that bind. An edge with no protected TCP or Unix listener (only
 * `public`, `workers: 2` or more) keeps the window between its probe and its public workers' binds
 * — milliseconds, most of them a message to each worker; two such processes started in the same
 * moment may both serve. A process of another user can never join (the kernel refuses
 * `SO_REUSEPORT` across users).
 *
 * @module
 */
import type { EdgeServices } from "../pipeline/services.ts";
import type { EdgePlan } from "./plan.ts";
import { probeListener } from "./listeners.ts";
import { bindsHere } from "./worker_role.ts";

/** Any public worker: they all bind the same listeners. */
const PUBLIC_WORKER = { index: 1 };

/**
 * Proves that no other process listens on any address the public workers bind.
 *
 * @throws {Error} `Cannot bind lane "public" on 127.0.0.1:8080: address already in use by another
 *   process` (or another bind reason) for the first address found taken
 */
export async function probePublic(plan: EdgePlan<EdgeServices>): Promise<void> {
  for (const lane of plan.lanes) {
    const name = lane.table.descriptor.name;
    const role = lane.role === "serve" ? undefined : lane.role;
    for (const address of lane.listen) {
      if (bindsHere(PUBLIC_WORKER, name, address)) {
        await probeListener({ lane: name, role, address });
      }
    }
  }
}

/** True when the public workers bind any listener of `plan` (else worker 0 serves every lane). */
export function publicWorkersBind(plan: EdgePlan<EdgeServices>): boolean {
  return plan.lanes.some((lane) =>
    lane.listen.some((address) => bindsHere(PUBLIC_WORKER, lane.table.descriptor.name, address))
  );
}
