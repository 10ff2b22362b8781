/**
 * One Tor instance: a slot with fixed ports (instance i is `socks_base_port + i` and
 * `control_base_port + i` in every life) and the process that currently fills it.
 *
 * States, in the order a life goes through them:
 *
 * - `starting` — spawned; its control port has not answered a probe yet. For one probe interval
 *   after the spawn, probes come every {@link Timings.quickProbeMs} and a failed one does not count
 *   (Tor needs a moment to open its ports); from then on they count.
 * - `bootstrapping` — the control port answers; `progress` is Tor's bootstrap percentage.
 * - `ready` — a circuit is established: the instance can carry streams. A ready instance whose
 *   circuit goes away (the network did) is `bootstrapping` again.
 * - `dead` — two failed control probes in a row, its SOCKS port refused connections for longer
 *   than `dead_refusal_ms`, or the process exited. The supervisor kills what is left and spawns
 *   the next life on the same ports, after a wait that doubles with each death in a row (100 ms
 *   to 30 s). A life counts as up only once it has been ready for {@link Timings.stableMs}: a Tor
 *   that dies soon after it became ready keeps doubling the wait (measured before: one that died
 *   400 ms after ready was respawned 16 times in 10 s, each life bootstrapping anew).
 *
 * Each life is owned (`ownership.ts`): once its control port answers, the supervisor holds a
 * control connection that sent TAKEOWNERSHIP, so the Tor exits when the supervisor does.
 *
 * @module
 */
import type { PoolConfig } from "./config.ts";
import type { ControlConnection } from "./control.ts";
import type { SocksCheck, TorStatus } from "./probe.ts";
import type { InstancePaths, InstancePorts } from "./torrc.ts";

/** Where an instance is in its life. */
export type InstanceState = "starting" | "bootstrapping" | "ready" | "dead";

/** The cadences the supervisor derives from the config. */
export interface Timings {
  readonly probeIntervalMs: number;
  /** The bound on connecting to a control port and on each exchange. */
  readonly probeTimeoutMs: number;
  /** The probe cadence while an instance is starting (within its first probe interval). */
  readonly quickProbeMs: number;
  readonly deadRefusalMs: number;
  /** How often each SOCKS port is checked for refusals: four times per `dead_refusal_ms`. */
  readonly socksCheckMs: number;
  /** The supervisor's tick: the shorter of the two cadences above. */
  readonly tickMs: number;
  /** How long a life must stay ready before its deaths in a row start again from zero. */
  readonly stableMs: number;
}

/**
 * The cadences for a config: probe timeout half the interval (50 ms–5 s), SOCKS checks four times
 * per `dead_refusal_ms` (25 ms–1 s), so a refusal is seen dead within `dead_refusal_ms` plus one
 * check; a life is up (its deaths in a row forgotten) once ready for ten probe intervals
 * (1 s–5 min).
 */
export function timingsOf(config: Pick<PoolConfig, "probeIntervalMs" | "deadRefusalMs">): Timings {
  const clamp = (value: number, low: number, high: number) =>
    Math.max(low, Math.min(high, Math.floor(value)));
  const quickProbeMs = Math.min(config.probeIntervalMs, 250);
  const socksCheckMs = clamp(config.deadRefusalMs / 4, 25, 1000);
  return {
    probeIntervalMs: config.probeIntervalMs,
    probeTimeoutMs: clamp(config.probeIntervalMs / 2, 50, 5000),
    quickProbeMs,
    deadRefusalMs: config.deadRefusalMs,
    socksCheckMs,
    tickMs: Math.min(quickProbeMs, socksCheckMs),
    stableMs: clamp(config.probeIntervalMs * 10, 1000, 300_000),
  };
}

/** How many of an instance's last output lines are kept (for `/stats` and the death log). */
const TAIL_LINES = 12;
/** How long a killed process has after SIGTERM before SIGKILL. */
const KILL_GRACE_MS = 3000;
/** Weight of a new latency sample in the moving average. */
const LATENCY_WEIGHT = 0.3;

