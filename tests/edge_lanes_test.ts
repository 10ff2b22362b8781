/**
 * Lane allowlists, in process over real loopback sockets: what each listener serves, what it
 * denies (typed 404, counted), and how config `allow` narrows a lane but cannot widen it.
 *
 * @module
 */
import assert from "node:assert/strict";
import { LANES } from "../lanes/mod.ts";
import { loadConfig } from "../src/config/load.ts";
import { ConfigError, formatProblem } from "../src/config/problems.ts";
import { planEdge } from "../src/edge/plan.ts";
import { proofConfig, writeConfig } from "./fixtures/gateway.ts";
import { json, request } from "./fixtures/http_client.ts";
import {
  balancedLedger,
  type ConfigObject,
  envelope,
  waitFor,
  withEdge,
} from "./fixtures/in_process.ts";

Deno.test("provider_health lane: GET /healthz answers a tiny fixed ok body", async () => {
  await withEdge({}, async (t) => {
    const response = await request(t.ports.provider_health, { path: "/healthz" });
    assert.equal(response.status, 200);
    assert.equal(response.body, "ok\n");
    assert.equal(response.headers["content-type"], "text/plain");
    const ledger = await balancedLedger(t);
    assert.equal(ledger.lanes.provider_health.admitted, 1);
    assert.equal(ledger.lanes.public.admitted, 0, "charged to the listener's lane only");
  });
});

Deno.test("provider_health lane: everything but GET /healthz is a counted 404 route_not_allowed", async () => {
  await withEdge({}, async (t) => {
    const denied: [string, string, [string, string][]][] = [
      ["GET", "/v1/ledger", []],
      ["GET", "/metrics", []],
      ["POST", "/healthz", []],
      ["HEAD", "/healthz", []],
      ["GET", "/", [["Host", "demo.test"]]],
      ["POST", "/v1/drain", []],
    ];
    for (const [method, path, headers] of denied) {
      const response = await request(t.ports.provider_health, { method, path, headers });
      assert.equal(response.status, 404, `${method} ${path}`);
      if (method !== "HEAD") {
        assert.equal(envelope(response).code, "route_not_allowed", `${method} ${path}`);
        assert.equal(envelope(response).request_id, response.headers["x-request-id"]);
      }
    }
    assert.equal(t.edge.services.state.draining, false, "POST /v1/drain never ran");
    const ledger = await balancedLedger(t);
    assert.equal(ledger.lanes.provider_health.denied_route, denied.length);
    assert.equal(ledger.lanes.provider_health.admitted, denied.length);
    assert.equal(ledger.lanes.public.admitted, 0, "the tenant dataplane was never reached");
  });
});

Deno.test("local_health lane: /healthz, /readyz and /v1/health report a ready edge", async () => {
  await withEdge({}, async (t) => {
    const port = t.ports.local_health;
    const health = await request(port, { path: "/healthz" });
    assert.equal(health.status, 200);
    assert.deepEqual(json(health), { status: "ok" });
    const ready = await request(port, { path: "/readyz" });
    assert.equal(ready.status, 200);
    assert.deepEqual(json(ready), { ready: true });
    const status = json(await request(port, { path: "/v1/health" }));
    assert.equal(status.status, "ok");
    assert.equal(status.ready, true);
    assert.equal(status.version, "test");
    assert.equal(status.node_id, "proof-edge");
    assert.equal(status.active_requests, 0);
    assert.equal(status.tenants, 1);
    assert.equal(typeof status.uptime_seconds, "number");
  });
});

Deno.test("local_health lane: /v1/ledger counts every lane and leaves out the observer", async () => {
  await withEdge({}, async (t) => {
    await request(t.ports.public, { path: "/", headers: [["Host", "demo.test"]] });
    await request(t.ports.public, { path: "/healthz" });
    await request(t.ports.provider_health, { path: "/healthz" });
    const ledger = await balancedLedger(t);
    assert.equal(ledger.excludes_observer, true);
    assert.equal(ledger.lanes.public.admitted, 2);
    assert.equal(ledger.lanes.provider_health.admitted, 1);
    assert.equal(ledger.outstanding, 0);
    assert.equal(ledger.completed + ledger.cancelled, ledger.admitted);
    assert.equal(ledger.lanes.local_health.in_use, 0, "the observer does not see itself");
    assert.equal(ledger.release_balanced, true);
  });
});

