/**
 * Proof 4 — route-scope negative: a request outside a protected lane's allowlist gets a typed
 * denial and never reaches the tenant dataplane (nor another lane's handler).
 */
import assert from "node:assert/strict";
import { freePorts, Gateway, proofConfig, writeConfig } from "../tests/fixtures/gateway.ts";
import { request, type RequestSpec } from "../tests/fixtures/http_client.ts";

const TENANT = [["Host", "demo.test"]] as [string, string][];

Deno.test("proof 4: routes outside a protected lane's allowlist are denied, never served", async () => {
  const [publicPort, localPort, providerPort] = freePorts(3);
  const ports = { public: publicPort, local_health: localPort, provider_health: providerPort };
  const gateway = await Gateway.start(await writeConfig(proofConfig(ports)), ports);
  try {
    const providerProbes: RequestSpec[] = [
      { path: "/", headers: TENANT }, // the tenant's home page
      { path: "/asset", headers: TENANT }, // a large asset
      { path: "/v1/ledger" }, // a local_health route
      { path: "/metrics" },
      { path: "/healthz", method: "POST", body: "x" },
      { path: "/healthz/" },
      { path: "/healthz/../v1/ledger" }, // canonical: /v1/ledger, not this lane's
      { path: "//v1/%6cedger" },
    ];
    for (const spec of providerProbes) {
      const response = await request(providerPort, spec);
      assert.equal(response.status, 404, `${spec.method ?? "GET"} ${spec.path}`);
      const envelope = JSON.parse(response.body);
      assert.equal(envelope.error.code, "route_not_allowed");
      assert.equal(envelope.error.request_id, response.headers["x-request-id"]);
      assert.ok(!response.body.includes("tenant-home"));
    }
    const localProbes: RequestSpec[] = [
      { path: "/", headers: TENANT },
      { path: "/asset", headers: TENANT },
      { path: "/old/x", headers: TENANT },
      { path: "/v1/ledger", method: "DELETE" },
    ];
    for (const spec of localProbes) {
      const response = await request(localPort, spec);
      assert.equal(response.status, 404, `${spec.method ?? "GET"} ${spec.path}`);
      assert.equal(JSON.parse(response.body).error.code, "route_not_allowed");
    }

    // The allowlist matches the canonical path: another spelling of /healthz is /healthz.
    for (const path of ["/%68ealthz", "//healthz", "/x/../healthz"]) {
      const response = await request(providerPort, { path });
      assert.equal(response.status, 200, path);
      assert.equal(response.body, "ok\n", path);
    }

    const reading = await gateway.ledger();
    assert.equal(reading.lanes.provider_health.denied_route, providerProbes.length);
    assert.equal(reading.lanes.local_health.denied_route, localProbes.length);
    assert.equal(reading.lanes.public.admitted, 0, "nothing reached the public dataplane");
    // The same tenant request on the public lane is served: the denial was the lane's, not a miss.
    const served = await request(publicPort, { path: "/", headers: TENANT });
    assert.equal(served.status, 200);
    assert.equal(served.body, "tenant-home");
  } finally {
    await gateway.dispose();
  }
});
