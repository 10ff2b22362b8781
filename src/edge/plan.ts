/**
 * Planning an edge: everything that can be checked before a socket is bound — the ledger profile
 * (lane defaults merged with the config), the listeners' distinctness and reach, allowlist
 * narrowing, timeouts, and the tenant set. `check` stops here; `serve` binds what was planned.
 *
 * @module
 */
import { checkListeners, type LaneListener, type ListenerRole } from "../boot/distinct.ts";
import { configuredLanes, type Grant, requiredGrants } from "../boot/flags.ts";
import { type EdgeConfig, formatAddress, type ListenerAddress } from "../config/load.ts";
import { ConfigError, type ConfigProblem } from "../config/problems.ts";
import { LANE_NAMES, type LaneName } from "../ledger/lane_names.ts";
import { type LaneProfileInput, type Profile, validateProfile } from "../ledger/profile.ts";
import { verifyCache } from "../live/cache.ts";
import { runtimeTextsOf } from "../config/file_set.ts";
import { type GenerationSource, hashTexts } from "../live/generations.ts";
import { readRuntimeTexts } from "../config/tenant_files.ts";
import { buildRegistry, type PolicyEnvironment, TenantRegistry } from "../proxy/tenants.ts";
import { PolicyTables, type SharedTables } from "../policy/policy_tables.ts";
import { TenantLabels } from "../observe/tenant_label.ts";
import { FleetStores } from "../fleet/stores.ts";
import { inwardMessage, tenantTargets } from "../proxy/inward.ts";
import { PrivateAllowance, refuseInternal } from "../egress/destinations.ts";
import { type LocalMachine, readLocalMachine } from "../egress/local_machine.ts";
import { type OwnListener, ownListener } from "../egress/own_listener.ts";
import { splitTarget } from "../request/host.ts";
import {
  type DescriptorLimit,
  type DescriptorPlan,
  probeCeiling,
  probeDescriptorLimit,
  publicCeiling,
  reservedDescriptors,
} from "../server/descriptors.ts";
import { compileLane, type LaneDescriptor, type LaneTable } from "../pipeline/lane_table.ts";

/** One set of listeners the edge will serve: a lane's own, or a companion of the public lane. */
export interface PlannedLane<S> {
  /** The lane compiled: its descriptor, routes and phases. */
  readonly table: LaneTable<S>;
  /** The addresses to bind. */
  readonly listen: readonly ListenerAddress[];
  /** `serve`: the lane's listeners (TLS on public when configured); else a companion role. */
  readonly role: "serve" | ListenerRole;
}

/**
 * What a generation was built from: enough to build it again in another worker.
 *
 * @internal
 */
export interface RuntimeSnapshot {
  readonly dir: string;
  readonly texts: ReadonlyMap<string, string>;
  readonly hash: string;
  readonly source: GenerationSource;
}

/** The first generation's number: 1, or 0 for the empty set a remote edge starts with. */
export function firstGenerationNumber(runtime: RuntimeSnapshot): number {
  return runtime.hash === "" ? 0 : 1;
}

/** Everything `serve` needs, checked. */
export interface EdgePlan<S> {
  /** The config it was planned from. */
  readonly config: EdgeConfig;
  /** The ledger profile, validated. */
  readonly profile: Profile;
  /** Every set of listeners to bind, in lane order. */
  readonly lanes: readonly PlannedLane<S>[];
  /** The first generation's registry. */
  readonly tenants: TenantRegistry;
  /** What the first generation was built from. */
  readonly runtime: RuntimeSnapshot;
  /** The permissions the process needs for this config, exactly. */
  readonly grants: readonly Grant[];
  /** The open-file limit and what it left the public lane; absent when not measured. */
  readonly descriptors?: DescriptorPlan;
  /** The fleet stores (`policy_stores`), not yet connected. */
  readonly fleet?: FleetStores;
}

/**
 * Checks a config against the lanes' rules and loads its tenants.
 *
 * @param config the validated bootstrap config
 * @param descriptors every lane Portcullis has (from `lanes/`)
 * @returns the plan
 * @throws {ConfigError} with every problem found in the config and the tenant files
 */
