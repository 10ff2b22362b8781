/**
 * The tenant registry: host (and alias) to tenant, compiled from validated tenant files. Building
 * checks the whole set — host uniqueness, route actions, files inside the tenants folder — and
 * either yields a complete registry or every problem; never a partial one.
 *
 * @module
 */
import type { ConfigProblem } from "../config/problems.ts";
import { ConfigError } from "../config/problems.ts";
import { GLOBALS_FILE, type PoliciesDocument } from "../config/policy_schema.ts";
import { join } from "node:path";
import { parseRuntime, readRuntimeTexts, type TenantFile } from "../config/tenant_files.ts";
import { compilePolicies, NO_POLICIES, tablesOf, type TenantPolicies } from "../policy/policies.ts";
import { type FleetPolicies, GLOBAL_SCOPE } from "../policy/policy_context.ts";
import { PolicyTables } from "../policy/policy_tables.ts";
import type { Action } from "./actions.ts";
import { compileRoute } from "./route_compile.ts";
import { type RouteEntry, RouteTable } from "./routes.ts";

/** How a disabled tenant answers. */
export type BlockResponse = number | "drop" | "timeout";

/** A compiled tenant. */
export interface Tenant {
  readonly host: string;
  readonly names: readonly string[];
  readonly enabled: boolean;
  readonly block: BlockResponse;
  readonly routes: RouteTable<Action>;
  readonly routeCount: number;
  /** The compiled routes in file order. */
  readonly routeList: readonly RouteEntry<Action>[];
  /** The tenant's policies (tenant, then globals, then off). */
  readonly policies: TenantPolicies;
  /** What the policies were compiled from (a reload with the same key keeps their state). */
  readonly policyKey: string;
  /** Set for a passthrough tenant: TLS is piped by SNI to these backends, never terminated. */
  readonly passthrough?: {
    readonly backends: readonly { host: string; port: number; target: string }[];
  };
  /** The file it came from. */
  readonly file: string;
}

/**
 * Where a registry's policies keep their state: the edge's shared tables and its fleet stores. A
 * registry built from another passes its environment on, so a reload keeps every bucket and block.
 */
export interface PolicyEnvironment {
  readonly tables: PolicyTables;
  readonly fleet?: FleetPolicies;
  /** The stores this edge may use (`policy_stores`); absent: any (the hub checks no grants). */
  readonly stores?: readonly string[];
}

/**
 * Every tenant by every name it answers to.
 *
 * @internal
 */
export class TenantRegistry {
  readonly #byName: ReadonlyMap<string, Tenant>;
  /** Tenants in file order. */
  readonly tenants: readonly Tenant[];
  /** The `globals.yaml` policies: what requests for unknown hosts get. */
  readonly globalPolicies: TenantPolicies;
  /** What the globals' policies were compiled from. */
  readonly globalPolicyKey: string;
  /** Where the policies keep their state. */
  readonly environment: PolicyEnvironment;

  /**
   * @param tenants compiled tenants whose names are unique
   * @param globalPolicies the globals' policies (for unknown hosts)
   * @param globalPolicyKey what they were compiled from
   * @param environment the tables and stores they use
   */
  constructor(
    tenants: readonly Tenant[],
    globalPolicies: TenantPolicies = NO_POLICIES,
    globalPolicyKey = "",
    environment: PolicyEnvironment = { tables: new PolicyTables() },
  ) {
    this.tenants = tenants;
    this.globalPolicies = globalPolicies;
    this.globalPolicyKey = globalPolicyKey;
    this.environment = environment;
    const byName = new Map<string, Tenant>();
    for (const tenant of tenants) for (const name of tenant.names) byName.set(name, tenant);
    this.#byName = byName;
  }

  /** The tenant serving `host` (normalised), or undefined: never a default tenant. */
  get(host: string): Tenant | undefined {
    return this.#byName.get(host);
  }

  /** The names of the shared tables this registry's policies use. */
  tableNames(): Set<string> {
    const all = [this.globalPolicies, ...this.tenants.map((t) => t.policies)];
    return new Set(all.flatMap(tablesOf));
  }
}

/**
 * Reads, validates and compiles the tenants folder.
 *
 * @param dir the tenants folder
 * @throws {ConfigError} with every problem in every file
 */
export async function loadTenants(dir: string): Promise<TenantRegistry> {
  const read = await readRuntimeTexts(dir);
  const built = await buildRegistry(dir, read.texts);
  const problems = [...read.problems, ...built.problems];
  if (problems.length > 0 || !built.registry) throw new ConfigError(problems);
  return built.registry;
}

/**
 * Builds a registry from runtime YAML (a folder's, or a hub's), validating the whole set: every
 * file, every policy, host uniqueness, body files. Policies whose configuration did not change
 * since `previous` keep their state (rate-limit buckets, blocked addresses).
 *
 * @param dir the folder the files belong to (body files resolve inside it)
 * @param texts file name → text (`globals.yaml` and `<host>.yaml` files)
 * @param previous the registry this one replaces, if any (its environment is this one's)
 * @param environment the tables and stores of a first registry (default: tables of its own)
 * @returns the registry when the set is valid, and every problem found
 */
