/**
 * The egress of one edge: the SOCKS instance pool (score, breakers, round-robin fallback), the
 * `direct` allowlist, the per-backend negative cache and the retry budget. It decides the way out
 * for each attempt and learns from each outcome; it never opens a connection to anything but a
 * SOCKS instance or a `direct` target, and Deno's permission flags hold it to that.
 *
 * @module
 */
import type { Backend } from "./destinations.ts";
import type { Duplex } from "node:stream";
import { type AgentSettings, EgressRefusal, type WayAgent } from "./agents.ts";
import { checkedPeer, connectDirect, DirectAgent, DirectConnectError } from "./direct_agent.ts";
import { PrivateAllowance, refuseInternal } from "./destinations.ts";
import { MachineView } from "./local_machine.ts";
import { DestinationVerdicts } from "./reach_verdicts.ts";
import {
  type OwnListener,
  refuseLoopbackTunnel,
  refuseOwnDestination,
  refusePeer,
} from "./own_listener.ts";
import { PoolView } from "./pool_view.ts";
import { SocksError } from "./socks5.ts";
import { type SocksEntry, SocksWays } from "./socks_ways.ts";
import type { TlsTransportSettings } from "./transport.ts";
import { type BreakerOptions, transitionLine } from "./breaker.ts";
import { IdleWatch } from "./idle_watch.ts";
import { NegativeCache, pickBackend } from "./negative_cache.ts";
import { InstancePool, type Pick } from "./pool.ts";
import { RetryBudget, type RetryBudgetOptions } from "./retry.ts";

/** Everything the egress is configured with. */
export interface EgressSettings extends AgentSettings {
  /** The SOCKS instances: local servers, or the hub's pool ports (`poolPort`) via `transport`. */
  readonly socks: readonly SocksEntry[];
  /** The `socks5_tls` transport to the hub's relay, for entries with a `poolPort`. */
  readonly transport?: TlsTransportSettings;
  /** Per-tenant SOCKS credentials and agents (`isolation.ts`); default off. */
  readonly isolateTenants?: boolean;
  /** `host:port` targets reached without SOCKS. */
  readonly direct: readonly string[];
  /** Internal destinations tenants may reach (`egress.allow_private`): CIDRs, host:port. */
  readonly allowPrivate?: readonly string[];
  /**
   * This process's TCP listeners: no connection may land on one, whatever `allowPrivate` says
   * (own_listener.ts). Default none.
   */
  readonly ownListeners?: readonly OwnListener[];
  /** How this machine's names and addresses are read before each dial (default: read afresh). */
  readonly machine?: MachineView;
  readonly bodyIdleMs: number;
  /**
   * Plain-HTTP exchanges without a request body run on connections the gateway reads itself
   * (owned_conns.ts); default on.
   */
  readonly ownedReads?: boolean;
  readonly breaker: BreakerOptions;
  readonly negativeCache: {
    readonly failures: number;
    readonly ttlMs: number;
    /** When every backend of a route is cold: try them anyway, or refuse (503). */
    readonly whenAllCold?: "try" | "refuse";
  };
  readonly retryBudget: RetryBudgetOptions;
  readonly backoff: { readonly baseMs: number; readonly capMs: number };
}

/** What the egress is given besides its config. */
export interface EgressOptions {
  /** Uniform in [0, 1) (backend weights, backoff jitter); default Math.random. */
  readonly random?: () => number;
  /** Where breaker and negative-cache transitions are logged, one line each; default nowhere. */
  readonly log?: (line: string) => void;
}

/** One attempt's way out. */
export type Way =
  | { readonly kind: "direct"; readonly agent: WayAgent; readonly label: string }
  | {
    readonly kind: "socks";
    readonly agent: WayAgent;
    readonly pick: Pick;
    readonly label: string;
  };