export async function planEdge<S>(
  config: EdgeConfig,
  descriptors: readonly LaneDescriptor<S>[],
  options: {
    readonly first?: RuntimeSnapshot;
    /** `"probe"` measures the open-file limit (serve, at boot); a limit is used as given. */
    readonly fileLimit?: DescriptorLimit | "probe";
    /** Worker 0's policy tables, in another request worker (default: tables of its own). */
    readonly tables?: SharedTables;
  } = {},
): Promise<EdgePlan<S>> {
  const problems: ConfigProblem[] = [];
  const problem = (path: (string | number)[], value: unknown, message: string) =>
    problems.push({ file: config.file, path, value, message, at: config.source.locate(path) });
  const byName = new Map(descriptors.map((d) => [d.name, d]));
  const enabled = configuredLanes(config);

  // Tenants load first: a high-priority route gives the public lane a default priority reserve.
  const environment = await policyEnvironment(config, options.tables);
  const fleet = environment.fleet;
  const first = options.first
    ? {
      ...options.first,
      ...(await buildRegistry(options.first.dir, options.first.texts, undefined, environment)),
    }
    : await firstGeneration(config, environment);
  const tenants = first.registry;
  const tenantProblems = first.problems;
  const priorityRoutes = tenants?.tenants.some((t) =>
    t.routeList.some((r) => (r.priority ?? 5) >= 8)
  );

  const inputs = {} as Record<LaneName, LaneProfileInput>;
  for (const name of LANE_NAMES) {
    const descriptor = byName.get(name);
    if (!descriptor) throw new RangeError(`No descriptor for lane "${name}"`);
    const on = enabled.includes(name);
    const given = config.ledger.lanes[name] ?? {};
    const d = descriptor.defaults;
    inputs[name] = {
      enabled: on,
      reserve: given.reserve ?? (on ? d.reserve : 0),
      max_slots: given.max_slots,
      max_connections: given.max_connections ?? d.max_connections,
      footprint_bytes: given.footprint_bytes ?? d.footprint_bytes,
      deadline_ms: given.deadline_ms ?? d.deadline_ms,
      rate: given.rate ?? d.rate,
      rate_required: d.rate_required,
      priority_reserve: given.priority_reserve ?? (name === "public" && priorityRoutes ? -1 : 0),
    };
  }
  const fds = planDescriptors(config, inputs, options.fileLimit);
  const checked = validateProfile({ ...config.ledger, lanes: inputs });
  if (!checked.ok) {
    for (const p of checked.problems) problem(["ledger", ...p.path], p.value, p.message);
  }

  const listeners: LaneListener[] = [
    ...enabled.flatMap((lane) =>
      config.lanes[lane]!.listen.map((address, index) => ({ lane, index, address }))
    ),
    ...companionListeners(config),
  ];
  for (const p of checkListeners(listeners)) {
    const listener = listeners.find((l) =>
      l.lane === p.lane && l.index === p.index && l.role === p.role
    )!;
    problem(listenerPath(listener), formatAddress(listener.address), p.message);
  }
  // The operator's own allowances may not open a way into this process either, by any name.
  const own = ownListeners(config);
  const machine = await readLocalMachine();
  for (const field of ["direct", "allow_private"] as const) {
    config.egress[field].forEach((entry, index) => {
      const target = splitTarget(entry);
      const inward = target && ownListener(target.host, target.port, own, machine);
      if (inward) {
        problem(["egress", field, index], entry, inwardMessage(entry, inward, machine));
      }
    });
  }

  const lanes: PlannedLane<S>[] = [];
  for (const name of enabled) {
    const lane = config.lanes[name]!;
    const table = compileLane(byName.get(name)!, lane.allow);
    if ("unknown" in table) {
      problem(
        ["lanes", name, "allow"],
        table.unknown,
        `Lane "${name}" does not serve these paths; config may narrow a lane, never widen it`,
      );
      continue;
    }
    lanes.push({ table, listen: lane.listen, role: "serve" });
    const acmeDescriptor = byName.get(name)!.acme;
    if (name === "public" && config.acme && acmeDescriptor) {
      const acmeTable = compileLane(acmeDescriptor);
      if (!("unknown" in acmeTable)) {
        lanes.push({ table: acmeTable, listen: [config.acme.listen], role: "acme_http" });
      }
    }
    if (name === "public" && config.passthrough) {
      lanes.push({ table, listen: config.passthrough.listen, role: "passthrough" });
    }
  }
  problems.push(...checkTls(config));

  if (config.sharedEventLoop && config.workers > 1) {
    problem(
      ["shared_event_loop"],
      true,
      `A shared event loop is one isolate; it cannot go with ${config.workers} workers`,
    );
  }

  if (config.timeouts.headerMs > config.timeouts.requestMs) {
    problem(
      ["timeouts", "header_ms"],
      config.timeouts.headerMs,
      `The head timeout cannot exceed request_ms (${config.timeouts.requestMs})`,
    );
  }

  const breaker = config.egress.breaker;
  if (breaker.min_samples > breaker.window) {
    problem(
      ["egress", "breaker", "min_samples"],
      breaker.min_samples,
      `A breaker that needs more samples than its window (${breaker.window}) could never open`,
    );
  }

  problems.push(...tenantProblems);
  if (tenants) problems.push(...checkReach(config, tenants, machine));
  if (problems.length > 0 || !checked.ok || !tenants) throw new ConfigError(problems);
  return {
    config,
    profile: checked.profile,
    lanes,
    tenants,
    runtime: { dir: first.dir, texts: first.texts, hash: first.hash, source: first.source },
    grants: requiredGrants(config),
    ...(fds ? { descriptors: fds } : {}),
    ...(fleet ? { fleet } : {}),
  };
}

