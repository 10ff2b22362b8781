/**
 * Starting and stopping an edge. Boot order, fail closed at every step:
 *
 * 1. create one server object per configured listener, each a closure over its lane;
 * 2. prove the server objects pairwise distinct;
 * 3. bind every listener (a failure closes all of them);
 * 4. prove the bound addresses pairwise non-overlapping;
 * 5. arm: only now may a connection reach a handler (earlier ones are closed unread).
 *
 * Drain stops public admission, waits until no public request is in flight (or the cap), then
 * closes every listener.
 *
 * {@link startEdge} reads as the list of boot steps; each step is a named function below it, in
 * the order it runs. What changes while the edge runs (armed, ready/draining, the bound listeners,
 * how to stop the watchers) is a {@link Lifecycle}, which also drains and closes.
 *
 * @module
 */
import { BootError } from "../boot/boot_error.ts";
import { checkDistinctObjects, checkListeners, type LaneListener } from "../boot/distinct.ts";
import { formatAddress } from "../config/load.ts";
import type { LaneName } from "../ledger/lane_names.ts";
import { type Clock, Ledger } from "../ledger/ledger.ts";
import { ResponseStats } from "../observe/response_stats.ts";
import { AccessLog, diagnostics, type LogLevel } from "../observe/access_log.ts";
import { BufferedLines, Observer } from "../observe/observer.ts";
import { RequestMetrics } from "../observe/request_metrics.ts";
import { TenantLabels } from "../observe/tenant_label.ts";
import { Tracing } from "../observe/tracing.ts";
import { Egress } from "../egress/egress.ts";
import { shareEgress } from "../egress/share.ts";
import { PolicyStats } from "../policy/policy_stats.ts";
import { egressSettings } from "../egress/settings.ts";
import { ConfigStore } from "../live/generations.ts";
import { type RuntimeReloader, runtimeReloader } from "../live/runtime_watch.ts";
import { followHub, type HubFollower } from "../live/hub_client.ts";
import { AddressSet } from "../request/cidr.ts";
import { CertStore } from "../tls/certificates.ts";
import { type StopWatching, watchCertificates } from "../tls/watch.ts";
import {
  type BindContext,
  type Bound,
  boundAddress,
  closeListener,
  createListener,
  describeListener,
  listen,
  nudge,
  rearm,
} from "./listeners.ts";
import { type DescriptorState, DescriptorWatch } from "../server/descriptors.ts";
import { AdminCredential } from "../server/admin.ts";
import { readNamedFile } from "../config/rooted_read.ts";
import type { HubClientConfig } from "../config/load.ts";
import { COUNTER_INDEX } from "../ledger/memory.ts";
import { checkReach, type EdgePlan, firstGenerationNumber } from "./plan.ts";
import { bindsHere, type WorkerRole } from "./worker_role.ts";
import { LedgerMemory } from "../ledger/memory.ts";
import type { EdgeServices, EdgeState } from "../pipeline/services.ts";

/** Options for {@link startEdge}. */
export interface EdgeOptions {
  readonly version: string;
  /** The clock of the ledger and the egress (tests inject one). */
  readonly clock?: Clock;
  /** Randomness for backend weights and backoff jitter (tests inject one). */
  readonly random?: () => number;
  /** Where boot and drain lines go; defaults to stderr. */
  readonly log?: (line: string) => void;
  /** This isolate's part in a multi-worker edge; absent for a single isolate. */
  readonly worker?: WorkerRole;
  /** Where access-log lines go (default: stdout, in batches). */
  readonly accessLog?: (line: string) => void;
}

/**
 * Diagnostics on stderr at `level`: lines that say `warning:` are warnings, lines about a failure
 * or refusal are errors, boot and reload lines are info; the access log is separate (stdout).
 */
function levelled(level: LogLevel): (line: string) => void {
  const write = diagnostics(level);
  return (line) => {
    if (line.includes(" warning: ")) write.warn(line);
    else if (/\b(failed|refused|rejected|cannot|error)\b/i.test(line)) write.error(line);
    else write.info(line);
  };
}

