/**
 * The life of each instance: its checks when due — a SOCKS check four times per `dead_refusal_ms`,
 * a control probe every probe interval (quicker while it starts) — the verdict `dead` they lead to
 * (see `instance.ts`), and the next life on the same ports. A dead instance is killed (SIGTERM,
 * then SIGKILL) and respawned after a wait that doubles from 100 ms to 30 s while it keeps dying
 * before it is ready. A check's result counts only for the life it was made on.
 *
 * @module
 */
import { describeError } from "../request/errors.ts";
import type { ClientAuthKeys } from "./client_auth.ts";
import type { PoolConfig } from "./config.ts";
import type { Timings, TorInstance } from "./instance.ts";
import { checkSocks, probeTor } from "./probe.ts";
import type { TaskGroup } from "./tasks.ts";
import { prepareInstance, torArgs } from "./torrc.ts";

const RESPAWN_FIRST_MS = 100;
const RESPAWN_MAX_MS = 30_000;

/** What the lifecycle works with: the pool's config, clock, log, tasks, keys and counters. */
export interface LifecycleDeps {
  readonly config: PoolConfig;
  readonly timings: Timings;
  readonly tasks: TaskGroup;
  readonly clientAuth: ClientAuthKeys;
  readonly counters: { spawns: number; deaths: number };
  readonly log: (line: string) => void;
  readonly now: () => number;
  /** The process Tor watches (`__OwningControllerProcess`). */
  readonly ownerPid: number;
}

/** Checks, verdicts and respawns for every instance of one pool. */
export class Lifecycle {
  readonly #deps: LifecycleDeps;

  constructor(deps: LifecycleDeps) {
    this.#deps = deps;
  }

  /** Starts the checks that are due on a running instance (each at most once at a time). */
  check(instance: TorInstance, now: number): void {
    if (instance.state === "dead" || instance.pending) return;
    if (!instance.checkingSocks && now >= instance.nextSocksCheckAt) this.#checkSocks(instance);
    if (!instance.probing && now >= instance.nextProbeAt) this.#probe(instance);
  }

  #probe(instance: TorInstance): void {
    const { life } = instance;
    const started = this.#deps.now();
    instance.probing = true;
    const probe = probeTor({
      host: this.#deps.config.listen,
      port: instance.ports.control,
      cookieFile: instance.paths.cookie,
      timeoutMs: this.#deps.timings.probeTimeoutMs,
    });
    this.#deps.tasks.track(
      probe.then(
        (status) => {
          if (!this.#current(instance, life)) return;
          const before = `${instance.state} ${instance.progress}`;
          instance.probed(status, this.#deps.now(), this.#deps.timings);
          if (`${instance.state} ${instance.progress}` !== before) {
            this.#deps.log(
              `instance ${instance.index} ${instance.state} ${instance.progress}%` +
                (instance.summary ? ` (${instance.summary})` : ""),
            );
          }
        },
        (error) => {
          if (!this.#current(instance, life)) return;
          const dead = instance.probeFailed(started, this.#deps.now(), this.#deps.timings);
          if (dead) this.#declareDead(instance, `${dead} (${describeError(error)})`);
        },
      ).finally(() => instance.probing = false),
    );
  }

  #checkSocks(instance: TorInstance): void {
    const { life } = instance;
    instance.checkingSocks = true;
    const check = checkSocks(
      this.#deps.config.listen,
      instance.ports.socks,
      this.#deps.timings.socksCheckMs,
    );
    this.#deps.tasks.track(
      check.then((result) => {
        if (!this.#current(instance, life)) return;
        const dead = instance.socksChecked(result, this.#deps.now(), this.#deps.timings);
        if (dead) this.#declareDead(instance, dead);
      }).finally(() => instance.checkingSocks = false),
    );
  }

  /** True while `life` is the instance's running life and the pool runs. */
  #current(instance: TorInstance, life: number): boolean {
    return !this.#deps.tasks.stopped && instance.life === life && !instance.pending &&
      instance.state !== "dead";
  }

  #declareDead(instance: TorInstance, reason: string): void {
    if (instance.state === "dead" || instance.pending || this.#deps.tasks.stopped) return;
    instance.died(reason, this.#deps.now());
    this.#deps.counters.deaths++;
    const said = instance.tail.at(-1);
    this.#deps.log(
      `instance ${instance.index} dead: ${reason}` + (said ? `; last said: ${said}` : ""),
    );
    this.#deps.tasks.track(this.revive(instance));
  }

  /** Kills what is left of an instance and spawns its next life on the same ports. */
  async revive(instance: TorInstance): Promise<void> {
    instance.pending = true;
    await instance.kill();
    while (!this.#deps.tasks.stopped && !instance.removed) {
      const deaths = instance.deathsBeforeReady;
      if (deaths > 0) {
        await this.#deps.tasks.sleep(
          Math.min(RESPAWN_MAX_MS, RESPAWN_FIRST_MS * 2 ** Math.min(deaths - 1, 9)),
        );
        if (this.#deps.tasks.stopped || instance.removed) break;
      }
      try {
        const paths = await prepareInstance(this.#deps.config, instance.index, this.#deps.ownerPid);
        await this.#deps.clientAuth.write(paths.onionAuthDir);
        if (this.#deps.tasks.stopped || instance.removed) break;
        instance.spawn(
          { binary: this.#deps.config.torBinary, args: torArgs(paths) },
          this.#deps.now(),
          (life, status) => this.#exited(instance, life, status),
        );
        this.#deps.counters.spawns++;
        this.#deps.log(
          `instance ${instance.index} spawned (life ${instance.life}, pid ${instance.pid})` +
            ` on SOCKS ${instance.ports.socks}, control ${instance.ports.control}`,
        );
        break;
      } catch (error) {
        instance.died(`cannot spawn: ${describeError(error)}`, this.#deps.now());
        this.#deps.log(`instance ${instance.index} cannot spawn: ${describeError(error)}`);
      }
    }
    instance.pending = false;
    if (this.#deps.tasks.stopped || instance.removed) await instance.kill();
  }

  #exited(instance: TorInstance, life: number, status: Deno.CommandStatus): void {
    if (!this.#current(instance, life)) return;
    const how = status.signal ? `signal ${status.signal}` : `code ${status.code}`;
    this.#declareDead(instance, `process exited (${how})`);
  }
}
