/**
 * The public lane's tenant dataplane, as a fixed sequence of phases (DESIGN §3). Each phase has one
 * job and may answer the request itself:
 *
 * 1. resolve the tenant from the Host — unknown host is 421, never a default tenant (the
 *    `globals.yaml` policies still run first: unrouted traffic is not exempt);
 * 2. a disabled tenant answers with its block response;
 * 3. match a route (path, methods, host, headers, query, cookies);
 * 4. the tenant's policies: TTL blocklist, caps, per-client rate limit, blocklist rules, WAF;
 * 5. no route is a 404 envelope; a route under maintenance is 503 with `Retry-After`; a route
 *    below priority 8 is shed (503) when it holds one of the public lane's priority-reserve slots;
 * 6. run the route's action: respond, redirect, or proxy (header hygiene, egress, streaming with
 *    the caps' body limit; an `Upgrade` request is tunnelled).
 *
 * Every reply of a tenant with policies carries the rate headers and security headers they set.
 * Admission, the lane allowlist and the reserved paths run before this, in the lane server.
 *
 * @module
 */
import type { Ledger } from "../ledger/ledger.ts";
import { checkPolicies, decorate, type PolicyServices, type PolicyTrail } from "../policy/phase.ts";
import type { TenantPolicies } from "../policy/policies.ts";
import type { RequestContext } from "../server/lane.ts";
import type { Reply } from "../server/reply.ts";
import { runAction } from "./actions.ts";
import { failureReply } from "./errors.ts";
import type { RequestFacts, RouteMatch } from "./routes.ts";
import type { Action } from "./actions.ts";
import type { Tenant, TenantRegistry } from "./tenants.ts";
import { proxyRequest, type UpstreamServices } from "./upstream.ts";

/** What the dataplane needs from the edge. */
export interface DataplaneServices extends UpstreamServices, PolicyServices {
  /** The tenant registry in force. */
  tenants(): TenantRegistry;
  /** The ledger, for priority shedding. */
  readonly ledger: Ledger;
}

/** Routes at or above this priority may use the public lane's priority reserve. */
export const HIGH_PRIORITY = 8;

/**
 * Serves one admitted public request from the tenant registry.
 *
 * @param context the admitted request
 * @param services the tenants, the policies' counters and the egress
 */
export function serveTenant(
  context: RequestContext,
  services: DataplaneServices,
): Reply | Promise<Reply> {
  const registry = services.tenants();
  const tenant = resolveTenant(registry, context);
  const policies = tenant ? tenant.policies : registry.globalPolicies;
  if (!policies.any) return serveRouted(context, tenant, services);
  const trail: PolicyTrail = { headers: [] };
  securityHeaders(policies, trail, services);
  // Whatever reply goes out — this phase's, an upstream's, a failure or the deadline's — carries
  // the trail's headers; the lane server applies it.
  context.finishReply = (reply) => decorate(reply, trail, policies.strip);
  return serveRouted(context, tenant, services, { policies, trail });
}

/** The tenant the request names, or undefined when the gateway must answer 421. */
function resolveTenant(registry: TenantRegistry, context: RequestContext): Tenant | undefined {
  const tenant = registry.get(context.head.host);
  if (!tenant || tenant.passthrough) return undefined;
  // On TLS, the Host must name the tenant the SNI named (RFC 9110 §15.5.20): never another one.
  const sni = context.serverName;
  if (sni !== undefined && registry.get(sni) !== tenant) return undefined;
  return tenant;
}

/** The phases after tenant resolution; `policy` is absent when every policy is off. */
function serveRouted(
  context: RequestContext,
  tenant: Tenant | undefined,
  services: DataplaneServices,
  policy?: { policies: TenantPolicies; trail: PolicyTrail },
): Reply | Promise<Reply> {
  const { head, requestId, record } = context;
  if (record && tenant) record.tenantHost = tenant.host;
  if (tenant && !tenant.enabled) return blockReply(tenant, context);
  const routing = record?.phase("portcullis.route");
  const match: RouteMatch<Action> | undefined = tenant?.routes.match(
    head.method,
    head.path,
    head.host,
    requestFacts(context),
  );
  routing?.end();
  if (record && match) record.route = match.route.name ?? "-";
  if (policy) {
    const name = match?.route.name ?? "-";
    const checking = record?.phase("portcullis.policy");
    const denied = checkPolicies(context, policy.policies, name, services, policy.trail);
    checking?.end();
    if (denied) return denied;
  }
  if (!tenant) return failureReply("misdirected_request", requestId);
  if (!match) return failureReply("no_route", requestId);
  const route = match.route;
  if (route.maintenance) {
    const headers = { "retry-after": String(route.maintenance.retryAfterS) };
    return failureReply("maintenance", requestId, { headers });
  }
  if ((route.priority ?? 5) < HIGH_PRIORITY && services.ledger.shed(context.ticket)) {
    return failureReply("priority_shed", requestId);
  }
  const action = route.action;
  if (action.kind !== "proxy") return runAction(action, head, match.params);
  return proxyRequest(context, action, match.params, services, policy?.trail.maxBodyBytes);
}

/** Queues the tenant's security headers on the trail when on; in dry run they are only counted. */
function securityHeaders(
  policies: TenantPolicies,
  trail: PolicyTrail,
  services: PolicyServices,
): void {
  const security = policies.securityHeaders;
  if (!security) return;
  if (security.mode === "dry_run") services.policyStats.dryRun("security_headers", "-");
  else trail.headers.push(...security.add);
}
/** A disabled tenant's configured answer: a status with the envelope, a drop, or a held line. */
export function blockReply(tenant: Tenant, context: RequestContext): Reply {
  if (tenant.block === "drop") return { status: 0, withhold: "drop", failure: "tenant_blocked" };
  if (tenant.block === "timeout") return { status: 0, withhold: "hold", failure: "tenant_blocked" };
  return failureReply("tenant_blocked", context.requestId, { status: tenant.block });
}

/** Headers, query and cookies of a request, each parsed only when a route asks. */
export function requestFacts(context: RequestContext): RequestFacts {
  return new LazyFacts(context);
}

class LazyFacts implements RequestFacts {
  readonly #context: RequestContext;
  #query?: URLSearchParams;
  #cookies?: Map<string, string>;

  constructor(context: RequestContext) {
    this.#context = context;
  }

  header(name: string): string | undefined {
    const value = this.#context.headers[name];
    return Array.isArray(value) ? value.join(", ") : value;
  }

  query(name: string): string | undefined {
    this.#query ??= new URLSearchParams(this.#context.head.query);
    return this.#query.get(name) ?? undefined;
  }

  cookie(name: string): string | undefined {
    this.#cookies ??= parseCookies(this.#context.headers.cookie);
    return this.#cookies.get(name);
  }
}

/** Parses a Cookie header (RFC 6265 §4.2): `a=1; b=2`. Values are kept as sent. */
function parseCookies(header: string | undefined): Map<string, string> {
  const out = new Map<string, string>();
  for (const pair of (header ?? "").split(";")) {
    const eq = pair.indexOf("=");
    if (eq <= 0) continue;
    const name = pair.slice(0, eq).trim();
    if (!out.has(name)) out.set(name, pair.slice(eq + 1).trim());
  }
  return out;
}
