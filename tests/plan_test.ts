/**
 * Unit tests for `planEdge()`: everything checked before a socket is bound — the ledger profile,
 * listener distinctness and reach, allowlist narrowing, timeouts and the tenant set.
 *
 * @module
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { LANES } from "../lanes/mod.ts";
import { loadConfig, runsWorkers } from "../src/config/load.ts";
import type { ConfigError } from "../src/config/problems.ts";
import { planEdge } from "../src/edge/plan.ts";
import type { EdgeServices } from "../src/pipeline/services.ts";
import type { RequestContext } from "../src/request/context.ts";
import { configErrorOf } from "./fixtures/config_files.ts";

const ROOT = new URL("../", import.meta.url).pathname;

/** Three loopback lanes with explicit ledger numbers (the example's shape on other ports). */
const THREE_LANES = `node_id: plan-edge
mode: local
tenants_dir: tenants
lanes:
  public: { listen: [{ hostname: 127.0.0.1, port: 8080 }] }
  local_health: { listen: [{ hostname: 127.0.0.1, port: 9901 }] }
  provider_health: { listen: [{ hostname: 127.0.0.1, port: 9902 }] }
ledger:
  application_slots: 64
  inflight_bytes: 4194304
  per_connection: 4
`;

/** Writes the config (and optional tenant files) to a temp folder; returns the config's path. */
async function writeSetup(text: string, tenants: Record<string, string> = {}): Promise<string> {
  const dir = await Deno.makeTempDir({ prefix: "portcullis_plan_" });
  await Deno.mkdir(join(dir, "tenants"));
  for (const [name, body] of Object.entries(tenants)) {
    await Deno.writeTextFile(join(dir, "tenants", name), body);
  }
  const file = join(dir, "config.yaml");
  await Deno.writeTextFile(file, text);
  return file;
}

async function planOf(text: string, tenants: Record<string, string> = {}) {
  return planEdge(await loadConfig(await writeSetup(text, tenants)), LANES);
}

/** Plans `text` and returns the ConfigError it must raise. */
function refusal(text: string, tenants: Record<string, string> = {}): Promise<ConfigError> {
  return configErrorOf(planOf(text, tenants), "planEdge() accepted a bad config");
}

Deno.test("planEdge() plans the example config: three lanes, profile, tenants, grants", async () => {
  const plan = await planEdge(await loadConfig(join(ROOT, "deploy/example/config.yaml")), LANES);
  assert.deepEqual(plan.lanes.map((lane) => lane.table.descriptor.name), [
    "public",
    "local_health",
    "provider_health",
  ]);
  assert.deepEqual(plan.lanes[0].table.paths, ["/healthz"]);
  assert.deepEqual(plan.lanes[1].table.paths, [
    "/healthz",
    "/readyz",
    "/v1/health",
    "/v1/ledger",
    "/v1/egress",
    "/metrics",
    "/v1/tls/reload",
    "/v1/config",
    "/v1/config/reload",
    "/v1/drain",
  ]);
  assert.deepEqual(plan.lanes[2].listen, [{ kind: "tcp", hostname: "127.0.0.1", port: 9902 }]);
  assert.equal(plan.profile.applicationSlots, 256);
  assert.equal(plan.profile.generalPool, 250);
  assert.deepEqual(plan.profile.lanes.map((l) => [l.name, l.reserve, l.maxSlots]), [
    ["public", 0, 250],
    ["local_health", 4, 8],
    ["provider_health", 2, 4],
  ]);
  assert.deepEqual(plan.tenants.tenants.map((t) => t.host), ["demo.localhost"]);
  assert.deepEqual(plan.grants.filter((g) => g.name === "net").map((g) => g.value), [
    "127.0.0.1:8080",
    "127.0.0.1:9901",
    "127.0.0.1:9902",
  ]);
});

Deno.test("planEdge() fills lane defaults where the config is silent", async () => {
  const plan = await planOf(THREE_LANES);
  assert.deepEqual(
    plan.profile.lanes.map((l) => [l.name, l.reserve, l.footprint, l.deadlineMs, l.rate]),
    [
      ["public", 0, 65_536, 30_000, undefined],
      ["local_health", 4, 16_384, 5000, undefined],
      ["provider_health", 2, 1024, 1000, { per_second: 20, burst: 40 }],
    ],
  );
  assert.equal(plan.profile.generalPool, 58);
});

Deno.test("planEdge() refuses two lanes aliasing one address, naming both lanes", async () => {
  const error = await refusal(THREE_LANES.replace("port: 9902", "port: 8080"));
  assert.equal(error.problems.length, 1);
  const [problem] = error.problems;
  assert.deepEqual(problem.path, ["lanes", "provider_health", "listen", 0]);
  assert.equal(problem.value, "127.0.0.1:8080");
  assert.equal(
    problem.message,
    'Cannot bind lane "provider_health": address 127.0.0.1:8080 overlaps lane "public" ' +
      "(127.0.0.1:8080)",
  );
  assert.equal(problem.at, "7:31");
  assert.match(
    error.message,
    /config\.yaml:7:31: lanes\.provider_health\.listen\[0\]: Cannot bind lane "provider_health": address 127\.0\.0\.1:8080 overlaps lane "public"/,
  );
});