/**
 * Fits the public lane under the open-file limit: unless the config sets its `max_connections`,
 * the lane gets what the limit leaves after the protected lanes, the upstreams and the runtime
 * (`inputs` is updated). Measures the limit when asked to.
 */
function planDescriptors(
  config: EdgeConfig,
  inputs: Record<LaneName, LaneProfileInput>,
  given: DescriptorLimit | "probe" | undefined,
): DescriptorPlan | undefined {
  if (given === undefined || !inputs.public.enabled) return undefined;
  const protectedConnections = LANE_NAMES.filter((lane) => lane !== "public")
    .reduce((sum, lane) => sum + (inputs[lane].enabled ? inputs[lane].max_connections : 0), 0);
  const budget = { protectedConnections, applicationSlots: config.ledger.application_slots };
  const preferred = inputs.public.max_connections;
  const limit = given === "probe"
    ? probeDescriptorLimit(config.file, probeCeiling(budget, preferred))
    : given;
  if (!limit) return undefined;
  const derived = config.ledger.lanes.public?.max_connections === undefined;
  if (derived) {
    inputs.public = {
      ...inputs.public,
      max_connections: publicCeiling({ ...budget, limit }, preferred),
    };
  }
  return {
    limit,
    reserved: reservedDescriptors({ ...budget, limit }),
    publicConnections: inputs.public.max_connections,
    derived,
  };
}

/**
 * The generation an edge starts with. Local mode: the tenants folder, which must be valid. Remote
 * mode: the cached last good generation when every file of it verifies against the manifest and
 * the hub's hash, and builds from the bytes that were verified; else an empty set (every host is
 * 421 until the hub's first snapshot arrives). The hub client checks the cache again as it starts,
 * and it is the one that logs a refusal and shows it in `/v1/config`.
 */
async function firstGeneration(config: EdgeConfig, environment: PolicyEnvironment): Promise<{
  registry?: TenantRegistry;
  problems: ConfigProblem[];
  dir: string;
  texts: ReadonlyMap<string, string>;
  hash: string;
  source: GenerationSource;
}> {
  const runtime = config.runtime;
  if (runtime.kind === "local") {
    const read = await readRuntimeTexts(runtime.dir);
    const built = await buildRegistry(runtime.dir, read.texts, undefined, environment);
    return {
      registry: read.problems.length === 0 ? built.registry : undefined,
      problems: [...read.problems, ...built.problems],
      dir: runtime.dir,
      texts: read.texts,
      hash: await hashTexts(read.texts),
      source: "directory",
    };
  }
  const cached = await verifyCache(runtime.cacheDir);
  if (cached.state === "verified") {
    const texts = runtimeTextsOf(cached.files);
    const built = await buildRegistry(cached.folder, texts, undefined, environment);
    const reachable = built.registry &&
      checkReach(config, built.registry, await readLocalMachine()).length === 0;
    if (built.registry && reachable) {
      return {
        registry: built.registry,
        problems: [],
        dir: cached.folder,
        texts,
        hash: cached.hash,
        source: "cache",
      };
    }
  }
  return {
    registry: new TenantRegistry([], undefined, undefined, environment),
    problems: [],
    dir: runtime.cacheDir,
    texts: new Map(),
    hash: "",
    source: "cache",
  };
}

/**
 * Every proxy backend must have a way out (`egress.direct` lists it, or a SOCKS pool exists), and
 * none may reach this process or an internal address the operator did not allow — judging names
 * by where `machine` resolves them (read once per load; `readLocalMachine`).
 */
