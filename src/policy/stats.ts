/**
 * Policy counters: live denials per phase, and dry-run would-be denials per phase and route.
 * Keys come from configuration (phases × route names), so the maps stay bounded.
 *
 * @module
 */

/** Counters of one edge's policy phase. */
export class PolicyStats {
  readonly #denied = new Map<string, number>();
  readonly #dryRun = new Map<string, number>();

  /** Counts a live denial by `phase`. */
  denied(phase: string): void {
    this.#denied.set(phase, (this.#denied.get(phase) ?? 0) + 1);
  }

  /** Counts a dry-run would-be denial by `phase` on `route`. */
  dryRun(phase: string, route: string): void {
    const key = `${phase}\n${route}`;
    this.#dryRun.set(key, (this.#dryRun.get(key) ?? 0) + 1);
  }

  /** Denials by phase. */
  deniedCounts(): [phase: string, count: number][] {
    return [...this.#denied];
  }

  /** Dry-run counts by phase and route. */
  dryRunCounts(): [phase: string, route: string, count: number][] {
    return [...this.#dryRun].map(([key, count]) => {
      const [phase, route] = key.split("\n");
      return [phase, route, count];
    });
  }
}