export async function buildRegistry(
  dir: string,
  texts: ReadonlyMap<string, string>,
  previous?: TenantRegistry,
  environment: PolicyEnvironment = previous?.environment ?? { tables: new PolicyTables() },
): Promise<{ registry?: TenantRegistry; problems: ConfigProblem[] }> {
  const parsed = parseRuntime(dir, texts);
  const globals = parsed.globals.policies;
  const storeProblems = checkStores(dir, parsed.files, globals, environment.stores);
  const compiled = await compileTenants(dir, parsed.files, { globals, previous, environment });
  const problems = [...parsed.problems, ...storeProblems, ...compiled.problems];
  if (problems.length > 0) return { problems };
  const key = policyKey(undefined, globals);
  const globalPolicies = previous?.globalPolicyKey === key
    ? previous.globalPolicies
    : compilePolicies(undefined, globals, { ...environment, scope: GLOBAL_SCOPE });
  const registry = new TenantRegistry(compiled.tenants, globalPolicies, key, environment);
  const kept = registry.tableNames();
  for (const name of previous?.tableNames() ?? []) kept.add(name);
  environment.tables.retain(kept);
  return { registry, problems };
}

/**
 * Every fleet store a policy names that the edge does not list in `policy_stores`: a tenant file
 * never widens where the edge may connect (its permission flags are derived from its own config).
 */
function checkStores(
  dir: string,
  files: readonly TenantFile[],
  globals: PoliciesDocument,
  allowed: readonly string[] | undefined,
): ConfigProblem[] {
  if (!allowed) return [];
  const problems: ConfigProblem[] = [];
  const check = (policies: PoliciesDocument | undefined, file: string, locate?: TenantFile) => {
    for (const name of ["rate_limit", "ttl_block"] as const) {
      const url = policies?.[name]?.store?.redis.url;
      if (url === undefined || allowed.includes(url)) continue;
      const path = ["policies", name, "store", "redis", "url"];
      problems.push({
        file,
        path,
        value: url,
        message: `Store "${url}" is not one of this edge's policy_stores (${
          allowed.length === 0 ? "none" : allowed.map((u) => `"${u}"`).join(", ")
        })`,
        at: locate?.source.locate(path),
      });
    }
  };
  check(globals, join(dir, GLOBALS_FILE));
  for (const tenant of files) check(tenant.document.policies, tenant.file, tenant);
  return problems;
}

/** What a tenant's compiled policies depend on: its own block and the globals'. */
function policyKey(tenant: PoliciesDocument | undefined, globals: PoliciesDocument): string {
  return JSON.stringify([tenant ?? null, globals]);
}

/**
 * Compiles validated tenant files, checking the rules that span fields and files.
 *
 * @param dir the tenants folder (body files must stay inside it)
 * @param files the validated files
 * @param options the globals' policies, the registry being replaced, where policies keep state
 */
export async function compileTenants(
  dir: string,
  files: readonly TenantFile[],
  options: {
    globals?: PoliciesDocument;
    previous?: TenantRegistry;
    environment?: PolicyEnvironment;
  } = {},
): Promise<{ tenants: Tenant[]; problems: ConfigProblem[] }> {
  const { globals = {}, previous } = options;
  const environment = options.environment ?? { tables: new PolicyTables() };
  const problems: ConfigProblem[] = [];
  const owners = new Map<string, string>();
  const tenants: Tenant[] = [];
  for (const { file, document, source } of files) {
    const problem = (path: (string | number)[], value: unknown, message: string) =>
      problems.push({ file, path, value, message, at: source.locate(path) });
    const names = [document.host, ...document.aliases];
    names.forEach((name, i) => {
      const owner = owners.get(name);
      if (owner) {
        problem(
          i === 0 ? ["host"] : ["aliases", i - 1],
          name,
          `Host is already served by ${owner}`,
        );
      } else {
        owners.set(name, file);
      }
    });
    const entries: RouteEntry<Action>[] = [];
    for (const [i, route] of document.routes.entries()) {
      const entry = await compileRoute(
        route,
        { dir, index: i, names, tenant: document.host },
        problem,
      );
      if (entry) entries.push(entry);
    }
    if (document.passthrough && document.routes.length > 0) {
      problem(
        ["routes"],
        undefined,
        "A passthrough tenant is never terminated, so it has no routes",
      );
    }
    const key = policyKey(document.policies, globals);
    const before = previous?.get(document.host);
    const keptPolicies = before?.host === document.host && before.policyKey === key
      ? before.policies
      : undefined;
    tenants.push({
      host: document.host,
      names,
      enabled: document.enabled,
      block: document.block_response,
      routes: new RouteTable(entries),
      routeCount: entries.length,
      routeList: entries,
      policies: keptPolicies ??
        compilePolicies(document.policies, globals, { ...environment, scope: document.host }),
      policyKey: key,
      passthrough: document.passthrough && {
        backends: document.passthrough.backends.map(splitTarget),
      },
      file,
    });
  }
  return { tenants, problems };
}

/** Splits a validated `host:port` (IPv6 in brackets). */
export function splitTarget(target: string): { host: string; port: number; target: string } {
  const cut = target.lastIndexOf(":");
  const host = target.slice(0, cut);
  return {
    host: host.startsWith("[") ? host.slice(1, -1) : host.toLowerCase(),
    port: Number(target.slice(cut + 1)),
    target: target.toLowerCase(),
  };
}
