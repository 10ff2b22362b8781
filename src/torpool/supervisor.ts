/**
 * The Tor pool supervisor: keeps between `min_instances` and `max_instances` Tor processes
 * running, instance i always on `socks_base_port + i` / `control_base_port + i`, so a carrier's
 * backend list does not churn when an instance dies and comes back.
 *
 * One timer drives everything, every {@link Timings.tickMs}: each running instance's SOCKS check
 * and control probe when due, and its respawn when it died (`lifecycle.ts`; the states and when an
 * instance is dead are in `instance.ts`), then the scaler, then the instance count against the
 * limits. Timers are unref'd and cleared by {@link TorPool.stop}; all state is in the pool object.
 *
 * @module
 */
import { describeError } from "../request/errors.ts";
import { type ClientAuthEntry, ClientAuthKeys, readClientAuthDir } from "./client_auth.ts";
import type { PoolConfig } from "./config.ts";
import { type Timings, timingsOf, TorInstance } from "./instance.ts";
import { Lifecycle } from "./lifecycle.ts";
import { mayRemoveLast, Scaler } from "./scaler.ts";
import { instancePaths, instancePorts } from "./torrc.ts";
import { TaskGroup } from "./tasks.ts";
import { type Backend, backendsOf, healthOf, type PoolHealth, poolStats } from "./views.ts";

/** How a pool is run. */
export interface PoolOptions {
  /** Where event lines go (default: stderr, prefixed); never given a key. */
  readonly log?: (line: string) => void;
  /** The clock (ms) for states and scaling; default `Date.now`. */
  readonly now?: () => number;
  /** The process Tor watches (`__OwningControllerProcess`); default this one. */
  readonly ownerPid?: number;
}

/** What a carrier reports about one SOCKS port. */
export interface PortLoad {
  /** Streams open through the port now. */
  readonly active: number;
  readonly latencyMs?: number;
  /** The stream failed because of the instance (not the destination). */
  readonly error?: boolean;
}

/**
 * A running pool. Start one with {@link TorPool.start}.
 *
 * @internal
 */
export class TorPool {
  readonly config: PoolConfig;
  readonly timings: Timings;
  readonly #instances: TorInstance[] = [];
  readonly #scaler: Scaler;
  readonly #log: (line: string) => void;
  readonly #now: () => number;
  readonly #tasks: TaskGroup;
  readonly #lives: Lifecycle;
  readonly #counters = { spawns: 0, deaths: 0, scaleUps: 0, scaleDowns: 0, leftoversEnded: 0 };
  readonly #clientAuth = new ClientAuthKeys();
  #limits: { min: number; max: number };
  #timer: ReturnType<typeof setTimeout> | undefined;

