/**
 * The destinations a tenant set names (proxy backends, passthrough targets) and which of them reach
 * back into this process: the check an edge runs at every generation load and a hub runs before it
 * publishes one. A name counts by where this machine resolves it without the network (its hosts
 * file, its host name, `localhost`), read once per load (egress/own_listener.ts says what that
 * leaves to connect time).
 *
 * @module
 */
import type { ConfigProblem } from "../config/problems.ts";
import { type LocalMachine, readLocalMachine } from "../egress/local_machine.ts";
import { type OwnListener, ownListener, resolvedBy } from "../egress/own_listener.ts";
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
 * listeners this way; an edge, in `checkReach`).
 *
 * @param machine what this machine calls itself, read for this load
 */
export function inwardProblems(
  tenants: TenantRegistry,
  own: readonly OwnListener[],
  machine?: LocalMachine,
): ConfigProblem[] {
  const problems: ConfigProblem[] = [];
  for (const { file, path, value, host, port, target } of tenantTargets(tenants)) {
    const inward = ownListener(host, port, own, machine);
    if (inward) {
      problems.push({ file, path, value, message: inwardMessage(target, inward, machine) });
    }
  }
  return problems;
}

/**
 * {@link inwardProblems} with the machine read now: what a generation store runs on every set it is
 * offered (a folder reload, a hub push, a hub's own runtime folder).
 */
export async function inwardProblemsNow(
  tenants: TenantRegistry,
  own: readonly OwnListener[],
): Promise<ConfigProblem[]> {
  return inwardProblems(tenants, own, await readLocalMachine());
}

/**
 * The refusal of a target that reaches one of this process's listeners, saying how a name came to
 * be this machine's (`machine`).
 */
export function inwardMessage(
  target: string,
  listener: OwnListener,
  machine?: LocalMachine,
): string {
  const host = target.replace(/:\d+$/, "");
  const how = machine ? resolvedBy(host, machine) : "";
  return `${target}${how} reaches this gateway's own listener ${listener.name} ` +
    `(${listener.hostname}:${listener.port}): nothing may be sent back into the gateway`;
}
