/**
 * The arm gate of a multi-worker edge: nothing is served before every worker has bound its
 * listeners and the sets were checked together. Worker 0 must hold only protected-lane and Unix
 * listeners, and each public worker exactly the public TCP listeners worker 1 holds (same lane,
 * role and index for each address): a protected listener in a public worker would put health
 * probes behind a flooded public event loop (worker_role.ts), and sets that differ between public
 * workers would leave some addresses to fewer isolates than others. A replacement for a worker
 * that died after boot is checked the same way against the set every public worker held at boot
 * ({@link ArmGate.join}): one that binds a different set is refused, and started again later. The
 * checks themselves are pure functions ({@link compareWorkers}, {@link compareJoin}), so tests
 * feed them sets without starting workers.
 *
 * @module
 */
import type { LaneListener } from "../boot/distinct.ts";
import { BootError } from "../boot/boot_error.ts";
import { formatAddress } from "../config/load.ts";
import { describeListener } from "./listeners.ts";

/**
 * Holds every worker's arming until all have bound, then checks the sets together: each worker
 * must hold worker 0's TCP listeners exactly (same lane, role and index for each address).
 */
export class ArmGate {
  readonly #count: number;
  readonly #reports = new Map<number, readonly LaneListener[]>();
  readonly #decided: Promise<void>;
  #resolve!: () => void;
  #reject!: (error: BootError) => void;
  #failed = false;
  /** The public workers' set once the boot's check passed: what a replacement must hold. */
  #accepted?: readonly LaneListener[];

  /** @param count how many workers report, worker 0 included */
  constructor(count: number) {
    this.#count = count;
    this.#decided = new Promise((resolve, reject) => {
      this.#resolve = resolve;
      this.#reject = reject;
    });
    this.#decided.catch(() => {});
  }

  /**
   * Records worker `index`'s bound listeners; the last report decides.
   *
   * @returns resolves when every set agrees, rejects with a {@link BootError} naming why not
   */
  report(index: number, listeners: readonly LaneListener[]): Promise<void> {
    this.#reports.set(index, listeners);
    if (this.#reports.size === this.#count && !this.#failed) {
      const reasons = compareWorkers(this.#reports);
      if (reasons.length > 0) this.fail(reasons);
      else {
        this.#accepted = this.#reports.get(1) ?? [];
        this.#resolve();
      }
    }
    return this.#decided;
  }

  /**
   * Checks the set a replacement for public worker `index` bound after boot against the set every
   * public worker held at boot.
   *
   * @throws {BootError} naming every difference, or saying the boot never passed its check
   */
  join(index: number, listeners: readonly LaneListener[]): void {
    if (!this.#accepted) throw new BootError([`Worker ${index} joined before the boot was armed`]);
    const reasons = compareJoin(index, listeners, this.#accepted);
    if (reasons.length > 0) throw new BootError(reasons);
  }

  /** Refuses every worker's arming with `reasons` (only the first failure counts). */
  fail(reasons: readonly string[]): void {
    if (this.#failed) return;
    this.#failed = true;
    this.#reject(new BootError(reasons));
  }
}

/**
 * One listener of one worker, as the workers' sets are compared and as a refusal names it:
 * `lane "public" listener 0 on 127.0.0.1:8080`.
 */
function describeWorkerListener(listener: LaneListener): string {
  return `${describeListener(listener)} listener ${listener.index} on ${
    formatAddress(listener.address)
  }`;
}

/**
 * Reasons the workers' listener sets are wrong; empty when worker 0 holds only protected-lane and
 * Unix listeners and every public worker holds exactly the same public TCP listeners.
 */
export function compareWorkers(reports: ReadonlyMap<number, readonly LaneListener[]>): string[] {
  const reasons: string[] = [];
  for (const listener of reports.get(0) ?? []) {
    if (listener.lane === "public" && listener.address.kind === "tcp") {
      reasons.push(`Worker 0 bound ${describeWorkerListener(listener)}; the public workers own it`);
    }
  }
  const reference = reports.get(1) ?? [];
  for (const [index, listeners] of reports) {
    if (index === 0) continue;
    reasons.push(...onlyPublic(index, listeners));
    if (index !== 1) reasons.push(...differences(index, listeners, reference, "worker 1"));
  }
  return reasons;
}

/**
 * Reasons a replacement for public worker `index` may not serve; empty when it holds only public
 * TCP listeners, exactly the set every public worker held at boot (`accepted`).
 */
export function compareJoin(
  index: number,
  listeners: readonly LaneListener[],
  accepted: readonly LaneListener[],
): string[] {
  return [
    ...onlyPublic(index, listeners),
    ...differences(index, listeners, accepted, "the public workers at boot"),
  ];
}

/** A public worker's listeners that are not public TCP listeners (worker 0's alone). */
function onlyPublic(index: number, listeners: readonly LaneListener[]): string[] {
  return listeners.filter((listener) =>
    listener.lane !== "public" || listener.address.kind !== "tcp"
  )
    .map((listener) =>
      `Worker ${index} bound ${describeWorkerListener(listener)}; only worker 0 may`
    );
}

/** How worker `index`'s set differs from `reference` (named `referenceName`), both ways. */
function differences(
  index: number,
  listeners: readonly LaneListener[],
  reference: readonly LaneListener[],
  referenceName: string,
): string[] {
  const reasons: string[] = [];
  const theirs = new Set(reference.map(describeWorkerListener));
  const mine = new Set(listeners.map(describeWorkerListener));
  for (const item of mine) {
    if (!theirs.has(item)) reasons.push(`Worker ${index} bound ${item}; ${referenceName} did not`);
  }
  for (const item of theirs) {
    if (!mine.has(item)) reasons.push(`Worker ${index} did not bind ${item}`);
  }
  return reasons;
}