/** A running edge. */
export interface Edge {
  readonly services: EdgeServices;
  /** Every bound listener, by lane. */
  readonly listeners: readonly { lane: LaneName; address: string }[];
  /** Drains (see module doc); resolves when every listener is closed. */
  drain(): Promise<void>;
  /** Closes every listener and connection now. */
  close(): Promise<void>;
  /** Resolves when the edge has stopped, by drain or close. */
  readonly finished: Promise<void>;
}

/**
 * Boots an edge from a plan.
 *
 * @param plan a checked plan (from `planEdge`)
 * @param options version, clock, log
 * @throws {BootError} when a listener cannot bind or the bound set is not distinct, or when Deno's
 *   tracing would export its own spans of requests (observe/tracing.ts)
 */
export async function startEdge(
  plan: EdgePlan<EdgeServices>,
  options: EdgeOptions,
): Promise<Edge> {
  const boot = bootContext(plan, options);
  const tracing = Tracing.detect(options.version);
  if (tracing.refusal) throw new BootError([tracing.refusal]);
  const life = new Lifecycle(boot);
  const runtime = startRuntime(boot, life);
  const admin = await loadCredentials(boot, life);
  const certs = await startCertificates(boot, life);
  const observer = await createObserver(boot, tracing, runtime.lines);
  const services = assembleServices(boot, life, { runtime, admin, certs, observer });
  await bindListeners(boot, life, services);
  const actual = await checkBound(boot, life);
  life.arm();
  life.descriptors = watchDescriptors(boot, life);
  announce(boot, actual, certs);
  return edgeHandle(life, services, actual);
}

/** What every boot step reads: the plan, the options, and this isolate's part in the edge. */
interface BootContext {
  readonly plan: EdgePlan<EdgeServices>;
  readonly options: EdgeOptions;
  readonly log: (line: string) => void;
  readonly clock: Clock;
  readonly worker?: WorkerRole;
  /** Alone or worker 0: owns the runtime source and writes the once-per-edge notices. */
  readonly owns: boolean;
}

/** Resolves the options' defaults once, so no step has to know them. */
function bootContext(plan: EdgePlan<EdgeServices>, options: EdgeOptions): BootContext {
  const worker = options.worker;
  return {
    plan,
    options,
    log: options.log ?? levelled(plan.config.observe.logLevel),
    clock: options.clock ?? (() => performance.timeOrigin + performance.now()),
    worker,
    owns: !worker || worker.index === 0,
  };
}

/**
 * The state an edge changes as it boots, serves and stops, and the three ways it ends: abandoned
 * (a boot that will not complete), drained, or closed. The ledger and the egress live here because
 * drain waits on the one and shutdown closes the other.
 */
class Lifecycle {
  readonly ledger: Ledger;
  readonly egress: Egress;
  /** Shared with every handler as `services.state`. */
  readonly state: EdgeState = { ready: false, draining: false };
  /** False until every check has passed; until then a connection is closed unread. */
  armed = false;
  /** The listeners bound so far, in bind order. */
  readonly listening: Bound[] = [];
  /** Stops the runtime source, the egress sharing and the access-log batching. */
  stopRuntime: () => void = () => {};
  /** Stops the certificate watch. */
  stopWatching: StopWatching = () => {};
  /** Set once armed. */
  descriptors?: DescriptorWatch;
  /** Resolves when the edge has stopped, by drain or close. */
  readonly finished: Promise<void>;
  readonly #boot: BootContext;
  #resolveFinished!: () => void;
  #stopping?: Promise<void>;

