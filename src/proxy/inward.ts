/**
 * The destinations a tenant set names (proxy backends, passthrough targets) and which of them reach
 * back into this process: the check an edge runs at every generation load and a hub runs before it
 * publishes one.
 *
 * @module
 */
import type { ConfigProblem } from "../config/problems.ts";
import { type OwnListener, ownListener } from "../egress/destinations.ts";
import type { TenantRegistry } from "./tenants.ts";

/** Every place a tenant set names a destination: proxy backends and passthrough targets. */
export function* tenantTargets(tenants: TenantRegistry) {
  for (const tenant of tenants.tenants) {
    for (const route of tenant.routeList) {
      if (route.action.kind !== "proxy") continue;
      for (const [b, backend] of route.action.backends.entries()) {
        yield {
          file: tenant.file,
          path: ["routes", route.index, "proxy", "backends", b, "url"],
          value: `http://${backend.authority}`,
          host: backend.hostname,
          port: backend.port,
          target: backend.target,
        };
      }
    }
    for (const [b, backend] of (tenant.passthrough?.backends ?? []).entries()) {
      yield {
        file: tenant.file,
        path: ["passthrough", "backends", b],
        value: backend.target,
        host: backend.host,
        port: backend.port,
        target: backend.target,
      };
    }
  }
}

/**
 * The destinations of a tenant set that reach one of `own` listeners (a hub checks its own
 * listeners this way; an edge, in {@link checkReach}).
 */
export function inwardProblems(
  tenants: TenantRegistry,
  own: readonly OwnListener[],
): ConfigProblem[] {
  const problems: ConfigProblem[] = [];
  for (const { file, path, value, host, port, target } of tenantTargets(tenants)) {
    const inward = ownListener(host, port, own);
    if (inward) problems.push({ file, path, value, message: inwardMessage(target, inward) });
  }
  return problems;
}

/** The refusal of a target that reaches one of this process's listeners. */
export function inwardMessage(target: string, listener: OwnListener): string {
  return `${target} reaches this gateway's own listener ${listener.name} ` +
    `(${listener.hostname}:${listener.port}): nothing may be sent back into the gateway`;
}
