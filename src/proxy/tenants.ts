/**
 * The tenant registry: host (and alias) to tenant, compiled from validated tenant files. Building
 * checks the whole set — host uniqueness, route actions, files inside the tenants folder — and
 * either yields a complete registry or every problem; never a partial one.
 *
 * @module
 */
import { isAbsolute, join, normalize, relative, sep } from "node:path";
import type { ConfigProblem } from "../config/problems.ts";
import { ConfigError } from "../config/problems.ts";
import { readTenantFiles, type TenantFile } from "../config/tenant_files.ts";
import type { RouteDocument } from "../config/tenant_schema.ts";
import { type Action, namesNoPath, placeholders } from "./actions.ts";
import { parsePath, type RouteEntry, RouteTable } from "./routes.ts";

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
  /** The file it came from. */
  readonly file: string;
}

/** Every tenant by every name it answers to. */
export class TenantRegistry {
  readonly #byName: ReadonlyMap<string, Tenant>;
  /** Tenants in file order. */
  readonly tenants: readonly Tenant[];

  /** @param tenants compiled tenants whose names are unique */
  constructor(tenants: readonly Tenant[]) {
    this.tenants = tenants;
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
  const compiled = await compileTenants(dir, files);
  problems.push(...compiled.problems);
  if (problems.length > 0) throw new ConfigError(problems);
  return new TenantRegistry(compiled.tenants);
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
      const entry = await compileRoute(dir, route, i, names, problem);
      if (entry) entries.push(entry);
    }
    tenants.push({
      host: document.host,
      names,
      enabled: document.enabled,
      block: document.block_response,
      routes: new RouteTable(entries),
      routeCount: entries.length,
      file,
    });
  }
  return { tenants, problems };
}

async function compileRoute(
  dir: string,
  route: RouteDocument,
  i: number,
  names: readonly string[],
  problem: (path: (string | number)[], value: unknown, message: string) => void,
): Promise<RouteEntry<Action> | undefined> {
  const at = (...rest: string[]) => ["routes", i, ...rest];
  const before = { count: 0 };
  const fail = (path: (string | number)[], value: unknown, message: string) => {
    before.count++;
    problem(path, value, message);
  };
  const { match } = route;
  if ((match.path === undefined) === (match.prefix === undefined)) {
    fail(at("match"), undefined, "Give exactly one of match.path and match.prefix");
  }
  const pattern = match.prefix !== undefined
    ? { kind: "prefix" as const, prefix: match.prefix }
    : parsePath(match.path ?? "/");
  if (typeof pattern === "string") fail(at("match", "path"), match.path, pattern);
  if (match.host !== undefined && !names.includes(match.host)) {
    fail(at("match", "host"), match.host, "Route host must be the tenant's host or an alias");
  }
  if (route.proxy !== undefined) {
    fail(
      at("proxy"),
      undefined,
      "The proxy action arrives with SOCKS egress; use respond or redirect",
    );
  }
  const actions = [route.respond, route.redirect, route.proxy].filter((a) => a !== undefined);
  if (actions.length !== 1 && route.proxy === undefined) {
    fail(at(), undefined, "Give exactly one action: respond or redirect");
  }
  let action: Action | undefined;
  if (route.respond) {
    const { respond } = route;
    let file: string | undefined;
    if (respond.body !== undefined && respond.body_file !== undefined) {
      fail(at("respond"), undefined, "Give body or body_file, not both");
    }
    if (respond.body_file !== undefined) {
      file = await checkBodyFile(
        dir,
        respond.body_file,
        (message) => fail(at("respond", "body_file"), respond.body_file, message),
      );
    }
    action = {
      kind: "respond",
      status: respond.status,
      headers: lowerKeys(respond.headers),
      body: respond.body ?? "",
      file,
    };
  } else if (route.redirect) {
    const { location, status } = route.redirect;
    const params = typeof pattern === "object" && pattern.kind === "template"
      ? pattern.segments.flatMap((s) => typeof s === "string" ? [] : [s.param])
      : [];
    for (const name of placeholders(location)) {
      if (!params.includes(name)) {
        fail(at("redirect", "location"), location, `Placeholder {${name}} is not a path parameter`);
      }
    }
    action = { kind: "redirect", status, location, keepPath: namesNoPath(location) };
  }
  if (before.count > 0 || !action || typeof pattern === "string") return undefined;
  return {
    name: route.name ?? `route-${i}`,
    pattern,
    methods: match.methods ? new Set(match.methods) : undefined,
    host: match.host,
    action,
  };
}

async function checkBodyFile(
  dir: string,
  name: string,
  fail: (message: string) => void,
): Promise<string | undefined> {
  const path = normalize(isAbsolute(name) ? name : join(dir, name));
  const inside = relative(dir, path);
  if (inside === ".." || inside.startsWith(`..${sep}`) || isAbsolute(inside)) {
    fail("A body file must be inside the tenants folder");
    return undefined;
  }
  try {
    const info = await Deno.stat(path);
    if (!info.isFile) {
      fail("Not a regular file");
      return undefined;
    }
    // A symlink inside the folder must not lead outside it.
    const real = relative(await Deno.realPath(dir), await Deno.realPath(path));
    if (real === ".." || real.startsWith(`..${sep}`) || isAbsolute(real)) {
      fail("A body file must be inside the tenants folder (it links outside)");
      return undefined;
    }
  } catch {
    fail("Cannot read the body file");
    return undefined;
  }
  return path;
}

function lowerKeys(headers: Readonly<Record<string, string>>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [name, value] of Object.entries(headers)) out[name.toLowerCase()] = value;
  return out;
}
