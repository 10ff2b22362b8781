/**
 * The public lane's tenant dataplane: the phases after `admit`, `head` and `allowlist`, in the
 * order of DESIGN §3. Each has one job and may answer the request itself:
 *
 * 1. `tenant` — the Host names a tenant, or the answer is 421 (never a default tenant; on TLS the
 *    Host must name the tenant the SNI named). The tenant's policies (the globals' for an unknown
 *    host) are taken here, with the security headers every reply will carry;
 * 2. `enabled` — a disabled tenant answers with its block response;
 * 3. `route` — match a route on the canonical path (methods, host, headers, query, cookies), or 404;
 * 4. `maintenance` — a route under maintenance is 503 with `Retry-After`;
 * 5. `shed` — a route below priority 8 is shed (503) when it holds one of the public lane's
 *    priority-reserve slots;
 * 6. `policies` — TTL blocklist, caps, per-client rate limit, blocklist rules, WAF;
 * 7. `action` — respond and redirect answer here; proxy goes on;
 * 8. `hygiene` — the upstream request decided once: rewritten path, forwarding context;
 * 9. `upstream` — egress, attempts, streaming with the caps' body limit (an `Upgrade` is tunnelled).
 *
 * Unknown hosts and unmatched paths are not exempt from the policies (docs/decisions.md §9): before
 * `tenant` answers 421 or `route` answers 404, the policies list runs for the request, so scanning
 * for names or paths costs the scanner rate budget like any other request.
 *
 * @module
 */
import type { Ledger } from "../ledger/ledger.ts";
import { checkPolicies, type PolicyServices, type PolicyTrail } from "../policy/checks.ts";
import type { TenantPolicies } from "../policy/policies.ts";
import type { RequestContext } from "../request/context.ts";
import type { Reply } from "../request/reply.ts";
import { runAction } from "../proxy/actions.ts";
import { failureReply } from "../request/errors.ts";
import type { RequestFacts } from "../proxy/routes.ts";
import type { Tenant, TenantRegistry } from "../proxy/tenants.ts";
import { forwardRequest, prepareForward, type UpstreamServices } from "../proxy/upstream.ts";
import type { Exchange } from "./exchange.ts";
import type { Phase } from "./phase.ts";

/**
 * What the dataplane needs from the edge.
 *
 * @internal
 */
export interface DataplaneServices extends UpstreamServices, PolicyServices {
  /** The tenant registry in force. */
  tenants(): TenantRegistry;
  /** The ledger, for priority shedding. */
  readonly ledger: Ledger;
}

/** Routes at or above this priority may use the public lane's priority reserve. */
export const HIGH_PRIORITY = 8;

/** The public lane's phases after the allowlist, in order. */
export const TENANT_PHASES: readonly Phase<DataplaneServices>[] = [
  { name: "tenant", run: tenantPhase },
  { name: "enabled", run: (x) => x.tenant!.enabled ? undefined : blockReply(x.tenant!, x) },
  { name: "route", span: "portcullis.route", run: routePhase },
  { name: "maintenance", run: maintenancePhase },
  { name: "shed", run: shedPhase },
  {
    name: "policies",
    span: "portcullis.policy",
    applies: (x) => x.trail !== undefined,
    run: (x, s) => runPolicies(x, s),
  },
  { name: "action", run: actionPhase },
  { name: "hygiene", run: hygienePhase },
  { name: "upstream", run: (x, s) => forwardRequest(x, x.forward!, s) },
];

/** Resolves the tenant and takes its policies; an unknown host is 421 once the globals' ran. */
function tenantPhase(exchange: Exchange, services: DataplaneServices): Pending {
  const registry = services.tenants();
  const tenant = resolveTenant(registry, exchange);
  const policies = tenant ? tenant.policies : registry.globalPolicies;
  exchange.tenant = tenant;
  if (policies.any) {
    const trail: PolicyTrail = { headers: [] };
    securityHeaders(policies, trail, services);
    exchange.policies = policies;
    exchange.trail = trail;
  }
  if (tenant) {
    if (exchange.record) exchange.record.tenantHost = tenant.host;
    return undefined;
  }
  return orElse(
    gatePolicies(exchange, services),
    () => failureReply("misdirected_request", exchange.requestId),
  );
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

/** Matches a route; no match is 404 once the tenant's policies ran. */
function routePhase(exchange: Exchange, services: DataplaneServices): Pending {
  const { head } = exchange;
  const match = exchange.tenant!.routes.match(
    head.method,
    head.path,
    head.host,
    requestFacts(exchange),
  );
  if (!match) {
    return orElse(
      gatePolicies(exchange, services),
      () => failureReply("no_route", exchange.requestId),
    );
  }
  exchange.match = match;
  if (exchange.record) exchange.record.route = match.route.name ?? "-";
  return undefined;
}

function maintenancePhase(exchange: Exchange): Reply | undefined {
  const maintenance = exchange.match!.route.maintenance;
  if (!maintenance) return undefined;
  const headers = { "retry-after": String(maintenance.retryAfterS) };
  return failureReply("maintenance", exchange.requestId, { headers });
}

function shedPhase(exchange: Exchange, services: DataplaneServices): Reply | undefined {
  const priority = exchange.match!.route.priority ?? 5;
  if (priority >= HIGH_PRIORITY || !services.ledger.shed(exchange.ticket)) return undefined;
  return failureReply("priority_shed", exchange.requestId);
}

/**
 * Runs the policies list taken by `tenant`, labelled with the matched route's name ("-" before a
 * route matched); a denial answers the request.
 */
function runPolicies(exchange: Exchange, services: DataplaneServices): Pending {
  const { policies, trail } = exchange;
  if (!policies || !trail) return undefined;
  const route = exchange.match?.route.name ?? "-";
  return checkPolicies(exchange, policies, route, services, trail);
}

/**
 * The policies run for a request about to be refused 421 or 404 (unrouted traffic is not exempt),
 * in a span of their own as in the `policies` phase.
 */
function gatePolicies(exchange: Exchange, services: DataplaneServices): Pending {
  if (!exchange.trail) return undefined;
  const span = exchange.record?.phase("portcullis.policy");
  const denied = runPolicies(exchange, services);
  const end = () => span?.end();
  if (denied instanceof Promise) denied.then(end, end);
  else end();
  return denied;
}

/** A phase's outcome, now or once a fleet store answered. */
type Pending = Reply | undefined | Promise<Reply | undefined>;

/** `outcome`, or `fallback()` when it lets the request by (now or once it settles). */
function orElse(outcome: Pending, fallback: () => Reply): Reply | Promise<Reply> {
  if (outcome instanceof Promise) return outcome.then((reply) => reply ?? fallback());
  return outcome ?? fallback();
}

/** Respond and redirect answer here; a proxy action goes on to hygiene and upstream. */
function actionPhase(exchange: Exchange): Reply | Promise<Reply> | undefined {
  const { route, params } = exchange.match!;
  const action = route.action;
  return action.kind === "proxy" ? undefined : runAction(action, exchange.head, params);
}

/** Decides the upstream request once, for every attempt. */
function hygienePhase(exchange: Exchange, services: DataplaneServices): Reply | undefined {
  const { route, params } = exchange.match!;
  if (route.action.kind !== "proxy") return undefined;
  const forward = prepareForward(
    exchange,
    route.action,
    params,
    services,
    exchange.trail?.maxBodyBytes,
  );
  if ("status" in forward) return forward;
  exchange.forward = forward;
  return undefined;
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
