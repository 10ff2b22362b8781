/**
 * The tenant registry: host (and alias) to tenant, compiled from validated tenant files. Building
 * checks the whole set — host uniqueness, route actions, files inside the tenants folder — and
 * either yields a complete registry or every problem; never a partial one.
 *
 * @module
 */
import type { ConfigProblem } from "../config/problems.ts";
import { ConfigError } from "../config/problems.ts";
import type { PoliciesDocument } from "../config/policy_schema.ts";
import { parseRuntime, readRuntimeTexts, type TenantFile } from "../config/tenant_files.ts";
import { compilePolicies, NO_POLICIES, type TenantPolicies } from "../policy/policies.ts";
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

/** Every tenant by every name it answers to. */
export class TenantRegistry {
  readonly #byName: ReadonlyMap<string, Tenant>;
  /** Tenants in file order. */
  readonly tenants: readonly Tenant[];
  /** The `globals.yaml` policies: what requests for unknown hosts get. */
  readonly globalPolicies: TenantPolicies;
  /** What the globals' policies were compiled from. */
  readonly globalPolicyKey: string;

  /**
   * @param tenants compiled tenants whose names are unique
   * @param globalPolicies the globals' policies (for unknown hosts)
   * @param globalPolicyKey what they were compiled from
   */
  constructor(
    tenants: readonly Tenant[],
    globalPolicies: TenantPolicies = NO_POLICIES,
    globalPolicyKey = "",
  ) {
    this.tenants = tenants;
    this.globalPolicies = globalPolicies;
    this.globalPolicyKey = globalPolicyKey;
    const byName = new Map<string, Tenant>();
    for (const tenant of tenants) for (const name of tenant.names) byName.set(name, tenant);
    this.#byName = byName;
  }

  /** The tenant serving `host` (normalised), or undefined: never a default tenant. */
  get(host: string): Tenant | undefined {
    return this.#byName.get(host);
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
 * @param previous the registry this one replaces, if any
 * @returns the registry when the set is valid, and every problem found
 */
export async function buildRegistry(
  dir: string,
  texts: ReadonlyMap<string, string>,
  previous?: TenantRegistry,
): Promise<{ registry?: TenantRegistry; problems: ConfigProblem[] }> {
  const parsed = parseRuntime(dir, texts);
  const compiled = await compileTenants(dir, parsed.files, parsed.globals.policies, previous);
  const problems = [...parsed.problems, ...compiled.problems];
  if (problems.length > 0) return { problems };
  const key = policyKey(undefined, parsed.globals.policies);
  const globalPolicies = previous?.globalPolicyKey === key
    ? previous.globalPolicies
    : compilePolicies(undefined, parsed.globals.policies);
  return { registry: new TenantRegistry(compiled.tenants, globalPolicies, key), problems };
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
 */
export async function compileTenants(
  dir: string,
  files: readonly TenantFile[],
  globals: PoliciesDocument = {},
  previous?: TenantRegistry,
): Promise<{ tenants: Tenant[]; problems: ConfigProblem[] }> {
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
      policies: keptPolicies ?? compilePolicies(document.policies, globals),
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
