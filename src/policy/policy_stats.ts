/**
 * Policy counters: live denials per phase, and dry-run would-be denials per phase and route.
 * Keys come from configuration (phases × route names), so the maps stay bounded.
 *
 * @module
 */

/** A worker's policy counters as plain data (to send to worker 0). */
export interface PolicyCounts {
  readonly denied: [string, number][];
  readonly dryRun: [string, number][];
}

/**
 * Counters of one edge's policy phase. With request workers, worker 0 also holds the latest counts
 * each other worker sent ({@link PolicyStats.absorb}) and reports the sum.
 *
 * @internal
 */
export class PolicyStats {
  readonly #denied = new Map<string, number>();
  readonly #dryRun = new Map<string, number>();
  readonly #others = new Map<number, PolicyCounts>();

  /** Counts a live denial by `phase`. */
  denied(phase: string): void {
    this.#denied.set(phase, (this.#denied.get(phase) ?? 0) + 1);
  }

  /** Counts a dry-run would-be denial by `phase` on `route`. */
  dryRun(phase: string, route: string): void {
    const key = `${phase}\n${route}`;
    this.#dryRun.set(key, (this.#dryRun.get(key) ?? 0) + 1);
  }

  /** This worker's own counts, as plain data. */
  counts(): PolicyCounts {
    return { denied: [...this.#denied], dryRun: [...this.#dryRun] };
  }

  /** Keeps the latest counts request worker `worker` sent (they replace its earlier ones). */
  absorb(worker: number, counts: PolicyCounts): void {
    this.#others.set(worker, counts);
  }

  #sum(
    own: Map<string, number>,
    pick: (c: PolicyCounts) => [string, number][],
  ): Map<string, number> {
    if (this.#others.size === 0) return own;
    const total = new Map(own);
    for (const counts of this.#others.values()) {
      for (const [key, n] of pick(counts)) total.set(key, (total.get(key) ?? 0) + n);
    }
    return total;
  }

  /** Denials by phase. */
  deniedCounts(): [phase: string, count: number][] {
    return [...this.#sum(this.#denied, (c) => c.denied)];
  }

  /** Dry-run counts by phase and route. */
  dryRunCounts(): [phase: string, route: string, count: number][] {
    return [...this.#sum(this.#dryRun, (c) => c.dryRun)].map(([key, count]) => {
      const [phase, route] = key.split("\n");
      return [phase, route, count];
    });
  }
}