Deno.test("planEdge() treats 0.0.0.0:P as overlapping 127.0.0.1:P", async () => {
  const error = await refusal(
    THREE_LANES.replace("{ hostname: 127.0.0.1, port: 8080 }", "{ hostname: 0.0.0.0, port: 9902 }"),
  );
  assert.deepEqual(error.problems.map((p) => [p.path.join("/"), p.message]), [[
    "lanes/provider_health/listen/0",
    'Cannot bind lane "provider_health": address 127.0.0.1:9902 overlaps lane "public" ' +
    "(0.0.0.0:9902)",
  ]]);
});

Deno.test("planEdge() refuses the same unix path on two lanes", async () => {
  const error = await refusal(
    THREE_LANES
      .replace("{ hostname: 127.0.0.1, port: 9901 }", "{ path: run/edge.sock }")
      .replace("{ hostname: 127.0.0.1, port: 9902 }", "{ path: ./run/../run/edge.sock }"),
  );
  assert.equal(error.problems.length, 1);
  const [problem] = error.problems;
  assert.deepEqual(problem.path, ["lanes", "provider_health", "listen", 0]);
  assert.match(
    problem.message,
    /^Cannot bind lane "provider_health": address unix:\/.*\/run\/edge\.sock overlaps lane "local_health" \(unix:\/.*\/run\/edge\.sock\)$/,
  );
});

Deno.test("planEdge() refuses local_health on a non-loopback address", async () => {
  const error = await refusal(
    THREE_LANES.replace("127.0.0.1, port: 9901", "192.0.2.10, port: 9901"),
  );
  assert.deepEqual(error.problems.map((p) => [p.path.join("/"), p.message]), [[
    "lanes/local_health/listen/0",
    'Cannot bind lane "local_health": address 192.0.2.10:9901 is not loopback ' +
    "(use 127.0.0.1, ::1 or a Unix socket path)",
  ]]);
});

Deno.test("planEdge() accepts local_health on ::1 and on a unix socket", async () => {
  const plan = await planOf(THREE_LANES.replace(
    "{ hostname: 127.0.0.1, port: 9901 }",
    '{ hostname: "::1", port: 9901 }, { path: run/local.sock }',
  ));
  assert.deepEqual(plan.lanes[1].listen.map((a) => a.kind), ["tcp", "unix"]);
});

Deno.test("planEdge() narrows a lane's allowlist to the paths the config keeps", async () => {
  const plan = await planOf(THREE_LANES.replace(
    "port: 9901 }] }",
    "port: 9901 }], allow: [/healthz, /readyz] }",
  ));
  const table = plan.lanes[1].table;
  assert.deepEqual(table.paths, ["/healthz", "/readyz"]);
  // As the lane's allowlist phase serves a request (its router, a Hono app, answers every one);
  // the services hold only what the kept routes read (readiness: a live set with a tenant).
  const services = {
    state: { draining: false, ready: true },
    worker: { index: 0, count: 1 },
    config: { current: { number: 1, registry: { tenants: [{}] } }, rejectionSuperseded: false },
  } as unknown as EdgeServices;
  const answer = async (method: string, path: string) => {
    const context = {
      requestId: "plan-test",
      peer: "127.0.0.1",
      head: { method, path, query: "" },
      request: { method, url: path, rawHeaders: [] },
    } as unknown as RequestContext;
    const reply = await table.find(method, path)?.handle(context, services);
    assert.ok(reply, `${method} ${path}: the lane's router answers`);
    return { status: reply.status, failure: reply.failure, body: String(reply.body) };
  };
  const healthz = await answer("GET", "/healthz");
  assert.deepEqual([healthz.status, JSON.parse(healthz.body)], [200, { status: "ok" }]);
  const readyz = await answer("GET", "/readyz");
  assert.deepEqual([readyz.status, JSON.parse(readyz.body)], [200, { ready: true }]);
  for (
    const [method, path] of [["GET", "/metrics"], ["GET", "/v1/ledger"], ["POST", "/v1/drain"]]
  ) {
    const dropped = await answer(method, path);
    assert.equal(dropped.status, 404, `${method} ${path}`);
    assert.equal(dropped.failure, "route_not_allowed", `${method} ${path}`);
  }
});