  constructor(boot: BootContext) {
    const { plan, worker, clock, options } = boot;
    this.#boot = boot;
    const memory = worker && LedgerMemory.attach(worker.ledger, worker.index);
    this.ledger = new Ledger(plan.profile, { clock, memory });
    this.egress = new Egress(egressSettings(plan.config.egress), clock, options.random);
    this.finished = new Promise<void>((resolve) => this.#resolveFinished = resolve);
  }

  /** Undoes a boot that will not complete: listeners, certificate watch, runtime source. */
  async abandon(): Promise<void> {
    await Promise.all(this.listening.map((grant) => closeListener(grant)));
    this.stopWatching();
    this.stopRuntime();
  }

  /** Lets connections reach the handlers and reports the edge ready. */
  arm(): void {
    this.armed = true;
    this.state.ready = true;
  }

  /** Stops public admission, waits out public work (to the cap), then shuts down (idempotent). */
  drain(): Promise<void> {
    if (this.#stopping) return this.#stopping;
    const { log, plan } = this.#boot;
    this.state.draining = true;
    log("portcullis: draining: public admission stopped");
    const publicServers = this.listening.filter((grant) => grant.lane === "public");
    for (const grant of publicServers) {
      grant.stopAccepting();
      grant.closeIdle();
    }
    this.#stopping = (async () => {
      const until = Date.now() + plan.config.drainMs;
      const inFlight = () => this.ledger.inUse("public");
      while (inFlight() > 0 && Date.now() < until) {
        await new Promise((resolve) => setTimeout(resolve, 25));
      }
      const left = inFlight();
      log(`portcullis: drained${left > 0 ? ` with ${left} public requests cut at the cap` : ""}`);
      // The drain request's own answer (and any health probe's) is delivered before the close.
      const protectedUntil = Date.now() + 2000;
      const answering = () =>
        this.ledger.inUse("local_health") + this.ledger.inUse("provider_health");
      while (answering() > 0 && Date.now() < protectedUntil) {
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
      await this.#shutdown();
    })();
    return this.#stopping;
  }

  /** Closes every listener and connection now, without waiting for work (idempotent). */
  close(): Promise<void> {
    if (!this.#stopping) {
      this.state.draining = true;
      this.#stopping = this.#shutdown();
    }
    return this.#stopping;
  }

  /** Stops every watcher, closes every listener and the egress, then resolves `finished`. */
  async #shutdown(): Promise<void> {
    this.state.ready = false;
    this.descriptors?.stop();
    this.stopWatching();
    this.stopRuntime();
    await Promise.all(this.listening.map((grant) => closeListener(grant)));
    this.egress.close();
    this.#resolveFinished();
  }
}

/** What runs beside the listeners from boot on: the generation store and what feeds it. */
interface Runtime {
  readonly store: ConfigStore;
  /** Local mode, owner only: the folder watch. */
  readonly reloader?: RuntimeReloader;
  /** Remote mode, owner only: the hub stream. */
  readonly follower?: HubFollower;
  /** The access-log batches, unless the options take the lines. */
  readonly lines?: BufferedLines;
}

/**
 * Starts the runtime source (the owner's folder watch or hub stream), the egress sharing between
 * workers and the access-log batching, and tells `life` how to stop them all.
 */
function startRuntime(boot: BootContext, life: Lifecycle): Runtime {
  const { plan, worker, owns, log, options } = boot;
  const runtime = plan.config.runtime;
  const store = createStore(boot);
  const reloader = owns && runtime.kind === "local"
    ? runtimeReloader(runtime.dir, store, {
      watch: runtime.watch,
      debounceMs: runtime.debounceMs,
      log,
    })
    : undefined;
  const follower = owns && runtime.kind === "remote"
    ? followHub(store, {
      nodeId: plan.config.nodeId,
      hub: runtime.hub,
      cacheDir: runtime.cacheDir,
      log,
      random: options.random,
    })
    : undefined;
  const stopSharing = worker ? shareEgress(life.egress, worker.egressChannel) : () => {};
  const lines = options.accessLog ? undefined : new BufferedLines();
  life.stopRuntime = () => {
    reloader?.stop();
    follower?.stop();
    stopSharing();
    lines?.close();
  };
  return { store, reloader, follower, lines };
}

/** The generation store, holding the planned first generation (numbered as the owner numbers it). */
function createStore({ plan, worker }: BootContext): ConfigStore {
  return new ConfigStore(
    {
      number: worker?.first?.number ?? firstGenerationNumber(plan.runtime),
      hash: plan.runtime.hash,
      loadedAt: worker?.first?.loadedAt ?? Date.now(),
      source: plan.runtime.source,
      dir: plan.runtime.dir,
      registry: plan.tenants,
      texts: plan.runtime.texts,
    },
    (registry) => checkReach(plan.config, registry),
    worker && {
      pointer: new Int32Array(worker.generation),
      prepareElsewhere: worker.prepareElsewhere,
    },
  );
}

