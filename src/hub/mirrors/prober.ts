/**
 * The mirror prober: every interval, each enabled mirror is checked from the configured regions
 * by a {@link MirrorCheckClient}, one mirror at a time (check-host.net limits how fast a client
 * may ask, and a round of a few dozen mirrors every 15 minutes needs no parallelism). Each result
 * replaces the mirror's last; the service recomputes verdicts from them (`verdict.ts`).
 *
 * The client is an interface so the hub's tests never reach a third party: they hand the service
 * a local double. A check that fails (the service is away, the time runs out before any region
 * answered) leaves the last result in place — it ages into `unknown` after three intervals — and
 * is logged once per mirror until a check of it succeeds again.
 *
 * @module
 */
import { describeError } from "../../request/errors.ts";
import type { ProbeResult, RegionAnswer } from "./verdict.ts";
import { sleep } from "../../live/backoff.ts";

/** Checks one mirror from several regions. */
export interface MirrorCheckClient {
  /**
   * @param host the mirror's host name (checked as `https://<host>/`)
   * @param regions the regions (check-host.net node names) to check from
   * @param signal ends the check (the prober's timeout, or the hub stopping)
   * @returns each region that answered, with its word; a region that did not is absent
   */
  check(
    host: string,
    regions: readonly string[],
    signal: AbortSignal,
  ): Promise<Map<string, RegionAnswer>>;
}

/** What the prober needs. */
export interface ProberOptions {
  readonly client: MirrorCheckClient;
  readonly regions: readonly string[];
  readonly intervalMs: number;
  readonly timeoutMs: number;
  /** The hosts to check this round (the registry's enabled mirrors). */
  readonly hosts: () => readonly string[];
  /** Called after each mirror's new result. */
  readonly onResult: (host: string) => void;
  /** Called after each round, whatever its checks did (verdicts age even without results). */
  readonly onRound: () => void;
  readonly log: (line: string) => void;
  /** The clock (epoch ms); tests inject one. */
  readonly now?: () => number;
}

/** Runs probe rounds until stopped and keeps each mirror's last result. */
export class MirrorProber {
  /** The last result of each mirror, by host. */
  readonly results = new Map<string, ProbeResult>();
  readonly #options: ProberOptions;
  readonly #now: () => number;
  readonly #stop = new AbortController();
  readonly #failing = new Set<string>();
  #rounds = 0;
  #lastRound: number | undefined;
  /** Cuts the sleep between rounds short (for {@link roundNow}). */
  #wake: AbortController | undefined;
  /** Callers of {@link roundNow} waiting for the next round to end. */
  #waiting: (() => void)[] = [];

  /** @param options the client, regions, timing, and the hooks the service gives */
  constructor(options: ProberOptions) {
    this.#options = options;
    this.#now = options.now ?? Date.now;
  }

  /** Starts the rounds: the first at once, then one per interval (start to start). */
  start(): void {
    void this.#run();
  }

  /** Stops after the check in flight (which is aborted). */
  stop(): void {
    this.#stop.abort();
    for (const resolve of this.#waiting.splice(0)) resolve();
  }

  /** Runs a round now (or right after the one under way); resolves when it has ended. */
  roundNow(): Promise<void> {
    if (this.#stop.signal.aborted) return Promise.resolve();
    return new Promise((resolve) => {
      this.#waiting.push(resolve);
      this.#wake?.abort();
    });
  }

  /** Drops the results of mirrors no longer in the registry. */
  forget(keep: ReadonlySet<string>): void {
    for (const host of [...this.results.keys()]) if (!keep.has(host)) this.results.delete(host);
  }

  /** The prober's state for status. */
  status(): Record<string, unknown> {
    return {
      rounds: this.#rounds,
      last_round_at: this.#lastRound === undefined ? null : new Date(this.#lastRound).toISOString(),
      failing: [...this.#failing].sort(),
    };
  }

  async #run(): Promise<void> {
    const stop = this.#stop.signal;
    while (!stop.aborted) {
      const started = Date.now(); // scheduling runs on real time, results on the clock
      const waiting = this.#waiting.splice(0);
      for (const host of this.#options.hosts()) {
        if (stop.aborted) break;
        await this.#checkOne(host);
      }
      this.#rounds++;
      this.#lastRound = this.#now();
      this.#options.onRound();
      for (const resolve of waiting) resolve();
      if (this.#waiting.length > 0) continue;
      this.#wake = new AbortController();
      const rest = Math.max(0, this.#options.intervalMs - (Date.now() - started));
      await sleep(rest, AbortSignal.any([stop, this.#wake.signal]));
    }
  }

  /** One mirror's check, within the timeout; its result replaces the last one. */
  async #checkOne(host: string): Promise<void> {
    const { client, regions, timeoutMs, log, onResult } = this.#options;
    const signal = AbortSignal.any([this.#stop.signal, AbortSignal.timeout(timeoutMs)]);
    try {
      const answers = await client.check(host, regions, signal);
      if (this.#stop.signal.aborted) return;
      if (answers.size === 0) throw new Error("no region answered in time");
      this.results.set(host, { at: this.#now(), regions: new Map(answers) });
      if (this.#failing.delete(host)) log(`portcullis: hub doors: probing ${host} works again`);
      onResult(host);
    } catch (error) {
      if (this.#stop.signal.aborted || this.#failing.has(host)) return;
      this.#failing.add(host);
      log(`portcullis: hub doors: probing ${host} failed: ${describeError(error)}`);
    }
  }
}
