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
 * @module
 */
import { checkDistinctObjects, checkListeners, type LaneListener } from "../boot/distinct.ts";
import { formatAddress, type ListenerAddress } from "../config/load.ts";
import type { LaneName } from "../ledger/lane.ts";
import { type Clock, Ledger } from "../ledger/ledger.ts";
import { ResponseStats } from "../observe/stats.ts";
import { AccessLog, diagnostics, type LogLevel } from "../observe/access_log.ts";
import { BufferedLines, Observer } from "../observe/observer.ts";
import { RequestMetrics } from "../observe/request_metrics.ts";
import { TenantLabels } from "../observe/tenant_label.ts";
import { Tracing } from "../observe/tracing.ts";
import { Egress } from "../egress/egress.ts";
import { shareEgress } from "../egress/share.ts";
import { PolicyStats } from "../policy/stats.ts";
import { egressSettings } from "../egress/settings.ts";
import { ConfigStore } from "../config/generations.ts";
import { runtimeReloader } from "../config/runtime_watch.ts";
import { followHub } from "../config/hub_client.ts";
import { AddressSet } from "../proxy/cidr.ts";
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
import { DescriptorWatch } from "../server/descriptors.ts";
import { AdminCredential } from "../server/admin.ts";
import { readNamedFile } from "../config/rooted_read.ts";
import type { HubClientConfig } from "../config/load.ts";
import { C } from "../ledger/memory.ts";
import { checkReach, type EdgePlan, firstGenerationNumber } from "./plan.ts";
import type { WorkerRole } from "./worker_role.ts";
import { LedgerMemory } from "../ledger/memory.ts";
import type { EdgeServices, EdgeState } from "./services.ts";

/** Boot refused after planning: a bind failed or a post-bind check did not hold. */
export class BootError extends Error {
  /** Every reason, one per line of the message. */
  readonly reasons: readonly string[];

  /** @param reasons why the boot was refused */
  constructor(reasons: readonly string[]) {
    super(reasons.join("\n"));
    this.name = "BootError";
    this.reasons = reasons;
  }
}

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
 * Which listeners an isolate binds. Alone, all of them. With request workers, worker 0 binds the
 * protected lanes (`local_health`, `provider_health`) and every Unix socket (one socket per path),
 * so a flooded public event loop can never delay a health probe; workers 1 … N bind the public
 * lane's TCP listeners, all of them, with `reusePort`.
 */