Deno.test("planEdge() refuses widening an allowlist with a path the lane does not serve", async () => {
  const error = await refusal(THREE_LANES.replace(
    "port: 9902 }] }",
    "port: 9902 }], allow: [/healthz, /v1/drain, /admin] }",
  ));
  assert.equal(error.problems.length, 1);
  const [problem] = error.problems;
  assert.deepEqual(problem.path, ["lanes", "provider_health", "allow"]);
  assert.deepEqual(problem.value, ["/v1/drain", "/admin"]);
  assert.equal(
    problem.message,
    'Lane "provider_health" does not serve these paths; config may narrow a lane, never widen it',
  );
  assert.match(error.message, /\(got \["\/v1\/drain","\/admin"\]\)$/);
});

Deno.test("planEdge() reports profile problems under ledger. paths", async () => {
  const error = await refusal(
    `${THREE_LANES}  lanes: { local_health: { reserve: 0 } }\n`,
  );
  assert.equal(error.problems.length, 1);
  const [problem] = error.problems;
  assert.deepEqual(problem.path, ["ledger", "lanes", "local_health", "reserve"]);
  assert.equal(problem.value, 0);
  assert.equal(
    problem.message,
    'Lane "local_health" has a listener, so it needs a reserve above 0 (its deterministic floor)',
  );
  assert.equal(problem.at, "12:37");
  assert.match(error.message, /:12:37: ledger\.lanes\.local_health\.reserve: .* \(got 0\)$/);
});

Deno.test("planEdge() refuses a reserve on a lane that has no listener", async () => {
  const text = THREE_LANES.replace(/^ {2}provider_health: \{ listen.*\n/m, "") +
    "  lanes: { provider_health: { reserve: 2 } }\n";
  const error = await refusal(text);
  assert.deepEqual(error.problems.map((p) => [p.path.join("."), p.value, p.message]), [[
    "ledger.lanes.provider_health.reserve",
    2,
    'Lane "provider_health" has no listener, so its reserve must be 0',
  ]]);
});

Deno.test("planEdge() refuses reserves that leave no general pool", async () => {
  const error = await refusal(THREE_LANES.replace("application_slots: 64", "application_slots: 6"));
  assert.deepEqual(error.problems.map((p) => [p.path.join("."), p.value, p.message]), [[
    "ledger.application_slots",
    6,
    "The reserves (6 slots) leave no general pool; application_slots must exceed them",
  ]]);
});

Deno.test("planEdge() refuses header_ms above request_ms", async () => {
  const error = await refusal(`${THREE_LANES}timeouts: { header_ms: 20000, request_ms: 5000 }\n`);
  assert.deepEqual(error.problems.map((p) => [p.path.join("."), p.value, p.message, p.at]), [[
    "timeouts.header_ms",
    20000,
    "The head timeout cannot exceed request_ms (5000)",
    "12:24",
  ]]);
});

Deno.test("planEdge() surfaces tenant problems with the tenant file's name", async () => {
  const error = await refusal(
    `${THREE_LANES}timeouts: { header_ms: 20000, request_ms: 5000 }\n`,
    { "demo.example.yaml": "host: demo.example\nblock_response: 200\n" },
  );
  assert.equal(error.problems.length, 2);
  const [config, tenant] = error.problems;
  assert.ok(config.file.endsWith("/config.yaml"), config.file);
  assert.deepEqual(config.path, ["timeouts", "header_ms"]);
  assert.ok(tenant.file.endsWith("/tenants/demo.example.yaml"), tenant.file);
  assert.deepEqual(tenant.path, ["block_response"]);
  assert.equal(tenant.value, 200);
  assert.equal(tenant.at, "2:17");
  assert.match(error.message, /tenants\/demo\.example\.yaml:2:17: block_response: /);
});

Deno.test("planEdge() says a missing tenants folder cannot be read", async () => {
  const error = await refusal(THREE_LANES.replace("tenants_dir: tenants", "tenants_dir: nowhere"));
  assert.equal(error.problems.length, 1);
  assert.ok(error.problems[0].file.endsWith("/nowhere"), error.problems[0].file);
  assert.equal(
    error.problems[0].message,
    "Cannot read tenants folder: no such file or directory",
  );
});

Deno.test("planEdge() refuses a shared event loop beside more than one worker", async () => {
  const error = await refusal(`${THREE_LANES}workers: 2\nshared_event_loop: true\n`);
  assert.deepEqual(error.problems.map((p) => [p.path.join("."), p.value]), [
    ["shared_event_loop", true],
  ]);
  // One worker and a shared loop is one isolate; no protected lane needs no worker either.
  const shared = await planOf(`${THREE_LANES}shared_event_loop: true\n`);
  assert.equal(runsWorkers(shared.config), false);
  assert.equal(runsWorkers((await planOf(THREE_LANES)).config), true, "the default: a worker");
  const alone = THREE_LANES.replace(/ {2}(local|provider)_health: .*\n/g, "");
  assert.equal(runsWorkers((await planOf(alone)).config), false);
});
