/**
 * The boot steps of an edge that run before any listener exists, in the order `startEdge` runs
 * them: start the runtime source, load the credentials, load the certificates, create the
 * observer. Each is a named function that reads the {@link BootContext} and records in the
 * {@link Lifecycle} what it started; a step that can fail abandons the boot (`Lifecycle.abandon`
 * stops everything started so far) before refusing it, so a refused boot leaves no watch, timer or
 * channel behind.
 *
 * @module
 */
import { BootError } from "../boot/boot_error.ts";
import type { HubClientConfig } from "../config/load.ts";
import { readNamedFile } from "../config/rooted_read.ts";
import { loadErrorPages } from "../config/errors_schema.ts";
import { ConfigError } from "../config/problems.ts";
import type { ErrorPages } from "../request/error_pages.ts";
import { AccessLog } from "../observe/access_log.ts";
import { Observer } from "../observe/observer.ts";
import { type LogOutlet, standardOutlets } from "../observe/log_outlet.ts";
import { RequestMetrics } from "../observe/request_metrics.ts";
import { TenantLabels } from "../observe/tenant_label.ts";
import type { Tracing } from "../observe/tracing.ts";
import { shareEgress } from "../egress/share.ts";
import type { Backend } from "../egress/destinations.ts";
import { HealthChecks } from "../egress/health_checks.ts";
import type { TenantRegistry } from "../proxy/tenants.ts";
import { ConfigStore } from "../live/generations.ts";
import { type RuntimeReloader, runtimeReloader } from "../live/runtime_watch.ts";
import { followHub, type HubFollower } from "../live/hub_client.ts";
import { CertificateRenewal } from "../live/enrol.ts";
import { CertStore } from "../tls/certificates.ts";
import { watchCertificates } from "../tls/watch.ts";
import { AdminCredential } from "../server/admin.ts";
import { type AdminGate, loadAdminGate } from "../pipeline/admin_gate.ts";
import { checkReach, firstGenerationNumber } from "./plan.ts";
import { readLocalMachine } from "../egress/local_machine.ts";
import type { BootContext } from "./boot_context.ts";
import type { Lifecycle } from "./lifecycle.ts";

/** What runs beside the listeners from boot on: the generation store and what feeds it. */
export interface Runtime {
  readonly store: ConfigStore;
  /** Local mode, owner only: the folder watch. */
  readonly reloader?: RuntimeReloader;
  /** Remote mode, owner only: the hub stream. */
  readonly follower?: HubFollower;
  /** Where access-log lines go (the isolate's stdout outlet), unless the options take them. */
  readonly lines?: LogOutlet;
}

/**
 * Starts the runtime source (the owner's folder watch or hub stream), the egress sharing between
 * workers and the access-log batching, and tells `life` how to stop them all.
 */
export function startRuntime(boot: BootContext, life: Lifecycle): Runtime {
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
      renewal: runtime.hub.tls &&
        new CertificateRenewal({ nodeId: plan.config.nodeId, hub: runtime.hub, log }),
    })
    : undefined;
  const stopSharing = worker ? shareEgress(life.egress, worker.egressChannel) : () => {};
  const stopChecks = owns ? startHealthChecks(boot, life, store) : () => {};
  const lines = options.accessLog ? undefined : standardOutlets().stdout;
  life.stopRuntime = () => {
    reloader?.stop();
    follower?.stop();
    stopChecks();
    stopSharing();
  };
  return { store, reloader, follower, lines };
}

/**
 * The backends' active health checks (egress/health_checks.ts), in the owner only: its verdicts
 * reach the request workers with the shared egress outcomes. Rescheduled at every swap.
 */
function startHealthChecks(
  { clock, log, plan }: BootContext,
  life: Lifecycle,
  store: ConfigStore,
) {
  const userAgent = plan.config.forwarding.healthUserAgent;
  const checks = new HealthChecks({ egress: life.egress, clock, log, userAgent });
  checks.update(proxyBackends(store.registry()));
  const stopFollowing = store.onSwap((generation) =>
    checks.update(proxyBackends(generation.registry))
  );
  return function stopHealthChecks(): void {
    stopFollowing();
    checks.stop();
  };
}