/** The egress of one edge. */
export class Egress {
  readonly settings: EgressSettings;
  readonly pool: InstancePool;
  /** What a supervised pool says of its instances, applied to {@link pool} (pool_view.ts). */
  readonly view: PoolView;
  readonly cache: NegativeCache;
  readonly budget: RetryBudget;
  /** Cuts off upstream bodies that go quiet for `bodyIdleMs`. */
  readonly idle: IdleWatch;
  readonly #direct: ReadonlySet<string>;
  readonly #directAgent: DirectAgent;
  readonly #ways: SocksWays;
  readonly #random: () => number;
  readonly #clock: () => number;
  readonly #refuse: (host: string, port: number) => Promise<string | undefined>;
  readonly #refuseBound: (host: string, port: number, bound: string) => string | undefined;
  readonly #refusePeer: (host: string, port: number, peer: string) => string | undefined;
  #retries = 0;
  #budgetRefusals = 0;
  #probes = 0;
  #failedProbes = 0;
  #tunnels = 0;
  readonly #log: (line: string) => void;
  /** The timer of the next proactive probe, and the clock time it is set for. */
  #probeTimer?: number;
  #probeTimerAt = Infinity;
  #closed = false;
  /** Stops closing pooled connections on machine changes (set at construction). */
  readonly #unwatchMachine: () => void;
  /** Outcomes not yet shared with the other request workers (undefined: not sharing). */
  #outbox?: OutcomeBatch;