export function checkReach(
  config: EdgeConfig,
  tenants: TenantRegistry,
  machine?: LocalMachine,
): ConfigProblem[] {
  const direct = new Set(config.egress.direct.map((target) => target.toLowerCase()));
  const socks = config.egress.socks.length > 0;
  const own = ownListeners(config);
  const allowance = new PrivateAllowance(config.egress.allow_private);
  const problems: ConfigProblem[] = [];
  for (const { file, path, value, host, port, target } of tenantTargets(tenants)) {
    const inward = ownListener(host, port, own, machine);
    const internal = inward ? undefined : refuseInternal(host, port, allowance, machine);
    const message = inward
      ? inwardMessage(target, inward, machine)
      : internal
      ? `${internal} of ${config.file}`
      : socks || direct.has(target)
      ? undefined
      : `No way out to ${target}: list it in egress.direct of ${config.file}, ` +
        "or configure egress.socks";
    if (message !== undefined) problems.push({ file, path, value, message });
  }
  for (const tenant of tenants.tenants) {
    if (tenant.passthrough && !config.passthrough) {
      problems.push({
        file: tenant.file,
        path: ["passthrough"],
        message: `A passthrough tenant needs lanes.public.passthrough in ${config.file}`,
      });
    }
  }
  return problems;
}

/** Every TCP listener of an edge, named by where its config declares it. */
export function ownListeners(config: EdgeConfig): OwnListener[] {
  const out: OwnListener[] = [];
  const add = (address: ListenerAddress, name: string) => {
    if (address.kind === "tcp") out.push({ hostname: address.hostname, port: address.port, name });
  };
  for (const lane of LANE_NAMES) {
    config.lanes[lane]?.listen.forEach((address, i) => add(address, `lanes.${lane}.listen[${i}]`));
  }
  if (config.acme) add(config.acme.listen, "lanes.public.acme_http");
  config.passthrough?.listen.forEach((address, i) =>
    add(address, `lanes.public.passthrough.listen[${i}]`)
  );
  return out;
}

/** The public lane's companion listeners (ACME http-01, passthrough), for the distinct check. */
function companionListeners(config: EdgeConfig): LaneListener[] {
  const out: LaneListener[] = [];
  if (config.acme) {
    out.push({ lane: "public", index: 0, address: config.acme.listen, role: "acme_http" });
  }
  config.passthrough?.listen.forEach((address, index) =>
    out.push({ lane: "public", index, address, role: "passthrough" })
  );
  return out;
}

/** Where a listener sits in the bootstrap file. */
function listenerPath(listener: LaneListener): (string | number)[] {
  if (listener.role === "acme_http") return ["lanes", "public", "acme_http"];
  if (listener.role === "passthrough") {
    return ["lanes", "public", "passthrough", "listen", listener.index];
  }
  return ["lanes", listener.lane, "listen", listener.index];
}

/** TLS rules that span fields: one default certificate at most. */
function checkTls(config: EdgeConfig): ConfigProblem[] {
  const defaults = config.tls?.certificates.filter((c) => c.isDefault).length ?? 0;
  if (defaults <= 1) return [];
  return [{
    file: config.file,
    path: ["lanes", "public", "tls", "certificates"],
    value: defaults,
    message: "At most one certificate can be the default",
    at: config.source.locate(["lanes", "public", "tls", "certificates"]),
  }];
}

/**
 * Where this edge's policies keep their state: its shared tables (worker 0's, in another worker)
 * and the fleet stores its config lists, keyed with the tenant salt (connected when the edge
 * starts, never while planning).
 *
 * @throws {ConfigError} when stores are listed and the salt file cannot be used
 */
async function policyEnvironment(
  config: EdgeConfig,
  shared?: SharedTables,
): Promise<PolicyEnvironment & { fleet?: FleetStores }> {
  const tables = new PolicyTables(shared);
  const saltFile = config.observe.saltFile;
  if (config.policyStores.length === 0 || !saltFile) return { tables, stores: config.policyStores };
  const read = await TenantLabels.fromFile(saltFile);
  if (!read.labels) {
    const path = ["observe", "salt_file"];
    throw new ConfigError([{
      file: config.file,
      path,
      value: saltFile,
      message: `${read.problem}: policy_stores key every client with it`,
      at: config.source.locate(path),
    }]);
  }
  const fleet = new FleetStores(config.policyStores, read.labels.salt());
  return { tables, stores: config.policyStores, fleet };
}
