/**
 * Portcullis: a capability-secured edge gateway for Deno.
 *
 * Three ingress lanes (`public`, `local_health`, `provider_health`), each bound to its own
 * listener and proven distinct at boot, share one admission ledger with per-lane reserves and rate
 * budgets, so a public flood can never starve the health and recovery paths. The permission flags
 * the process needs are derived from its config and audited at boot. Tenants live in immutable
 * generations, loaded from a watched folder or streamed from a hub (`startHub`).
 *
 * An edge is started in three steps: {@link loadConfig} reads and validates the bootstrap file,
 * {@link planEdge} checks it against the {@link LANES} and loads the first tenant generation, and
 * {@link startEdge} binds the listeners and serves until {@link Edge.drain} or
 * {@link Edge.close}. A config the gateway refuses throws {@link ConfigError} with every problem
 * found; a listener that cannot bind throws {@link BootError}. The CLI (`main.ts`) also runs
 * {@link auditPermissions} on the plan's grants before it starts, and refuses to boot a process
 * that holds more than its config needs, or less.
 *
 * Reading a config needs env access to `LOG_STREAM` and `LOG_TOKENS`, or
 * `--ignore-env=LOG_STREAM,LOG_TOKENS`: the YAML parser peeks at those two debug variables.
 *
 * This module exports that API and the types of what it hands back; the ledger's memory layout,
 * the request pipeline and the boot checks stay behind it. Some exported types have fields typed
 * by that machinery (the services a lane is given, the tenant registry, the observer): those types
 * are tagged `@internal` where they are declared, are not exported here, and may change in any
 * release.
 *
 * @example Plan the example edge and list its lanes (binds nothing)
 * ```ts
 * import assert from "node:assert/strict";
 * import { formatAddress, formatFlags, LANES, loadConfig, planEdge } from "./mod.ts";
 *
 * const plan = await planEdge(await loadConfig("deploy/example/config.yaml"), LANES);
 * for (const lane of plan.lanes) {
 *   console.log(lane.table.descriptor.name, lane.listen.map(formatAddress).join(" "));
 * }
 * assert.deepEqual(
 *   plan.lanes.map((lane) => lane.table.descriptor.name),
 *   ["public", "local_health", "provider_health"],
 * );
 * // The flags to run it with; `await startEdge(plan, { version })` would then bind and serve.
 * assert.match(formatFlags(plan.grants), /--allow-net=127\.0\.0\.1:8080,/);
 * ```
 *
 * @module
 */

// The lanes, and what their routes are written against.
export { LANES, localHealthLane, providerHealthLane, publicLane } from "./lanes/mod.ts";
export { LANE_NAMES, type LaneName } from "./src/ledger/lane_names.ts";
export type { LaneDescriptor, LaneHandler, LaneRoute } from "./src/pipeline/lane_table.ts";
export type { RequestContext } from "./src/request/context.ts";
export type { Reply } from "./src/request/reply.ts";
export type { RelayPacing } from "./src/request/relay_memory.ts";

// Config: load, and the errors it throws.
export {
  type EdgeConfig,
  formatAddress,
  type ListenerAddress,
  loadConfig,
} from "./src/config/load.ts";
export { ConfigError, type ConfigProblem, formatProblem } from "./src/config/problems.ts";
export type { BackendHeaders, Forwarding } from "./src/config/forwarding_schema.ts";
export type { ErrorsConfig, ErrorTemplateSource } from "./src/config/errors_schema.ts";

// Plan, permissions, start.
export { type EdgePlan, planEdge, type PlannedLane } from "./src/edge/plan.ts";
export { formatFlags, type Grant, requiredGrants } from "./src/boot/flags.ts";
export { auditPermissions, type AuditResult, type PermissionQuery } from "./src/boot/audit.ts";
export { BootError } from "./src/boot/boot_error.ts";
export { type Edge, type EdgeOptions, startEdge } from "./src/edge/edge.ts";

// What a running edge hands back.
export type { EdgeServices, EdgeState } from "./src/pipeline/services.ts";
export type { Clock, Ledger } from "./src/ledger/ledger.ts";
export { type LaneSnapshot, type LedgerSnapshot, snapshotLedger } from "./src/ledger/snapshot.ts";
export type {
  ConfigStore,
  Generation,
  GenerationSource,
  OfferOutcome,
  Rejection,
} from "./src/live/generations.ts";

// The hub.
export { type HubConfig, resolveHubConfig } from "./src/hub/config.ts";
export { hubGrants } from "./src/hub/grants.ts";
export { type Hub, startHub } from "./src/hub/hub.ts";
export type { StreamAnswer } from "./src/hub/feed.ts";

// Failures: the kinds the gateway answers itself, and their one envelope.
export {
  type FailureKind,
  failureReply,
  type FailureSource,
  GatewayError,
} from "./src/request/errors.ts";
export { OVERLOAD_KINDS, type OverloadKind } from "./src/ledger/overload.ts";