  /**
   * @param settings the egress config
   * @param clock milliseconds, monotonic (breakers, cache, budget)
   * @param options random source and log (a bare function is the random source, as before)
   * @throws {Error} when the transport's certificate, key or CA cannot be read
   */
  constructor(
    settings: EgressSettings,
    clock: () => number,
    options: EgressOptions | (() => number) = {},
  ) {
    const { random = Math.random, log = () => {} } = typeof options === "function"
      ? { random: options }
      : options;
    this.settings = settings;
    this.#log = log;
    this.cache = new NegativeCache({ ...settings.negativeCache, log }, clock);
    this.budget = new RetryBudget(settings.retryBudget, clock);

    this.#direct = new Set(settings.direct.map((target) => target.toLowerCase()));
    const allowance = new PrivateAllowance(settings.allowPrivate ?? []);
    const own = settings.ownListeners ?? [];
    const view = settings.machine ?? new MachineView(undefined, { clock });
    // Judged before each new connection and before each reuse of a pooled one.
    const verdicts = new DestinationVerdicts(view, function judgeDestination(host, port, machine) {
      return refuseOwnDestination(host, port, own, machine) ??
        refuseInternal(host, port, allowance, machine);
    });
    this.#refuse = (host, port) => verdicts.refuse(host, port);
    this.#refuseBound = (host, port, bound) =>
      refuseLoopbackTunnel(host, port, bound, allowance, own);
    // The direct socket's peer is judged with the machine the destination check just read.
    this.#refusePeer = (host, port, peer) => refusePeer(host, port, peer, own, view.latest());
    const guarded = {
      ...settings,
      refuse: this.#refuse,
      refuseReuse: (host: string, port: number) => verdicts.refuseReuse(host, port),
      refuseBound: this.#refuseBound,
      refusePeer: this.#refusePeer,
    };
    this.#directAgent = new DirectAgent(guarded);
    this.#ways = new SocksWays(settings.socks, guarded, {
      transport: settings.transport,
      isolateTenants: settings.isolateTenants === true,
    });
    const labels = this.#ways.labels;
    this.pool = new InstancePool(labels, {
      breaker: settings.breaker,
      clock,
      onTransition: (index, transition) => {
        this.#log(transitionLine(labels[index], transition));
        if (transition.to === "open") this.#scheduleProbes();
      },
    });
    // A pool's view is read as often as an open breaker may try its instance again.
    this.view = new PoolView(settings.socks, this.pool, settings.breaker.probeIntervalMs);
    const ways = this.#ways;
    const direct = this.#directAgent;
    // A changed machine reading closes every pooled connection it now refuses.
    this.#unwatchMachine = view.onChange(function closeRefusedPooled() {
      const refused = (host: string, port: number) => verdicts.refuseNow(host, port) !== undefined;
      for (const agent of [direct, ...ways.agents]) agent.closeRefused(refused);
    });
    this.idle = new IdleWatch(
      function watchedAgents() {
        return [direct, ...ways.agents];
      },
      { bodyIdleMs: settings.bodyIdleMs, socketIdleMs: settings.idleSocketMs },
      clock,
    );
    this.idle.start();
    this.#random = random;
    this.#clock = clock;
  }

  /** True when a backend is reached directly (it is in `egress.direct`). */
  isDirect(backend: Backend): boolean {
    return this.#direct.has(backend.target);
  }

  /** True when the backend can be reached at all (direct, or a SOCKS pool exists). */
  reaches(backend: Backend): boolean {
    return this.isDirect(backend) || this.#ways.size > 0;
  }

  /** Chooses a backend by weight, avoiding cold ones while any other remains. */
  chooseBackend(backends: readonly Backend[]): Backend | undefined {
    return pickBackend(backends, this.cache, this.#random);
  }

  /**
   * Chooses the way out for one attempt.
   *
   * @param backend the chosen backend
   * @param tried SOCKS instances this request already tried
   * @param tenant the tenant host the attempt is for: with isolation, its own agent and credentials
   * @returns the way, or undefined when the backend cannot be reached
   */
  way(backend: Backend, tried?: ReadonlySet<number>, tenant?: string): Way | undefined {
    if (this.isDirect(backend)) {
      return { kind: "direct", agent: this.#directAgent, label: "direct" };
    }
    this.#startProbes();
    const pick = this.pool.pick(tried);
    if (!pick) return undefined;
    return {
      kind: "socks",
      agent: this.#ways.agent(pick.index, tenant),
      pick,
      label: this.#ways.labels[pick.index],
    };
  }

  /**
   * Probes, with a SOCKS greeting of the gateway's own, every instance whose breaker is due for
   * its half-open trial (at most one probe per instance at a time): success closes the breaker,
   * failure opens it for another interval. Client requests never serve as the trial.
   */
  #startProbes(): void {
    const due = this.pool.dueProbes();
    for (const index of due) {
      if (!this.pool.beginProbe(index)) continue;
      this.#probes++;
      this.#ways.probe(index, this.settings.connectTimeoutMs)
        .then(() => true, () => false)
        .then((ok) => {
          if (!ok) this.#failedProbes++;
          this.pool.endProbe(index, ok);
          this.#scheduleProbes();
        });
    }
    this.#scheduleProbes();
  }

  /**
   * Arms one timer for the earliest due probe, so an open instance is probed when its interval
   * ends whether or not requests arrive: after an outage (every breaker open, or an isolate such
   * as worker 0 that carries no public traffic) the first instance that answers serves again
   * within one probe interval. The timer exists only while some breaker is open, and waits at
   * least {@link MIN_PROBE_DELAY_MS} so a tiny interval cannot spin.
   */
  #scheduleProbes(): void {
    const at = this.pool.nextProbeAt();
    if (this.#closed || at === undefined || at < this.#probeTimerAt) {
      clearTimeout(this.#probeTimer);
      this.#probeTimer = undefined;
      this.#probeTimerAt = Infinity;
    }
    if (this.#closed || at === undefined || this.#probeTimer !== undefined) return;
    this.#probeTimerAt = at;
    // Deno's timers are numbers (node's types say Timeout); unref: it must not keep a process up.
    const timer = setTimeout(() => {
      this.#probeTimer = undefined;
      this.#probeTimerAt = Infinity;
      this.#startProbes();
    }, Math.max(MIN_PROBE_DELAY_MS, at - this.#clock())) as unknown as number;
    Deno.unrefTimer(timer);
    this.#probeTimer = timer;
  }

  /**
   * Ends an attempt: the instance learns `instanceOk`; the backend learns `backendOk` when it was
   * reached (undefined: no news about the backend). `instanceDown` (the instance could not be
   * connected to at all) opens its breaker at once, here and in every worker.
   *
   * @param latencyMs time to response headers, when there were some
   */
  finish(
    way: Way,
    backend: Backend,
    outcome: {
      /** Undefined: no verdict on the instance (its pick is released, nothing is recorded). */
      instanceOk: boolean | undefined;
      backendOk?: boolean;
      latencyMs?: number;
      instanceDown?: boolean;
    },
  ): void {
    const down = outcome.instanceDown === true;
    if (way.kind === "socks") {
      this.pool.finish(way.pick, outcome.instanceOk, outcome.latencyMs, down);
    }
    if (outcome.backendOk === true) this.cache.success(backend.key);
    else if (outcome.backendOk === false) this.cache.failure(backend.key);
    const outbox = this.#outbox;
    if (outbox) {
      const verdict = down || outcome.instanceOk !== undefined;
      if (way.kind === "socks" && verdict && (down || !way.pick.fallback)) {
        outbox.instances.push(way.pick.index, down ? DOWN : outcome.instanceOk ? 1 : 0);
      }
      if (outcome.backendOk !== undefined) {
        outbox.backends.push(backend.key, outcome.backendOk ? 1 : 0);
      }
    }
  }

  /**
   * Records an active health check's verdict on `backend` (health_checks.ts), here and — with
   * request workers — in every worker through the shared outcomes. A failing check makes the
   * backend cold for a fresh negative-cache TTL (as many failures as the cache's threshold, so
   * each failing probe renews it); a passing one ends its failure run and any cold period.
   */
  backendChecked(backend: Backend, ok: boolean): void {
    const times = ok ? 1 : this.settings.negativeCache.failures;
    for (let i = 0; i < times; i++) {
      if (ok) this.cache.success(backend.key);
      else this.cache.failure(backend.key);
      this.#outbox?.backends.push(backend.key, ok ? 1 : 0);
    }
  }

  /** Starts collecting outcomes for {@link takeOutcomes} (request workers share them). */
  shareOutcomes(): void {
    this.#outbox ??= { instances: [], backends: [] };
  }

  /** The outcomes collected since the last call; undefined when there are none. */
  takeOutcomes(): OutcomeBatch | undefined {
    const outbox = this.#outbox;
    if (!outbox || (outbox.instances.length === 0 && outbox.backends.length === 0)) {
      return undefined;
    }
    this.#outbox = { instances: [], backends: [] };
    return outbox;
  }

  /**
   * Learns outcomes another worker observed: each instance outcome enters that instance's breaker
   * window and counters, each backend outcome the negative cache. Trials stay each worker's own.
   */
  applyOutcomes(batch: OutcomeBatch): void {
    const { instances, backends } = batch;
    for (let i = 0; i + 1 < instances.length; i += 2) {
      const index = instances[i];
      if (Number.isInteger(index) && index >= 0 && index < this.pool.size) {
        const outcome = instances[i + 1];
        this.pool.observe(index, outcome === 1, outcome === DOWN);
      }
    }
    for (let i = 0; i + 1 < backends.length; i += 2) {
      const key = backends[i];
      if (typeof key !== "string") continue;
      if (backends[i + 1] === 1) this.cache.success(key);
      else this.cache.failure(key);
    }
  }

  /**
   * Opens a raw byte stream to `target` (SNI passthrough): directly when it is a `direct` target,
   * otherwise by SOCKS5 CONNECT through the best instance. The instance's outcome is recorded: a
   * failure at once, a success when the stream closes. With isolation, `tenant` picks the
   * credentials (a stream without one authenticates as nobody's).
   *
   * @throws {SocksError | DirectConnectError | EgressRefusal} when no connection could be made
   */
  async connectRaw(
    target: { host: string; port: number; target: string; tenant?: string },
  ): Promise<Duplex> {
    const refusal = await this.#refuse(target.host, target.port);
    if (refusal !== undefined) throw new EgressRefusal(refusal);
    if (this.#direct.has(target.target)) {
      const socket = checkedPeer(
        await connectDirect(target, this.settings),
        target,
        this.#refusePeer,
      );
      this.holdTunnel(socket);
      return socket;
    }
    this.#startProbes();
    const pick = this.pool.pick();
    if (!pick) throw new DirectConnectError("unreachable");
    const started = this.#clock();
    try {
      const refuseBound = this.#refuseBound;
      const socket = await this.#ways.connect(pick.index, target, {
        timeoutMs: this.settings.connectTimeoutMs,
        onBound: (bound) => refuseBound(target.host, target.port, bound),
        tenant: target.tenant,
      });
      const latencyMs = this.#clock() - started;
      socket.once("close", () => this.pool.finish(pick, true, latencyMs));
      this.holdTunnel(socket);
      return socket;
    } catch (error) {
      const blame = error instanceof SocksError && error.blame === "destination";
      this.pool.finish(pick, blame, undefined, instanceDown(error));
      throw error;
    }
  }

  /**
   * Counts a raw byte stream (an SNI passthrough or an upgraded connection) as an open upstream
   * tunnel until it closes.
   */
  holdTunnel(socket: Duplex): void {
    this.#tunnels++;
    socket.once("close", () => this.#tunnels--);
  }

  /** The upstream sockets this isolate holds now, by state. */
  sockets(): UpstreamSockets {
    let active = 0;
    let idle = 0;
    let connecting = 0;
    for (const agent of [this.#directAgent, ...this.#ways.agents]) {
      for (const list of Object.values(agent.sockets)) active += list?.length ?? 0;
      for (const list of Object.values(agent.freeSockets)) idle += list?.length ?? 0;
      const owned = agent.owned.counts();
      active += owned.active;
      idle += owned.idle;
      connecting += agent.connecting.count;
    }
    return { active, idle, connecting, tunnels: this.#tunnels };
  }

  /** Asks the rolling budget for one retry (counted either way). */
  tryRetry(): boolean {
    if (this.budget.tryRetry()) {
      this.#retries++;
      return true;
    }
    this.#budgetRefusals++;
    return false;
  }

  /** The random source, for backoff jitter. */
  random(): number {
    return this.#random();
  }

  /** Pool, cache and budget state for `/v1/egress` and `/metrics`. */
  snapshot(): EgressSnapshot {
    return {
      instances: this.pool.snapshot(),
      direct: [...this.#direct],
      cold_backends: this.cache.snapshot(),
      probe_interval_ms: this.settings.breaker.probeIntervalMs,
      retries: this.#retries,
      retry_budget_refusals: this.#budgetRefusals,
      probes: this.#probes,
      failed_probes: this.#failedProbes,
      retry_budget: this.budget.snapshot(),
    };
  }

  /** Closes every pooled upstream connection. */
  close(): void {
    this.#closed = true;
    this.#unwatchMachine();
    this.#scheduleProbes();
    this.view.stop();
    this.idle.stop();
    this.#directAgent.destroy();
    this.#ways.destroy();
  }
}

/** The shortest wait of the proactive probe timer (ms), whatever the probe interval. */
const MIN_PROBE_DELAY_MS = 10;

/** An instance outcome meaning "could not be connected to at all": trip its breaker. */
const DOWN = 2;

/**
 * True when a failed attempt never reached the SOCKS instance's service: the TCP connect was
 * refused or reset, or the instance closed or garbled the handshake. A timeout is not: with Tor,
 * a slow CONNECT reply is an onion circuit being built, not a dead instance.
 */
export function instanceDown(error: unknown): boolean {
  return error instanceof SocksError &&
    (error.kind === "instance_unreachable" || error.kind === "instance_protocol");
}

/**
 * Outcomes as flat pairs: `[instance, outcome, …]` (1 ok, 0 failed, 2 down) and
 * `[backend key, ok, …]` (ok is 1 or 0).
 */
export interface OutcomeBatch {
  readonly instances: number[];
  readonly backends: (string | number)[];
}

/**
 * Upstream sockets by state: `active` carry a request, `idle` wait in the keep-alive pool,
 * `connecting` are in their TCP connect or SOCKS handshake, `tunnels` are raw streams
 * (passthrough, upgraded connections).
 */
export interface UpstreamSockets {
  readonly active: number;
  readonly idle: number;
  readonly connecting: number;
  readonly tunnels: number;
}

/** What `/v1/egress` shows. */
export interface EgressSnapshot {
  readonly instances: ReturnType<InstancePool["snapshot"]>;
  readonly direct: readonly string[];
  /** Backends with a failure run ("healthy") or a cold period ("cold"). */
  readonly cold_backends: ReturnType<NegativeCache["snapshot"]>;
  /** How long an open breaker waits before its probe. */
  readonly probe_interval_ms: number;
  readonly retries: number;
  readonly retry_budget_refusals: number;
  /** Half-open trials the gateway ran (SOCKS greetings), and how many failed. */
  readonly probes: number;
  readonly failed_probes: number;
  readonly retry_budget: ReturnType<RetryBudget["snapshot"]>;
}
