/**
 * Compiles one validated route: its path pattern, methods, host and header/query/cookie criteria,
 * and its action — `respond` (with a body file checked to stay inside the tenants folder here, and
 * again at every request that serves it),
 * `redirect` (placeholders must be path parameters) or `proxy` (backends, rewrite, retries).
 *
 * @module
 */
import { isAbsolute, join, normalize, relative, sep } from "node:path";
import { checkRooted, RootedReadError } from "../config/rooted_read.ts";
import type { ProxyDocument, RouteDocument } from "../config/tenant_schema.ts";
import { type Action, namesNoPath, placeholders } from "./actions.ts";
import type { Backend, BackendHealth } from "../egress/destinations.ts";
import { compileRewrite } from "./rewrite.ts";
import { compileRouteTls } from "./backend_tls.ts";
import { type Condition, parsePath, type PathPattern, type RouteEntry } from "./routes.ts";

type HealthDocument = NonNullable<ProxyDocument["backends"][number]["health"]>;

/** Where a route sits: its tenant and folder, for checks and diagnostics. */
export interface RouteSite {
  readonly dir: string;
  readonly index: number;
  /** Every name the tenant answers to. */
  readonly names: readonly string[];
  readonly tenant: string;
}

/** Reports a problem at a field path inside the tenant file. */
export type Report = (path: (string | number)[], value: unknown, message: string) => void;

/**
 * Compiles a route, reporting every problem.
 *
 * @returns the route, or undefined when it has problems (all reported)
 */
export async function compileRoute(
  route: RouteDocument,
  site: RouteSite,
  report: Report,
): Promise<RouteEntry<Action> | undefined> {
  let problems = 0;
  const at = (...rest: string[]) => ["routes", site.index, ...rest];
  const fail: Report = (path, value, message) => {
    problems++;
    report(path, value, message);
  };
  const { match } = route;
  if ((match.path === undefined) === (match.prefix === undefined)) {
    fail(at("match"), undefined, "Give exactly one of match.path and match.prefix");
  }
  const pattern = match.prefix !== undefined
    ? { kind: "prefix" as const, prefix: match.prefix }
    : parsePath(match.path ?? "/");
  if (typeof pattern === "string") fail(at("match", "path"), match.path, pattern);
  if (match.host !== undefined && !site.names.includes(match.host)) {
    fail(at("match", "host"), match.host, "Route host must be the tenant's host or an alias");
  }
  const actions = [route.respond, route.redirect, route.proxy].filter((a) => a !== undefined);
  if (actions.length !== 1) {
    fail(at(), undefined, "Give exactly one action: respond, redirect or proxy");
  }
  const params = typeof pattern === "object" && pattern.kind === "template"
    ? pattern.segments.flatMap((s) => typeof s === "string" ? [] : [s.param])
    : [];
  const name = route.name ?? `route-${site.index}`;
  const action = await compileAction(route, { ...site, params, name }, at, fail);
  if (problems > 0 || !action || typeof pattern === "string") return undefined;
  const criteria = {
    headers: conditions(match.headers, (n) => n.toLowerCase()),
    query: conditions(match.query),
    cookies: conditions(match.cookies),
  };
  const hasCriteria = criteria.headers.length + criteria.query.length + criteria.cookies.length > 0;
  return {
    name,
    index: site.index,
    pattern: pattern as PathPattern,
    methods: match.methods ? new Set(match.methods) : undefined,
    host: match.host,
    criteria: hasCriteria ? criteria : undefined,
    priority: route.priority,
    maintenance: route.maintenance && { retryAfterS: route.maintenance.retry_after_s },
    action,
  };
}

function conditions(
  given: Readonly<Record<string, true | string>> | undefined,
  name: (text: string) => string = (text) => text,
): Condition[] {
  return Object.entries(given ?? {}).map(([key, want]) => [name(key), want]);
}

