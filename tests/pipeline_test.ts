/**
 * The request path as data: each lane's pipeline lists its phases in the order DESIGN §3 gives,
 * and the runner answers what no phase answered with a typed 404. The order is asserted here so a
 * reordering is a visible, reviewed change; what each phase does is proven end to end elsewhere
 * (policy_test, edge_lanes_test, the adversarial suite and the proof matrix).
 *
 * @module
 */
import assert from "node:assert/strict";
import { LANES } from "../lanes/mod.ts";
import { compileLane } from "../src/pipeline/lane_table.ts";
import { createPipeline } from "../src/pipeline/runner.ts";
import { TENANT_PHASES } from "../src/pipeline/tenant_phases.ts";
import type { EdgeServices } from "../src/pipeline/services.ts";
import type { ServerLimits } from "../src/server/lane_listener.ts";

const LIMITS = {
  headerMs: 1000,
  idleMs: 1000,
  requestMs: 1000,
  headerBytes: 8192,
  headers: 100,
  targetBytes: 8192,
  sendMs: 1000,
  minSendRate: 0,
  paths: { mergeSlashes: true },
} as unknown as ServerLimits;

/** Only what building a pipeline reads: each lane's deadline, and the clock. */
function services(): EdgeServices {
  const lanes = LANES.map((lane) => ({ name: lane.name, deadlineMs: lane.defaults.deadline_ms }));
  const ledger = { profile: { lanes }, now: () => 0 };
  return {
    ledger,
    state: { ready: true, draining: false, admissionStopped: false },
    log: () => {},
  } as unknown as EdgeServices;
}

Deno.test("pipeline: the public lane runs admission, the head, the allowlist, then the tenant phases", () => {
  const table = compileLane(LANES.find((lane) => lane.name === "public")!);
  assert.ok("find" in table);
  const pipeline = createPipeline(table, services(), LIMITS);
  assert.deepEqual(pipeline.phases, [
    "admit",
    "head",
    "allowlist",
    "tenant",
    "enabled",
    "route",
    "maintenance",
    "shed",
    "policies",
    "action",
    "hygiene",
    "upstream",
  ]);
  assert.deepEqual(TENANT_PHASES.map((phase) => phase.name), pipeline.phases.slice(3));
  pipeline.stop();
});

Deno.test("pipeline: the protected lanes run admission, the head and their allowlist only", () => {
  for (const name of ["local_health", "provider_health"]) {
    const table = compileLane(LANES.find((lane) => lane.name === name)!);
    assert.ok("find" in table);
    const pipeline = createPipeline(table, services(), LIMITS);
    assert.deepEqual(pipeline.phases, ["admit", "head", "allowlist"], name);
    pipeline.stop();
  }
});
