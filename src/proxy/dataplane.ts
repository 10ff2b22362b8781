/**
 * The public lane's tenant dataplane, as a fixed sequence of phases (DESIGN §3). Each phase has one
 * job and may answer the request itself:
 *
 * 1. resolve the tenant from the Host — unknown host is 421, never a default tenant;
 * 2. a disabled tenant answers with its block response;
 * 3. match a route (path, methods, host) — no match is a 404 envelope;
 * 4. run the route's action.
 *
 * Admission, the lane allowlist and the reserved paths run before this, in the lane server.
 *
 * @module
 */
import type { RequestContext } from "../server/lane.ts";
import type { Reply } from "../server/reply.ts";
import { runAction } from "./actions.ts";
import { failureReply } from "./errors.ts";
import type { Tenant, TenantRegistry } from "./tenants.ts";

/**
 * Serves one admitted public request from the tenant registry.
 *
 * @param context the admitted request
 * @param registry the tenants in force
 */
export function serveTenant(context: RequestContext, registry: TenantRegistry): Reply {
  const tenant = registry.get(context.head.host);
  if (!tenant) return failureReply("misdirected_request", context.requestId);
  if (!tenant.enabled) return blockReply(tenant, context);
  const match = tenant.routes.match(context.head.method, context.head.path, context.head.host);
  if (!match) return failureReply("no_route", context.requestId);
  return runAction(match.route.action, context.head, match.params);
}

/** A disabled tenant's configured answer: a status with the envelope, a drop, or a held line. */
export function blockReply(tenant: Tenant, context: RequestContext): Reply {
  if (tenant.block === "drop") return { status: 0, withhold: "drop", failure: "tenant_blocked" };
  if (tenant.block === "timeout") return { status: 0, withhold: "hold", failure: "tenant_blocked" };
  return failureReply("tenant_blocked", context.requestId, { status: tenant.block });
}
