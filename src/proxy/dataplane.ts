/**
 * The public lane's tenant dataplane, as a fixed sequence of phases (DESIGN §3). Each phase has one
 * job and may answer the request itself:
 *
 * 1. resolve the tenant from the Host — unknown host is 421, never a default tenant;
 * 2. a disabled tenant answers with its block response;
 * 3. match a route (path, methods, host, headers, query, cookies) — no match is a 404 envelope;
 * 4. run the route's action: respond, redirect, or proxy (header hygiene, egress, streaming; an
 *    `Upgrade` request is tunnelled).
 *
 * Admission, the lane allowlist and the reserved paths run before this, in the lane server.
 *
 * @module
 */
import type { RequestContext } from "../server/lane.ts";
import type { Reply } from "../server/reply.ts";
import { runAction } from "./actions.ts";
import { failureReply } from "./errors.ts";
import type { RequestFacts } from "./routes.ts";
import type { Tenant, TenantRegistry } from "./tenants.ts";
import { proxyRequest, type UpstreamServices } from "./upstream.ts";

/** What the dataplane needs from the edge. */
export interface DataplaneServices extends UpstreamServices {
  /** The tenant registry in force. */
  tenants(): TenantRegistry;
}

/**
 * Serves one admitted public request from the tenant registry.
 *
 * @param context the admitted request
 * @param services the tenants and the egress
 */
export function serveTenant(
  context: RequestContext,
  services: DataplaneServices,
): Reply | Promise<Reply> {
  const tenant = services.tenants().get(context.head.host);
  if (!tenant || tenant.passthrough) return failureReply("misdirected_request", context.requestId);
  // On TLS, the Host must name the tenant the SNI named (RFC 9110 §15.5.20): never another one.
  const sni = context.serverName;
  if (sni !== undefined && services.tenants().get(sni) !== tenant) {
    return failureReply("misdirected_request", context.requestId);
  }
  if (!tenant.enabled) return blockReply(tenant, context);
  const { head } = context;
  const match = tenant.routes.match(head.method, head.path, head.host, requestFacts(context));
  if (!match) return failureReply("no_route", context.requestId);
  const action = match.route.action;
  if (action.kind !== "proxy") return runAction(action, head, match.params);
  return proxyRequest(context, action, match.params, services);
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