/**
 * Loads the admin token and, for a hub-fed owner, reads the hub credentials: an unreadable one is
 * a config error that stops the runtime source and refuses the boot, not a hub outage to wait out.
 */
async function loadCredentials(boot: BootContext, life: Lifecycle): Promise<AdminCredential> {
  const { plan, owns } = boot;
  const runtime = plan.config.runtime;
  try {
    const tokenFile = plan.config.admin.tokenFile;
    const admin = tokenFile ? await AdminCredential.load(tokenFile) : AdminCredential.none();
    // A hub credential the edge could never use is a config error, not a hub outage to wait out.
    if (owns && runtime.kind === "remote") await checkHubCredentials(runtime.hub);
    return admin;
  } catch (error) {
    life.stopRuntime();
    throw new BootError([(error as Error).message]);
  }
}

/** Reads the hub credentials once, as every request to the hub will (rooted, secrets 0600). */
async function checkHubCredentials(hub: HubClientConfig): Promise<void> {
  if (hub.tls) {
    await readNamedFile(hub.tls.caFile, "hub.tls.ca_file");
    await readNamedFile(hub.tls.certFile, "hub.tls.cert_file");
    await readNamedFile(hub.tls.keyFile, "hub.tls.key_file", { secret: true });
  } else if (hub.tokenFile) {
    await readNamedFile(hub.tokenFile, "hub.token_file", { secret: true });
  }
}

/**
 * With `tls`: loads the certificates before any listener exists (so the first handshake has one),
 * warns about HTTP/2, and starts the certificate watch, telling `life` how to stop it.
 */
async function startCertificates(
  { plan, log }: BootContext,
  life: Lifecycle,
): Promise<CertStore | undefined> {
  const tlsConfig = plan.config.tls;
  const certs = tlsConfig &&
    new CertStore({
      sources: tlsConfig.certificates,
      minVersion: tlsConfig.minVersion,
      bootstrapName: tlsConfig.name,
      log,
    });
  if (certs) await certs.reload();
  if (tlsConfig?.http2) {
    log(
      "portcullis: warning: tls.http2 is on; Deno 2.9.6's node:http2 has aborted the process " +
        "under concurrent HTTP/2 load in testing (docs/decisions.md §8)",
    );
  }
  if (certs && tlsConfig.watch && tlsConfig.certificates.length > 0) {
    life.stopWatching = watchCertificates(
      certs,
      tlsConfig.certificates.flatMap((c) => [c.certFile, c.keyFile]),
      log,
    );
  }
  return certs;
}

/**
 * The observer (metrics, access log, traces) with its tenant labels; the owner says once when no
 * line can carry a tenant and when spans leave the process.
 */
async function createObserver(
  boot: BootContext,
  tracing: Tracing,
  lines: BufferedLines | undefined,
): Promise<Observer> {
  const { plan, options, owns, log } = boot;
  const observe = plan.config.observe;
  const labels = await readLabels(boot);
  if (tracing.enabled && owns) {
    log(
      "portcullis: warning: tracing is on; Deno's OpenTelemetry exporter sends spans to " +
        "OTEL_EXPORTER_OTLP_ENDPOINT outside --allow-net (point it at a collector on loopback)",
    );
  }
  return new Observer({
    tracing,
    metrics: new RequestMetrics(),
    accessLog: new AccessLog({ ...observe.accessLog, write: options.accessLog ?? lines!.push }),
    labels,
  });
}

/** The salted tenant labels from `observe.salt_file`; none (and a line saying so) without one. */
async function readLabels({ plan, owns, log }: BootContext): Promise<TenantLabels | undefined> {
  const observe = plan.config.observe;
  if (observe.saltFile) {
    const read = await TenantLabels.fromFile(observe.saltFile);
    if (read.problem && owns) {
      log(`portcullis: warning: ${read.problem}; no metric or log line carries a tenant`);
    }
    return read.labels;
  }
  if (owns) {
    log(
      "portcullis: observe.salt_file is not set, so no metric, log line or span carries a " +
        "tenant (tenant labels are salted hashes, never plain hosts)",
    );
  }
  return undefined;
}