export function bindsHere(
  worker: Pick<WorkerRole, "index"> | undefined,
  lane: LaneName,
  address: ListenerAddress,
): boolean {
  if (!worker) return true;
  if (worker.index === 0) return lane !== "public" || address.kind === "unix";
  return lane === "public" && address.kind === "tcp";
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
  const log = options.log ?? levelled(plan.config.observe.logLevel);
  const clock = options.clock ?? (() => performance.timeOrigin + performance.now());
  const worker = options.worker;
  const owns = !worker || worker.index === 0;
  const tracing = Tracing.detect(options.version);
  if (tracing.refusal) throw new BootError([tracing.refusal]);
  const memory = worker && LedgerMemory.attach(worker.ledger, worker.index);
  const ledger = new Ledger(plan.profile, { clock, memory });
  const egress = new Egress(egressSettings(plan.config.egress), clock, options.random);
  const state: EdgeState = { ready: false, draining: false };
  let armed = false;
  let stopping: Promise<void> | undefined;
  let resolveFinished!: () => void;
  const finished = new Promise<void>((resolve) => resolveFinished = resolve);
  const stopped = finished;
  const runtime = plan.config.runtime;
  const store = new ConfigStore(
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
  const stopSharing = worker ? shareEgress(egress, worker.egressChannel) : () => {};
  const lines = options.accessLog ? undefined : new BufferedLines();
  const stopRuntime = () => {
    reloader?.stop();
    follower?.stop();
    stopSharing();
    lines?.close();
  };

  let admin: AdminCredential;
  try {
    const tokenFile = plan.config.admin.tokenFile;
    admin = tokenFile ? await AdminCredential.load(tokenFile) : AdminCredential.none();
    // A hub credential the edge could never use is a config error, not a hub outage to wait out.
    if (owns && runtime.kind === "remote") await checkHubCredentials(runtime.hub);
  } catch (error) {
    stopRuntime();
    throw new BootError([(error as Error).message]);
  }

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
  const stopWatching: StopWatching = certs && tlsConfig.watch && tlsConfig.certificates.length > 0
    ? watchCertificates(
      certs,
      tlsConfig.certificates.flatMap((c) => [c.certFile, c.keyFile]),
      log,
    )
    : () => {};
  const observe = plan.config.observe;
  let labels: TenantLabels | undefined;
  if (observe.saltFile) {
    const read = await TenantLabels.fromFile(observe.saltFile);
    labels = read.labels;
    if (read.problem && owns) {
      log(`portcullis: warning: ${read.problem}; no metric or log line carries a tenant`);
    }
  } else if (owns) {
    log(
      "portcullis: observe.salt_file is not set, so no metric, log line or span carries a " +
        "tenant (tenant labels are salted hashes, never plain hosts)",
    );
  }
  if (tracing.enabled && owns) {
    log(
      "portcullis: warning: tracing is on; Deno's OpenTelemetry exporter sends spans to " +
        "OTEL_EXPORTER_OTLP_ENDPOINT outside --allow-net (point it at a collector on loopback)",
    );
  }
  const observer = new Observer({
    tracing,
    metrics: new RequestMetrics(),
    accessLog: new AccessLog({ ...observe.accessLog, write: options.accessLog ?? lines!.push }),
    labels,
  });
  const services: EdgeServices = {
    nodeId: plan.config.nodeId,
    version: options.version,
    startedAt: Date.now(),
    ledger,
    stats: new ResponseStats(worker?.stats, worker?.index),
    policyStats: new PolicyStats(),
    observer,
    state,
    tenants: () => store.registry(),
    config: store,
    reloadConfig: reloader
      ? () => reloader.reload()
      : follower
      ? () => follower.pollNow()
      : worker?.owner && (() => worker.owner!.reloadConfig()),
    hubStatus: follower
      ? () => follower.status()
      : worker?.owner && runtime.kind === "remote"
      ? () => worker.owner!.hubStatus()
      : undefined,
    worker: { index: worker?.index ?? 0, count: worker?.count ?? 1 },
    drain: () => {
      if (worker?.owner) {
        worker.owner.drain();
        return stopped;
      }
      if (worker?.drainAll) return worker.drainAll();
      return drain();
    },
    egress,
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
  const limits = {
    ...plan.config.timeouts,
    headerBytes: plan.config.limits.headerBytes,
    headers: plan.config.limits.headers,
    targetBytes: plan.config.limits.targetBytes,
    paths: plan.config.paths,
  };

  const bindContext: BindContext = {
    services,
    limits,
    armed: () => armed,
    tls: plan.config.tls,
    helloTimeoutMs: plan.config.passthrough?.helloTimeoutMs ?? 5000,
  };
  const bound: Bound[] = plan.lanes.flatMap((lane) =>
    lane.listen.flatMap((address, index) =>
      bindsHere(worker, lane.table.descriptor.name, address)
        ? [createListener(lane.table, lane.role, index, address, bindContext)]
        : []
    )
  );
  const listening: Bound[] = [];
  /** Undoes a boot that will not complete: listeners, certificate watch, runtime source. */
  const abandon = async () => {
    await Promise.all(listening.map((grant) => closeListener(grant)));
    stopWatching();
    stopRuntime();
  };
  const objectProblems = checkDistinctObjects(bound);
  if (objectProblems.length > 0) {
    await abandon();
    throw new BootError(objectProblems.map((p) => p.message));
  }

  try {
    for (const grant of bound) {
      await listen(grant, worker !== undefined);
      listening.push(grant);
    }
  } catch (error) {
    await abandon();
    throw new BootError([(error as Error).message]);
  }
  const actual: LaneListener[] = listening.map((grant) => ({
    lane: grant.lane,
    role: grant.role,
    index: grant.index,
    address: boundAddress(grant),
  }));
  const overlap = checkListeners(actual);
  if (overlap.length > 0) {
    await abandon();
    throw new BootError(overlap.map((p) => p.message));
  }
  if (worker) {
    try {
      await worker.armGate(actual);
    } catch (error) {
      await abandon();
      throw error instanceof BootError ? error : new BootError([(error as Error).message]);
    }
  }
  armed = true;
  state.ready = true;
  const reusePort = worker !== undefined;
  const descriptors = new DescriptorWatch({
    canary: plan.config.file,
    log,
    async rearm() {
      if (state.draining) return 0;
      let count = 0;
      for (const grant of listening) {
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
      if (state.draining) return;
      for (const grant of listening) nudge(grant);
    },
    report(fds) {
      // This isolate's share, in its own stripe; /v1/health and /metrics sum the stripes.
      const sockets = egress.sockets();
      const memory = ledger.memory;
      memory.set(C.upstreamActive, sockets.active);
      memory.set(C.upstreamIdle, sockets.idle);
      memory.set(C.upstreamConnecting, sockets.connecting);
      memory.set(C.tunnels, sockets.tunnels);
      memory.set(C.descriptorsExhausted, fds.exhausted ? 1 : 0);
      memory.set(C.descriptorExhaustions, fds.exhaustions);
      memory.set(C.listenerRearms, fds.rearms);
      const heap = Deno.memoryUsage();
      memory.set(C.heapUsed, heap.heapUsed);
      memory.set(C.heapTotal, heap.heapTotal);
    },
  });
  descriptors.start();
  void descriptors.check();
  for (const grant of actual) {
    const tls = !grant.role && grant.lane === "public" && certs ? " (TLS)" : "";
    log(
      `portcullis: ${describeListener(grant)} listening on ${formatAddress(grant.address)}${tls}`,
    );
  }

  function drain(): Promise<void> {
    if (stopping) return stopping;
    state.draining = true;
    log("portcullis: draining: public admission stopped");
    const publicServers = listening.filter((grant) => grant.lane === "public");
    for (const grant of publicServers) {
      grant.stopAccepting();
      grant.closeIdle();
    }
    stopping = (async () => {
      const until = Date.now() + plan.config.drainMs;
      const inFlight = () => ledger.inUse("public");
      while (inFlight() > 0 && Date.now() < until) {
        await new Promise((resolve) => setTimeout(resolve, 25));
      }
      const left = inFlight();
      log(`portcullis: drained${left > 0 ? ` with ${left} public requests cut at the cap` : ""}`);
      // The drain request's own answer (and any health probe's) is delivered before the close.
      const protectedUntil = Date.now() + 2000;
      const answering = () => ledger.inUse("local_health") + ledger.inUse("provider_health");
      while (answering() > 0 && Date.now() < protectedUntil) {
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
      await shutdown();
    })();
    return stopping;
  }

  async function shutdown(): Promise<void> {
    state.ready = false;
    descriptors.stop();
    stopWatching();
    stopRuntime();
    await Promise.all(listening.map((grant) => closeListener(grant)));
    egress.close();
    resolveFinished();
  }

  return {
    services,
    listeners: actual.map((grant) => ({ lane: grant.lane, address: formatAddress(grant.address) })),
    drain,
    close() {
      if (!stopping) {
        state.draining = true;
        stopping = shutdown();
      }
      return stopping;
    },
    finished,
  };
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
