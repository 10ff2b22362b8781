/**
 * The life of each instance: its checks when due — a SOCKS check four times per `dead_refusal_ms`,
 * a control probe every probe interval (quicker while it starts) — the verdict `dead` they lead to
 * (see `instance.ts`), the control connection that owns it once its control port answers
 * (`ownership.ts`), and the next life on the same ports. A dead instance is killed (SIGTERM, then
 * SIGKILL) and respawned after a wait that doubles from 100 ms to 30 s with each death in a row;
 * the count starts again only after a life stayed ready for `stableMs`. Before a slot's first
 * life, a Tor an earlier supervisor left on its ports is ended. A check's result counts only for
 * the life it was made on.
 *
 * @module
 */
import { describeError } from "../request/errors.ts";
import type { ClientAuthKeys } from "./client_auth.ts";
import type { PoolConfig } from "./config.ts";
import type { Timings, TorInstance } from "./instance.ts";
import { haltLeftover, type OwnerOptions, takeOwnership } from "./ownership.ts";
import { checkSocks, probeTor } from "./probe.ts";
import type { TaskGroup } from "./tasks.ts";
import { prepareInstance, torArgs } from "./torrc.ts";

const RESPAWN_FIRST_MS = 100;
const RESPAWN_MAX_MS = 30_000;
/** How long a leftover Tor has to free the ports once told to exit. */
const LEFTOVER_WAIT_MS = 5000;

/**
 * The wait before the next life after `deaths` deaths in a row: 100 ms doubling, at most 30 s.
 *
 * @example
 * ```ts
 * import { respawnWait } from "./lifecycle.ts";
 * [0, 1, 2, 5, 20].map(respawnWait); // [0, 100, 200, 1600, 30000]
 * ```
 */
export function respawnWait(deaths: number): number {
  if (deaths <= 0) return 0;
  return Math.min(RESPAWN_MAX_MS, RESPAWN_FIRST_MS * 2 ** Math.min(deaths - 1, 9));
}

/** What the lifecycle works with: the pool's config, clock, log, tasks, keys and counters. */
export interface LifecycleDeps {
  readonly config: PoolConfig;
  readonly timings: Timings;
  readonly tasks: TaskGroup;
  readonly clientAuth: ClientAuthKeys;
  readonly counters: { spawns: number; deaths: number; leftoversEnded: number };
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
    const probe = probeTor(this.#controlOf(instance));
    this.#deps.tasks.track(
      probe.then(
        (status) => {
          if (!this.#current(instance, life)) return;
          const before = `${instance.state} ${instance.progress}`;
          instance.probed(status, this.#deps.now(), this.#deps.timings);
          if (!instance.owned && !instance.owning) this.#own(instance);
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

  /** Takes ownership of the instance's life; a failure is retried after the next probe. */
  #own(instance: TorInstance): void {
    const { life } = instance;
    instance.owning = true;
    const owner = takeOwnership(this.#controlOf(instance));
    this.#deps.tasks.track(
      owner.then(
        (connection) => {
          const kept = !this.#deps.tasks.stopped && instance.own(life, connection);
          if (!kept) connection.close();
        },
        (error) => {
          if (!this.#current(instance, life)) return;
          this.#deps.log(
            `warning: instance ${instance.index} not owned yet: ${describeError(error)}`,
          );
        },
      ).finally(() => instance.owning = false),
    );
  }

  /** Where an instance's control port is, and the bound on each exchange. */
  #controlOf(instance: TorInstance): OwnerOptions {
    return {
      host: this.#deps.config.listen,
      port: instance.ports.control,
      cookieFile: instance.paths.cookie,
      timeoutMs: this.#deps.timings.probeTimeoutMs,
    };
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
    instance.died(reason, this.#deps.now(), this.#deps.timings.stableMs);
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
    if (instance.life === 0) await this.#endLeftover(instance);
    while (!this.#deps.tasks.stopped && !instance.removed) {
      const wait = respawnWait(instance.deathsInARow);
      instance.respawnWaitMs = wait;
      if (wait > 0) {
        this.#deps.log(
          `instance ${instance.index} respawns in ${wait} ms ` +
            `(${instance.deathsInARow} death(s) in a row)`,
        );
        await this.#deps.tasks.sleep(wait);
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
        instance.died(
          `cannot spawn: ${describeError(error)}`,
          this.#deps.now(),
          this.#deps.timings.stableMs,
        );
        this.#deps.log(`instance ${instance.index} cannot spawn: ${describeError(error)}`);
      }
    }
    instance.pending = false;
    if (this.#deps.tasks.stopped || instance.removed) await instance.kill();
  }

  /** Ends a Tor an earlier supervisor left on the instance's ports (see `ownership.ts`). */
  async #endLeftover(instance: TorInstance): Promise<void> {
    const { found, reason } = await haltLeftover(this.#controlOf(instance), LEFTOVER_WAIT_MS);
    if (found === "halted") {
      this.#deps.counters.leftoversEnded++;
      this.#deps.log(
        `warning: instance ${instance.index}: ended a Tor left by an earlier run on control port ` +
          `${instance.ports.control}`,
      );
    } else if (found === "foreign") {
      this.#deps.log(
        `warning: instance ${instance.index}: control port ${instance.ports.control} is held by ` +
          `something that is not this instance's Tor (${reason}): left alone`,
      );
    }
  }

  #exited(instance: TorInstance, life: number, status: Deno.CommandStatus): void {
    if (!this.#current(instance, life)) return;
    const how = status.signal ? `signal ${status.signal}` : `code ${status.code}`;
    this.#declareDead(instance, `process exited (${how})`);
  }
}
