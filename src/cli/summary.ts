/**
 * The human summary `check` prints for a valid config.
 *
 * @module
 */
import { formatFlags } from "../boot/flags.ts";
import { formatAddress, runsWorkers } from "../config/load.ts";
import type { EdgePlan } from "../edge/plan.ts";
import { describePolicies } from "../policy/policies.ts";

/**
 * Renders a plan as a few lines: node, lanes with listeners and allowlists, ledger partition,
 * tenants, and the permission flags.
 */
export function summarizePlan<S>(plan: EdgePlan<S>): string {
  const { config, profile } = plan;
  const lines = [
    `portcullis: ${config.file} is valid`,
    `  node ${config.nodeId}, mode ${config.mode}, ${config.workers} request worker` +
    `${config.workers === 1 ? "" : "s"}${config.workersSetting === "auto" ? " (auto)" : ""}` +
    (runsWorkers(config) ? "" : ", one isolate for every lane"),
  ];
  for (const lane of plan.lanes) {
    const name = lane.table.descriptor.name;
    if (lane.role !== "serve") {
      lines.push(`  lane ${name} (${lane.role}): ${lane.listen.map(formatAddress).join(", ")}`);
      continue;
    }
    const p = profile.lanes.find((l) => l.name === name)!;
    const rate = p.rate ? `, rate ${p.rate.per_second}/s burst ${p.rate.burst}` : "";
    const tls = name === "public" && config.tls
      ? ` (TLS${config.tls.http2 ? ", h2" : ""}, ${config.tls.certificates.length} certificates` +
        `${config.tls.certificates.length === 0 ? ": bootstrap certificate" : ""})`
      : "";
    lines.push(
      `  lane ${name}: ${lane.listen.map(formatAddress).join(", ")}${tls}`,
      `    routes ${lane.table.paths.join(" ")}${lane.table.descriptor.phases ? " + tenants" : ""}`,
      `    reserve ${p.reserve}, ceiling ${p.maxSlots} slots, footprint ${p.footprint} B, ` +
        `deadline ${p.deadlineMs} ms, ${p.maxConnections} connections${rate}`,
    );
    if (name === "public" && config.adminGate) lines.push("    admin gate: on");
  }
  lines.push(
    `  ledger: ${profile.applicationSlots} slots (general pool ${profile.generalPool}), ` +
      `${profile.inflightBytes} bytes in flight (general ${profile.generalBytes}), ` +
      `${profile.perConnection} per connection`,
  );
  const routes = plan.tenants.tenants.reduce((sum, t) => sum + t.routeCount, 0);
  lines.push(
    `  tenants: ${plan.tenants.tenants.length} (${routes} routes) ${runtimeOrigin(plan)}`,
  );
  const list = (names: string[]) => names.length > 0 ? names.join(", ") : "none";
  lines.push(
    `    policies for unknown hosts: ${list(describePolicies(plan.tenants.globalPolicies))}`,
  );
  for (const tenant of plan.tenants.tenants) {
    lines.push(`    ${tenant.host}: policies ${list(describePolicies(tenant.policies))}`);
  }
  lines.push(`  flags: ${formatFlags(plan.grants)}`);
  return lines.join("\n");
}

/** Where the tenant set comes from, for the summary. */
function runtimeOrigin<S>(plan: EdgePlan<S>): string {
  const runtime = plan.config.runtime;
  if (runtime.kind === "local") {
    return `in ${runtime.dir}${runtime.watch ? " (watched)" : ""}`;
  }
  const cached = plan.runtime.hash === "" ? "no cached generation yet" : "cached generation";
  return `from hub ${runtime.hub.url} (${cached} in ${runtime.cacheDir})`;
}