/** One instance slot and its current process. */
export class TorInstance {
  readonly index: number;
  readonly ports: InstancePorts;
  readonly paths: InstancePaths;
  state: InstanceState = "dead";
  /** Lives so far (1 after the first spawn). */
  life = 0;
  pid: number | undefined;
  progress = 0;
  summary: string | undefined;
  spawnedAt = 0;
  /** Control probes failed in a row (counted ones only). */
  failedProbes = 0;
  /** When the SOCKS port started refusing, undefined while it accepts. */
  refusedSince: number | undefined;
  nextProbeAt = 0;
  nextSocksCheckAt = 0;
  /** Moving average over control probes and traffic reports. */
  latencyMs: number | undefined;
  /** Failed probes and reported stream errors, over every life. */
  errors = 0;
  /** Active streams, as last reported by whoever carries traffic. */
  active = 0;
  lastDeath: { readonly reason: string; readonly at: number } | undefined;
  /** Deaths in a row without a life that stayed ready for `stableMs` (the respawn's exponent). */
  deathsInARow = 0;
  /** The wait before the current life was spawned (0 for the slot's first life). */
  respawnWaitMs = 0;
  /** When the current life became ready, undefined while it is not. */
  readySince: number | undefined;
  probing = false;
  checkingSocks = false;
  /** Being killed or (re)spawned: no checks run meanwhile. */
  pending = false;
  /** Scaled away: its slot is gone and it is not respawned. */
  removed = false;
  readonly #tail: string[] = [];
  #child: Deno.ChildProcess | undefined;
  /** The control connection that owns this life's Tor (closing it ends the Tor). */
  #owner: ControlConnection | undefined;
  /** Taking ownership of this life is under way. */
  owning = false;
  #done: Promise<unknown> = Promise.resolve();

  constructor(index: number, ports: InstancePorts, paths: InstancePaths) {
    this.index = index;
    this.ports = ports;
    this.paths = paths;
  }

  /** The last lines Tor printed (notices; Tor's SafeLogging keeps addresses out). */
  get tail(): readonly string[] {
    return this.#tail;
  }