  private constructor(config: PoolConfig, options: PoolOptions) {
    this.config = config;
    this.timings = timingsOf(config);
    this.#limits = { min: config.minInstances, max: config.maxInstances };
    this.#scaler = new Scaler({
      upThreshold: config.scaleUpThreshold,
      downThreshold: config.scaleDownThreshold,
      upAfterMs: config.probeIntervalMs,
      cooldownMs: config.scaleCooldownMs,
    });
    this.#log = options.log ?? ((line) => console.error(`portcullis: torpool: ${line}`));
    this.#now = options.now ?? Date.now;
    this.#tasks = new TaskGroup((error) => this.#log(`internal: ${describeError(error)}`));
    this.#lives = new Lifecycle({
      config,
      timings: this.timings,
      tasks: this.#tasks,
      clientAuth: this.#clientAuth,
      counters: this.#counters,
      log: this.#log,
      now: this.#now,
      ownerPid: options.ownerPid ?? Deno.pid,
    });
  }

  /** Spawns `min_instances` instances and starts supervising them. */
  static start(config: PoolConfig, options: PoolOptions = {}): TorPool {
    const pool = new TorPool(config, options);
    pool.#reconcile();
    pool.#schedule();
    return pool;
  }

  /** The instances' current minimum and maximum. */
  get limits(): { readonly min: number; readonly max: number } {
    return { ...this.#limits };
  }

  /**
   * Records a carrier's load on one SOCKS port (absolute active streams, not a delta).
   *
   * @returns false when no instance of the pool listens on `port`
   */
  report(port: number, load: PortLoad): boolean {
    const instance = this.#instances.find((i) => i.ports.socks === port);
    if (!instance || !Number.isFinite(load.active) || load.active < 0) return false;
    instance.reported(load);
    return true;
  }

  /** The live (ready) SOCKS ports, with latency and error counts. */
  backends(): Backend[] {
    return backendsOf(this.#instances, this.config.listen);
  }

  /** The pool's state: ok, degraded or down, live count, bootstrap progress. */
  health(): PoolHealth {
    return healthOf(this.#instances, this.#limits);
  }

  /** Everything the pool knows, for `/stats`. */
  stats(): ReturnType<typeof poolStats> {
    return poolStats(this.#instances, {
      now: this.#now(),
      limits: this.#limits,
      busyStreams: this.config.busyStreams,
      scaler: this.#scaler.marks,
      timings: this.timings,
      counters: this.#counters,
    });
  }

  /**
   * Overrides the instance limits; instances are added or removed at once to fit.
   *
   * @throws {RangeError} when a limit is not a whole number from 1 to `max_instances`, or min > max
   */
  scale(override: { readonly min?: number; readonly max?: number }): { min: number; max: number } {
    const { min = this.#limits.min, max = this.#limits.max } = override;
    const top = this.config.maxInstances;
    for (const [name, value] of [["min", min], ["max", max]] as const) {
      if (!Number.isInteger(value) || value < 1 || value > top) {
        throw new RangeError(
          `Cannot scale: ${name} ${value} is not a whole number from 1 to ${top}`,
        );
      }
    }
    if (min > max) throw new RangeError(`Cannot scale: min ${min} is above max ${max}`);
    this.#limits = { min, max };
    this.#log(`limits set to min ${min}, max ${max}`);
    this.#reconcile();
    return { min, max };
  }

  /**
   * Writes the onion client keys into every instance's `ClientOnionAuthDir` (and into each one
   * spawned later), then asks running instances to reload. Keys are never logged.
   *
   * @throws {TypeError} naming the onion of a bad entry (never its key)
   */
  async setClientAuth(entries: readonly ClientAuthEntry[]): Promise<void> {
    this.#clientAuth.replace(entries);
    const instances = [...this.#instances];
    await Promise.all(instances.map((i) => this.#clientAuth.write(i.paths.onionAuthDir)));
    for (const instance of instances) instance.reload();
    this.#log(
      `client auth: ${this.#clientAuth.size} onion key(s) in ${instances.length} instance(s)`,
    );
  }

  /** Reads `client_auth_dir` (when configured) and installs its keys (see {@link setClientAuth}). */
  async loadClientAuth(): Promise<void> {
    if (this.config.clientAuthDir === undefined) return;
    await this.setClientAuth(await readClientAuthDir(this.config.clientAuthDir));
  }

  /** Kills every instance and stops every timer; resolves when all processes have exited. */
  async stop(): Promise<void> {
    if (this.#tasks.stopped) return;
    this.#tasks.stop();
    clearTimeout(this.#timer);
    await Promise.all(this.#instances.map((i) => i.kill()));
    await this.#tasks.settled();
    await this.#clientAuth.settled();
  }

  #schedule(): void {
    if (this.#tasks.stopped) return;
    const timer = setTimeout(() => {
      this.#tick();
      this.#schedule();
    }, this.timings.tickMs);
    Deno.unrefTimer(timer);
    this.#timer = timer;
  }

  #tick(): void {
    const now = this.#now();
    for (const instance of this.#instances) this.#lives.check(instance, now);
    this.#autoscale(now);
    this.#reconcile();
  }

  #autoscale(now: number): void {
    const live = this.#instances.filter((i) => i.state === "ready");
    const step = this.#scaler.decide({
      now,
      live: live.length,
      busy: live.filter((i) => i.active >= this.config.busyStreams).length,
      count: this.#instances.length,
      ...this.#limits,
    });
    if (step === "up") {
      this.#counters.scaleUps++;
      this.#log(
        `scale up: ${live.length} live, busy fraction at or above ` +
          `${this.config.scaleUpThreshold} for ${this.config.probeIntervalMs} ms`,
      );
      this.#add();
    } else if (step === "down") {
      if (!mayRemoveLast(this.#instances.map((i) => i.state))) return;
      this.#counters.scaleDowns++;
      this.#log(
        `scale down: busy fraction below ${this.config.scaleDownThreshold} for ` +
          `${this.config.scaleCooldownMs} ms`,
      );
      this.#removeLast();
    }
  }

  /** Brings the instance count within the limits (never removing the last live instance). */
  #reconcile(): void {
    if (this.#tasks.stopped) return;
    while (this.#instances.length < this.#limits.min) this.#add();
    while (
      this.#instances.length > this.#limits.max &&
      mayRemoveLast(this.#instances.map((i) => i.state))
    ) this.#removeLast();
  }

  #add(): void {
    const index = this.#instances.length;
    const instance = new TorInstance(
      index,
      instancePorts(this.config, index),
      instancePaths(this.config, index),
    );
    this.#instances.push(instance);
    this.#tasks.track(this.#lives.revive(instance));
  }

  #removeLast(): void {
    const instance = this.#instances.pop();
    if (!instance) return;
    instance.removed = true;
    this.#log(`instance ${instance.index} removed (SOCKS ${instance.ports.socks})`);
    this.#tasks.track(instance.kill());
  }
}
