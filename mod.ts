/**
 * Portcullis: a capability-secured edge gateway for Deno.
 *
 * Three ingress lanes (`public`, `local_health`, `provider_health`), each bound to its own
 * listener and proven distinct at boot, share one admission ledger with per-lane reserves and rate
 * budgets, so a public flood can never starve the health and recovery paths. The permission flags
 * the process needs are derived from its config and audited at boot. Tenants live in immutable
 * generations, loaded from a watched folder or streamed from a hub (`startHub`).
 *
 * @example
 * ```ts ignore
 * import { LANES, loadConfig, planEdge, startEdge } from "./mod.ts";
 * const plan = await planEdge(await loadConfig("deploy/example/config.yaml"), LANES);
 * const edge = await startEdge(plan, { version: "dev" });
 * await edge.drain();
 * ```
 *
 * @module
 */
export { LANES, localHealthLane, providerHealthLane, publicLane } from "./lanes/mod.ts";
export { auditPermissions, type AuditResult, type PermissionQuery } from "./src/boot/audit.ts";
export { checkListeners, overlaps } from "./src/boot/distinct.ts";
export { formatFlags, type Grant, requiredGrants } from "./src/boot/flags.ts";
export {
  type EdgeConfig,
  formatAddress,
  type ListenerAddress,
  loadConfig,
} from "./src/config/load.ts";
export {
  ConfigStore,
  type Generation,
  type OfferOutcome,
  type Rejection,
} from "./src/config/generations.ts";
export { ConfigError, type ConfigProblem, formatProblem } from "./src/config/problems.ts";
export { type HubConfig, hubGrants, resolveHubConfig } from "./src/hub/config.ts";
export { type Hub, startHub } from "./src/hub/hub.ts";
export type { StreamAnswer } from "./src/hub/feed.ts";
export { BootError, type Edge, type EdgeOptions, startEdge } from "./src/edge/edge.ts";
export { type EdgePlan, planEdge } from "./src/edge/plan.ts";
export type { EdgeServices, EdgeState } from "./src/edge/services.ts";
export { LANE_NAMES, type LaneName } from "./src/ledger/lane.ts";
export { type Clock, type ConnectionBudget, Ledger } from "./src/ledger/ledger.ts";
export { type LedgerBuffers, LedgerMemory } from "./src/ledger/memory.ts";
export { type Overload, type OverloadKind, overloadStatus } from "./src/ledger/overload.ts";
export { type Profile, type ProfileInput, validateProfile } from "./src/ledger/profile.ts";
export { Reservation } from "./src/ledger/reservation.ts";
export { type LedgerSnapshot, snapshotLedger } from "./src/ledger/snapshot.ts";
export { type FailureKind, failureReply, GatewayError } from "./src/proxy/errors.ts";
export type { LaneDescriptor, LaneRoute, RequestContext } from "./src/server/lane.ts";
export type { Reply } from "./src/server/reply.ts";