  /**
   * Starts the next life: spawns Tor and resets what the last life learnt.
   *
   * @param onExit called with this life's number when the process exits, whoever ended it
   */
  spawn(
    command: { binary: string; args: string[] },
    now: number,
    onExit: (life: number, status: Deno.CommandStatus) => void,
  ): void {
    const child = new Deno.Command(command.binary, {
      args: command.args,
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
    }).spawn();
    this.#child = child;
    const life = ++this.life;
    this.state = "starting";
    this.pid = child.pid;
    this.progress = 0;
    this.summary = undefined;
    this.spawnedAt = now;
    this.failedProbes = 0;
    this.refusedSince = undefined;
    this.nextProbeAt = now;
    this.nextSocksCheckAt = now;
    this.active = 0;
    this.readySince = undefined;
    this.#letGo();
    const drained = Promise.all([this.#keepTail(child.stdout), this.#keepTail(child.stderr)]);
    const status = child.status.then((status) => {
      if (this.#child === child) {
        this.#child = undefined;
        this.#letGo();
      }
      onExit(life, status);
    });
    this.#done = Promise.all([drained, status]);
  }

  /** True while a control connection owns this life's Tor. */
  get owned(): boolean {
    return this.#owner !== undefined;
  }

  /**
   * Keeps the connection that owns this life's Tor, or closes it when `life` is over.
   *
   * @returns true when kept
   */
  own(life: number, connection: ControlConnection): boolean {
    if (life !== this.life || this.#child === undefined || this.state === "dead") {
      connection.close();
      return false;
    }
    this.#letGo();
    this.#owner = connection;
    return true;
  }

  /** Ends the current process, if any: SIGTERM, then SIGKILL after a grace; waits for its exit. */
  async kill(): Promise<void> {
    const child = this.#child;
    if (child) {
      signal(child, "SIGTERM");
      // Closing the owning connection makes Tor exit too (TAKEOWNERSHIP).
      this.#letGo();
      let timer: ReturnType<typeof setTimeout> | undefined;
      const late = new Promise<"late">((resolve) => {
        timer = setTimeout(() => resolve("late"), KILL_GRACE_MS);
      });
      if (await Promise.race([this.#done, late]) === "late") signal(child, "SIGKILL");
      clearTimeout(timer);
    }
    await this.#done;
  }

  /** Asks Tor to reload (SIGHUP): it reads its `ClientOnionAuthDir` again. */
  reload(): void {
    if (this.#child && this.state !== "dead") signal(this.#child, "SIGHUP");
  }

  /** A control probe answered. */
  probed(status: TorStatus, now: number, timings: Timings): void {
    this.failedProbes = 0;
    this.progress = status.progress;
    this.summary = status.summary;
    this.#sample(status.latencyMs);
    this.state = status.circuitEstablished ? "ready" : "bootstrapping";
    if (this.state !== "ready") this.readySince = undefined;
    else this.readySince ??= now;
    this.nextProbeAt = now + timings.probeIntervalMs;
  }

  /**
   * A control probe failed.
   *
   * @returns why the instance is dead, or undefined while it is not
   */
  probeFailed(started: number, now: number, timings: Timings): string | undefined {
    const graceUntil = this.spawnedAt + timings.probeIntervalMs;
    if (this.state === "starting" && started < graceUntil) {
      this.nextProbeAt = Math.min(now + timings.quickProbeMs, graceUntil);
      return undefined;
    }
    this.errors++;
    this.failedProbes++;
    this.nextProbeAt = now + timings.probeIntervalMs;
    return this.failedProbes >= 2
      ? `${this.failedProbes} control probes failed in a row`
      : undefined;
  }

  /**
   * A SOCKS check finished.
   *
   * @returns why the instance is dead, or undefined while it is not
   */
  socksChecked(result: SocksCheck, now: number, timings: Timings): string | undefined {
    this.nextSocksCheckAt = now + timings.socksCheckMs;
    if (result === "accepted") this.refusedSince = undefined;
    if (result !== "refused") return undefined;
    this.refusedSince ??= now;
    const refusing = now - this.refusedSince;
    return refusing > timings.deadRefusalMs
      ? `SOCKS port ${this.ports.socks} refused connections for ${refusing} ms`
      : undefined;
  }

  /**
   * Marks the life over: a life that stayed ready for `stableMs` starts the count of deaths in a
   * row again.
   */
  died(reason: string, now: number, stableMs: number): void {
    if (this.readySince !== undefined && now - this.readySince >= stableMs) this.deathsInARow = 0;
    this.state = "dead";
    this.lastDeath = { reason, at: now };
    this.deathsInARow++;
    this.readySince = undefined;
    this.active = 0;
  }

  /** A traffic report from whoever carries streams through this instance. */
  reported(load: { active: number; latencyMs?: number; error?: boolean }): void {
    this.active = load.active;
    if (load.latencyMs !== undefined) this.#sample(load.latencyMs);
    if (load.error) this.errors++;
  }

  #letGo(): void {
    this.#owner?.close();
    this.#owner = undefined;
  }

  #sample(latencyMs: number): void {
    this.latencyMs = this.latencyMs === undefined
      ? latencyMs
      : this.latencyMs + LATENCY_WEIGHT * (latencyMs - this.latencyMs);
  }

  async #keepTail(stream: ReadableStream<Uint8Array>): Promise<void> {
    let partial = "";
    for await (const text of stream.pipeThrough(new TextDecoderStream())) {
      const lines = (partial + text).split("\n");
      partial = lines.pop() ?? "";
      for (const line of lines) this.#remember(line);
    }
    if (partial) this.#remember(partial);
  }

  #remember(line: string): void {
    this.#tail.push(line.slice(0, 300));
    if (this.#tail.length > TAIL_LINES) this.#tail.shift();
    // Tor's notice "Bootstrapped 14% (handshake): Handshaking with a relay" moves the progress
    // between probes; only a probe makes an instance ready.
    const phase = /\] Bootstrapped (\d{1,3})% \([^)]*\): (.*)$/.exec(line);
    if (phase && (this.state === "starting" || this.state === "bootstrapping")) {
      this.progress = Math.min(100, Number(phase[1]));
      this.summary = phase[2];
    }
  }
}

/** Sends a signal to a child that may have exited already. */
function signal(child: Deno.ChildProcess, name: Deno.Signal): void {
  try {
    child.kill(name);
  } catch { /* already gone */ }
}