/** Every proxy backend of every route of a registry, in file order (repeats included). */
function* proxyBackends(registry: TenantRegistry): Iterable<Backend> {
  for (const tenant of registry.tenants) {
    for (const route of tenant.routeList) {
      if (route.action.kind === "proxy") yield* route.action.backends;
    }
  }
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
    // Every set offered is judged against the machine as it is then (its hosts file, its names).
    async (registry) => checkReach(plan.config, registry, await readLocalMachine()),
    worker && {
      pointer: new Int32Array(worker.generation),
      prepareElsewhere: worker.prepareElsewhere,
    },
  );
}

/**
 * Loads the admin token and, for a hub-fed owner, reads the hub credentials: an unreadable one is
 * a config error that undoes the boot so far and refuses it, not a hub outage to wait out.
 */
export async function loadCredentials(
  boot: BootContext,
  life: Lifecycle,
): Promise<AdminCredential> {
  const { plan, owns } = boot;
  const runtime = plan.config.runtime;
  try {
    const { tokenFile, realm } = plan.config.admin;
    const admin = tokenFile
      ? await AdminCredential.load(tokenFile, realm)
      : AdminCredential.none(realm);
    // A hub credential the edge could never use is a config error, not a hub outage to wait out.
    if (owns && runtime.kind === "remote") await checkHubCredentials(runtime.hub);
    return admin;
  } catch (error) {
    await life.abandon();
    throw new BootError([(error as Error).message]);
  }
}

/**
 * Reads the public lane's admin gate (`lanes.public.admin_gate.file`), in every isolate that serves
 * it: a file that is missing, open to others or malformed undoes the boot so far and refuses it.
 */
export async function loadAdminGateStep(
  { plan }: BootContext,
  life: Lifecycle,
): Promise<AdminGate | undefined> {
  const gate = plan.config.adminGate;
  if (!gate) return undefined;
  try {
    return await loadAdminGate(gate.file);
  } catch (error) {
    await life.abandon();
    throw new BootError([(error as Error).message]);
  }
}

/**
 * Reads the error templates (`errors.templates`), in every isolate: a file that is missing, too
 * large or shows a request id the config withholds undoes the boot so far and refuses it.
 */
export async function loadErrorPagesStep(
  { plan }: BootContext,
  life: Lifecycle,
): Promise<ErrorPages> {
  try {
    return await loadErrorPages(plan.config.errors, plan.config.source);
  } catch (error) {
    await life.abandon();
    if (error instanceof ConfigError) throw error;
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
 *
 * A certificate file that fails is only a problem the load reports (the bootstrap certificate
 * serves meanwhile); a load that throws — the bootstrap certificate cannot be made for `tls.name`
 * — undoes the boot so far (runtime source, egress) and refuses it.
 */
export async function startCertificates(
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
  if (certs) {
    try {
      await certs.reload();
    } catch (error) {
      await life.abandon();
      const named = tlsConfig.name === undefined ? "" : ` (bootstrap name "${tlsConfig.name}")`;
      throw new BootError([
        `Cannot load the TLS certificates${named}: ${(error as Error).message}`,
      ]);
    }
  }
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
      { log },
    );
  }
  return certs;
}

/**
 * The observer (metrics, access log, traces) with its tenant labels; the owner says once when no
 * line can carry a tenant and when spans leave the process.
 */
export async function createObserver(
  boot: BootContext,
  tracing: Tracing,
  lines: LogOutlet | undefined,
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
    accessLog: new AccessLog({
      ...observe.accessLog,
      write: options.accessLog ?? ((line) => lines!.push(line)),
    }),
    labels,
    logQuery: observe.accessLog.query,
  });
}

/**
 * Connects the fleet stores (in the background: a store that is down at boot is retried while the
 * edge serves on its own tables); worker 0 listens for the blocks other edges publish.
 */
export async function startFleet({ plan, owns, log, clock }: BootContext, life: Lifecycle) {
  const fleet = plan.fleet;
  if (!fleet) return;
  await fleet.start({ log, clock, listen: owns });
  const stop = life.stopRuntime;
  life.stopRuntime = () => {
    stop();
    fleet.close();
  };
  if (owns) {
    log(
      `portcullis: fleet stores ${fleet.urls.join(", ")}: connecting (policies fall back to ` +
        "this edge's own tables while one is down)",
    );
  }
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