Deno.test("local_health lane: /metrics is Prometheus text with per-lane ledger counters", async () => {
  await withEdge({}, async (t) => {
    for (let i = 0; i < 3; i++) {
      await request(t.ports.public, { path: "/", headers: [["Host", "demo.test"]] });
    }
    await request(t.ports.provider_health, { path: "/nope" });
    await waitFor(() => t.snapshot(), (s) => s.outstanding === 0);
    const response = await request(t.ports.local_health, { path: "/metrics" });
    assert.equal(response.status, 200);
    assert.equal(response.headers["content-type"], "text/plain; version=0.0.4; charset=utf-8");
    const text = response.body;
    assert.match(text, /^# TYPE portcullis_ledger_admitted_total counter$/m);
    assert.match(text, /^portcullis_ledger_admitted_total\{lane="public"\} 3$/m);
    assert.match(text, /^portcullis_ledger_admitted_total\{lane="provider_health"\} 1$/m);
    assert.match(text, /^portcullis_ledger_denied_route_total\{lane="provider_health"\} 1$/m);
    assert.match(text, /^portcullis_build_info\{version="test"\} 1$/m);
    assert.match(text, /^portcullis_ready 1$/m);
    assert.doesNotMatch(text, /demo\.test/, "no plain tenant hosts in metrics");
    // A request is counted once its response has closed, which may trail the client's read.
    const counted = /^portcullis_requests_total\{lane="public",class="2xx"\} 3$/m;
    await waitFor(
      async () => (await request(t.ports.local_health, { path: "/metrics" })).body,
      (page) => counted.test(page),
    );
  });
});

Deno.test("local_health lane: tenant traffic and unknown paths are denied, not served", async () => {
  await withEdge({}, async (t) => {
    const port = t.ports.local_health;
    const tenant = await request(port, { path: "/", headers: [["Host", "demo.test"]] });
    assert.equal(tenant.status, 404);
    assert.equal(envelope(tenant).code, "route_not_allowed");
    const getDrain = await request(port, { path: "/v1/drain" });
    assert.equal(getDrain.status, 404, "drain is POST only");
    assert.equal(envelope(getDrain).code, "route_not_allowed");
    assert.equal(t.edge.services.state.draining, false);
    const ledger = await balancedLedger(t);
    assert.equal(ledger.lanes.local_health.denied_route, 2);
    assert.equal(ledger.lanes.public.admitted, 0);
  });
});

Deno.test("public lane: anonymous /healthz answers without a tenant; operator paths do not", async () => {
  await withEdge({}, async (t) => {
    const health = await request(t.ports.public, { path: "/healthz", headers: [["Host", "x.y"]] });
    assert.equal(health.status, 200);
    assert.deepEqual(json(health), { status: "ok" });
    const ledgerPath = await request(t.ports.public, {
      path: "/v1/ledger",
      headers: [["Host", "demo.test"]],
    });
    assert.equal(ledgerPath.status, 404, "served by the tenant dataplane, which has no such route");
    assert.equal(envelope(ledgerPath).code, "no_route");
    const metrics = await request(t.ports.public, { path: "/metrics" });
    assert.equal(metrics.status, 421, "an unknown host on public, not the metrics page");
    const drain = await request(t.ports.public, {
      method: "POST",
      path: "/v1/drain",
      headers: [["Host", "demo.test"]],
    });
    assert.equal(drain.status, 404);
    assert.equal(t.edge.services.state.draining, false);
    const ledger = await balancedLedger(t);
    assert.equal(ledger.lanes.public.admitted, 4);
    assert.equal(ledger.lanes.local_health.denied_route, 0);
  });
});

Deno.test("config allow: narrowing local_health to /healthz denies /v1/ledger", async () => {
  const setup = {
    edit: (config: ConfigObject) => config.lanes.local_health.allow = ["/healthz"],
  };
  await withEdge(setup, async (t) => {
    const health = await request(t.ports.local_health, { path: "/healthz" });
    assert.equal(health.status, 200);
    for (const path of ["/v1/ledger", "/metrics", "/readyz"]) {
      const response = await request(t.ports.local_health, { path });
      assert.equal(response.status, 404, path);
      assert.equal(envelope(response).code, "route_not_allowed", path);
    }
    const ledger = await waitFor(() => t.snapshot(), (s) => s.outstanding === 0);
    assert.equal(ledger.lanes.local_health.denied_route, 3);
    assert.equal(ledger.completed + ledger.cancelled, ledger.admitted);
  });
});

Deno.test("config allow: a path outside the built-in allowlist is refused at planning", async () => {
  const config: ConfigObject = proofConfig({
    public: 18080,
    local_health: 19901,
    provider_health: 0,
  });
  config.lanes.local_health.allow = ["/healthz", "/admin"];
  const dir = await writeConfig(config);
  try {
    const error = await planEdge(await loadConfig(dir.config), LANES).then(
      () => undefined,
      (e) => e,
    );
    assert.ok(error instanceof ConfigError, `expected a ConfigError, got ${error}`);
    const lines = error.problems.map(formatProblem);
    assert.equal(lines.length, 1, lines.join("\n"));
    assert.ok(lines[0].startsWith(dir.config), lines[0]);
    assert.match(lines[0], /lanes\.local_health\.allow: .*never widen.*\(got \["\/admin"\]\)$/);
  } finally {
    await Deno.remove(dir.dir, { recursive: true });
  }
});