/** The parts of {@link EdgeServices} the boot steps made. */
interface ServiceParts {
  readonly runtime: Runtime;
  readonly admin: AdminCredential;
  readonly certs: CertStore | undefined;
  readonly observer: Observer;
}

/** Everything a lane handler may use, gathered into the one object every handler is given. */
function assembleServices(
  boot: BootContext,
  life: Lifecycle,
  { runtime, admin, certs, observer }: ServiceParts,
): EdgeServices {
  const { plan, options, worker, clock, log } = boot;
  return {
    nodeId: plan.config.nodeId,
    version: options.version,
    startedAt: Date.now(),
    ledger: life.ledger,
    stats: new ResponseStats(worker?.stats, worker?.index),
    policyStats: new PolicyStats(),
    observer,
    state: life.state,
    tenants: () => runtime.store.registry(),
    config: runtime.store,
    ...runtimeCalls(boot, runtime),
    worker: { index: worker?.index ?? 0, count: worker?.count ?? 1 },
    drain: () => drainEverywhere(worker, life),
    egress: life.egress,
    trusted: AddressSet.of(plan.config.trustedProxies),
    paths: plan.config.paths,
    forwarding: {
      via: plan.config.forwarding.via,
      clientIpHeaders: new Set(plan.config.forwarding.clientIpHeaders),
    },
    clock,
    log,
    tls: certs,
    admin,
    files: plan.descriptors,
    acme: plan.config.acme && {
      challengeDir: plan.config.acme.challengeDir,
      otherwise: plan.config.acme.otherwise,
    },
  };
}

/** Reload and hub status: done by the owner's source here, or asked of the owner by a mirror. */
function runtimeCalls(
  { plan, worker }: BootContext,
  { reloader, follower }: Runtime,
): Pick<EdgeServices, "reloadConfig" | "hubStatus"> {
  return {
    reloadConfig: reloader
      ? () => reloader.reload()
      : follower
      ? () => follower.pollNow()
      : worker?.owner && (() => worker.owner!.reloadConfig()),
    hubStatus: follower
      ? () => follower.status()
      : worker?.owner && plan.config.runtime.kind === "remote"
      ? () => worker.owner!.hubStatus()
      : undefined,
  };
}

/**
 * A drain asked of the services (POST /v1/drain, a signal) stops every isolate: a mirror asks the
 * owner and waits for its own end, the owner drains all workers, a lone edge drains itself.
 */
function drainEverywhere(worker: WorkerRole | undefined, life: Lifecycle): Promise<void> {
  if (worker?.owner) {
    worker.owner.drain();
    return life.finished;
  }
  if (worker?.drainAll) return worker.drainAll();
  return life.drain();
}

/**
 * Creates this isolate's listeners, proves the server objects distinct, then binds them one by
 * one into `life.listening`; any failure closes what was bound and refuses the boot.
 */
async function bindListeners(
  boot: BootContext,
  life: Lifecycle,
  services: EdgeServices,
): Promise<void> {
  const { plan, worker } = boot;
  const context = bindContext(boot, life, services);
  const bound: Bound[] = plan.lanes.flatMap((lane) =>
    lane.listen.flatMap((address, index) =>
      bindsHere(worker, lane.table.descriptor.name, address)
        ? [createListener(lane.table, lane.role, index, address, context)]
        : []
    )
  );
  const objectProblems = checkDistinctObjects(bound);
  if (objectProblems.length > 0) {
    await life.abandon();
    throw new BootError(objectProblems.map((p) => p.message));
  }
  try {
    for (const grant of bound) {
      await listen(grant, worker !== undefined);
      life.listening.push(grant);
    }
  } catch (error) {
    await life.abandon();
    throw new BootError([(error as Error).message]);
  }
}

/** What every listener is built with: the services, the limits, and whether the edge is armed. */
function bindContext(
  { plan }: BootContext,
  life: Lifecycle,
  services: EdgeServices,
): BindContext {
  const limits = {
    ...plan.config.timeouts,
    headerBytes: plan.config.limits.headerBytes,
    headers: plan.config.limits.headers,
    targetBytes: plan.config.limits.targetBytes,
    paths: plan.config.paths,
  };
  return {
    services,
    limits,
    armed: () => life.armed,
    tls: plan.config.tls,
    helloTimeoutMs: plan.config.passthrough?.helloTimeoutMs ?? 5000,
  };
}