async function compileAction(
  route: RouteDocument,
  site: RouteSite & { params: readonly string[]; name: string },
  at: (...rest: string[]) => (string | number)[],
  fail: Report,
): Promise<Action | undefined> {
  if (route.respond) {
    const { respond } = route;
    let file: string | undefined;
    if (respond.body !== undefined && respond.body_file !== undefined) {
      fail(at("respond"), undefined, "Give body or body_file, not both");
    }
    if (respond.body_file !== undefined) {
      file = await checkBodyFile(
        site.dir,
        respond.body_file,
        (message) => fail(at("respond", "body_file"), respond.body_file, message),
      );
    }
    const action = {
      kind: "respond" as const,
      status: respond.status,
      headers: lowerKeys(respond.headers),
      body: respond.body ?? "",
      file,
    };
    return file === undefined ? action : { ...action, root: site.dir };
  }
  if (route.redirect) {
    const { location, status } = route.redirect;
    for (const name of placeholders(location)) {
      if (!site.params.includes(name)) {
        fail(at("redirect", "location"), location, `Placeholder {${name}} is not a path parameter`);
      }
    }
    return { kind: "redirect", status, location, keepPath: namesNoPath(location) };
  }
  if (route.proxy) {
    const { proxy } = route;
    const rewrite = proxy.rewrite ? compileRewrite(proxy.rewrite, site.params) : undefined;
    if (typeof rewrite === "string") fail(at("proxy", "rewrite"), proxy.rewrite, rewrite);
    const https = proxy.backends.some((backend) => backend.url.startsWith("https://"));
    if (proxy.tls && !https) {
      fail(at("proxy", "tls"), undefined, "tls applies to https:// backends; this route has none");
    }
    const tls = https
      ? await compileRouteTls(
        site.dir,
        proxy.tls,
        (field, value, message) => fail(at("proxy", "tls", field), value, message),
      )
      : undefined;
    const backends = proxy.backends.map((backend) => {
      const url = parseBackend(backend.url, backend.weight);
      const pending = backend.max_pending ? { ...url, maxPending: backend.max_pending } : url;
      const parsed = backend.health
        ? { ...pending, health: compileHealth(backend.health) }
        : pending;
      return parsed.key.startsWith("https://") && tls
        ? { ...parsed, tls: tls.forHost(parsed.hostname) }
        : parsed;
    });
    return {
      kind: "proxy",
      backends,
      rewrite: typeof rewrite === "function" ? rewrite : undefined,
      attempts: proxy.attempts,
      retryPost: proxy.retry_post,
      connectMs: proxy.connect_ms,
      firstByteMs: proxy.first_byte_ms,
      tenant: site.tenant,
      route: site.name,
    };
  }
  return undefined;
}

/** A backend's validated `health` field, as the egress's health checks read it. */
function compileHealth(health: HealthDocument): BackendHealth {
  const expect = health.expect_status;
  return {
    path: health.path,
    intervalMs: health.interval_ms,
    timeoutMs: health.timeout_ms,
    expectStatus: typeof expect === "number" ? [expect] : [...new Set(expect)],
    failures: health.failures,
  };
}

/**
 * Splits a validated `http(s)://host[:port]` backend URL (port 80 or 443 when absent). The TLS
 * settings of an `https://` backend are added by the route (backend_tls.ts).
 */
export function parseBackend(url: string, weight: number): Backend {
  const scheme = url.startsWith("https://") ? "https" : "http";
  const authority = url.slice(scheme.length + 3).replace(/\/$/, "");
  const portMatch = /:(\d{1,5})$/.exec(authority);
  const hostPart = portMatch ? authority.slice(0, portMatch.index) : authority;
  const hostname = hostPart.startsWith("[") ? hostPart.slice(1, -1) : hostPart.toLowerCase();
  const port = portMatch ? Number(portMatch[1]) : scheme === "https" ? 443 : 80;
  return {
    key: `${scheme}://${authority.toLowerCase()}`,
    hostname,
    port,
    authority: authority.toLowerCase(),
    target: `${hostPart.toLowerCase()}:${port}`,
    weight,
  };
}

async function checkBodyFile(
  dir: string,
  name: string,
  fail: (message: string) => void,
): Promise<string | undefined> {
  const path = normalize(isAbsolute(name) ? name : join(dir, name));
  if (!inside(dir, path)) {
    fail("A body file must be inside the tenants folder");
    return undefined;
  }
  try {
    // The check every request that serves it repeats (body_file.ts).
    await checkRooted(dir, path);
  } catch (error) {
    const reason = error instanceof RootedReadError ? error.reason : "unreadable";
    fail(
      reason === "outside"
        ? "A body file must be inside the tenants folder (it links outside)"
        : reason === "not_regular"
        ? "Not a regular file"
        : "Cannot read the body file",
    );
    return undefined;
  }
  return path;
}

function inside(dir: string, path: string): boolean {
  const rest = relative(dir, path);
  return !(rest === ".." || rest.startsWith(`..${sep}`) || isAbsolute(rest));
}

function lowerKeys(headers: Readonly<Record<string, string>>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [name, value] of Object.entries(headers)) out[name.toLowerCase()] = value;
  return out;
}
