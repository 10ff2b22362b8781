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
import { readGlobals, readTenantFiles, type TenantFile } from "../config/tenant_files.ts";
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

  /**
   * @param tenants compiled tenants whose names are unique
   * @param globalPolicies the globals' policies (for unknown hosts)
   */
  constructor(tenants: readonly Tenant[], globalPolicies: TenantPolicies = NO_POLICIES) {
    this.tenants = tenants;
    this.globalPolicies = globalPolicies;
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
  const { files, problems } = await readTenantFiles(dir);
  const { globals, problems: globalProblems } = await readGlobals(dir);
  problems.push(...globalProblems);
  const compiled = await compileTenants(dir, files, globals.policies);
  problems.push(...compiled.problems);
  if (problems.length > 0) throw new ConfigError(problems);
  return new TenantRegistry(compiled.tenants, compilePolicies(undefined, globals.policies));
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
    tenants.push({
      host: document.host,
      names,
      enabled: document.enabled,
      block: document.block_response,
      routes: new RouteTable(entries),
      routeCount: entries.length,
      routeList: entries,
      policies: compilePolicies(document.policies, globals),
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