/**
 * Proves the addresses actually bound pairwise non-overlapping, then (with workers) waits for the
 * arm gate, which checks every worker's set together; a refusal closes everything.
 *
 * @returns the bound listeners with their actual addresses
 */
async function checkBound(boot: BootContext, life: Lifecycle): Promise<LaneListener[]> {
  const actual: LaneListener[] = life.listening.map((grant) => ({
    lane: grant.lane,
    role: grant.role,
    index: grant.index,
    address: boundAddress(grant),
  }));
  const overlap = checkListeners(actual);
  if (overlap.length > 0) {
    await life.abandon();
    throw new BootError(overlap.map((p) => p.message));
  }
  if (boot.worker) {
    try {
      await boot.worker.armGate(actual);
    } catch (error) {
      await life.abandon();
      throw error instanceof BootError ? error : new BootError([(error as Error).message]);
    }
  }
  return actual;
}

/**
 * Starts the descriptor watch: after an open-file exhaustion it makes the listeners accept again
 * (unless draining), and on every check it writes this isolate's gauges.
 */
function watchDescriptors({ plan, worker, log }: BootContext, life: Lifecycle): DescriptorWatch {
  const reusePort = worker !== undefined;
  const descriptors = new DescriptorWatch({
    canary: plan.config.file,
    log,
    async rearm() {
      if (life.state.draining) return 0;
      let count = 0;
      for (const grant of life.listening) {
        try {
          await rearm(grant, reusePort);
          count++;
        } catch (error) {
          log(`portcullis: ${describeListener(grant)} could not be re-armed: ${error}`);
        }
      }
      return count;
    },
    nudge() {
      if (life.state.draining) return;
      for (const grant of life.listening) nudge(grant);
    },
    report: (fds) => reportGauges(life, fds),
  });
  descriptors.start();
  void descriptors.check();
  return descriptors;
}

/**
 * Writes upstream sockets, descriptor state and heap into this isolate's share, in its own stripe;
 * /v1/health and /metrics sum the stripes.
 */
function reportGauges({ ledger, egress }: Lifecycle, fds: DescriptorState): void {
  const sockets = egress.sockets();
  const memory = ledger.memory;
  memory.set(COUNTER_INDEX.upstreamActive, sockets.active);
  memory.set(COUNTER_INDEX.upstreamIdle, sockets.idle);
  memory.set(COUNTER_INDEX.upstreamConnecting, sockets.connecting);
  memory.set(COUNTER_INDEX.tunnels, sockets.tunnels);
  memory.set(COUNTER_INDEX.descriptorsExhausted, fds.exhausted ? 1 : 0);
  memory.set(COUNTER_INDEX.descriptorExhaustions, fds.exhaustions);
  memory.set(COUNTER_INDEX.listenerRearms, fds.rearms);
  const heap = Deno.memoryUsage();
  memory.set(COUNTER_INDEX.heapUsed, heap.heapUsed);
  memory.set(COUNTER_INDEX.heapTotal, heap.heapTotal);
}

/** Logs one line per listener now serving, so an operator sees what is exposed where. */
function announce(
  { log }: BootContext,
  actual: readonly LaneListener[],
  certs: CertStore | undefined,
): void {
  for (const grant of actual) {
    const tls = !grant.role && grant.lane === "public" && certs ? " (TLS)" : "";
    log(
      `portcullis: ${describeListener(grant)} listening on ${formatAddress(grant.address)}${tls}`,
    );
  }
}

/** The running edge as callers see it: its services, its listeners, and drain and close. */
function edgeHandle(
  life: Lifecycle,
  services: EdgeServices,
  actual: readonly LaneListener[],
): Edge {
  return {
    services,
    listeners: actual.map((grant) => ({ lane: grant.lane, address: formatAddress(grant.address) })),
    drain: () => life.drain(),
    close: () => life.close(),
    finished: life.finished,
  };
}
