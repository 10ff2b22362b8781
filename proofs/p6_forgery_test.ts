/**
 * Proof 6 — forgery negative: a public request whose Host, Origin, X-Forwarded-* or path names the
 * protected port or route is charged to `public`, and is answered as public traffic.
 */
import assert from "node:assert/strict";
import { freePorts, Gateway, proofConfig, writeConfig } from "../tests/fixtures/gateway.ts";
import { request, type RequestSpec } from "../tests/fixtures/http_client.ts";

Deno.test("proof 6: request fields naming a protected lane are charged to public", async () => {
  const [publicPort, localPort, providerPort] = freePorts(3);
  const ports = { public: publicPort, local_health: localPort, provider_health: providerPort };
  const gateway = await Gateway.start(await writeConfig(proofConfig(ports)), ports);
  const local = `127.0.0.1:${localPort}`;
  const provider = `127.0.0.1:${providerPort}`;
  try {
    const forgeries: RequestSpec[] = [
      { path: "/v1/ledger", headers: [["Host", local]] },
      { path: "/metrics", headers: [["Host", local]] },
      { path: "/v1/drain", method: "POST", headers: [["Host", local]], body: "" },
      { path: "/v1/ledger", headers: [["Host", "demo.test"], ["Origin", `http://${local}`]] },
      {
        path: "/v1/ledger",
        headers: [
          ["Host", "demo.test"],
          ["X-Forwarded-For", "127.0.0.1"],
          ["X-Forwarded-Host", local],
          ["X-Forwarded-Port", String(localPort)],
          ["X-Forwarded-Proto", "http"],
          ["Forwarded", `for=127.0.0.1;host=${local}`],
        ],
      },
      { path: `http://${local}/v1/ledger`, headers: [["Host", local]] },
      {
        path: "/healthz",
        headers: [["Host", provider], ["X-Forwarded-Port", String(providerPort)]],
      },
      { path: "/readyz", headers: [["Host", local]] },
    ];
    for (const spec of forgeries) {
      const response = await request(publicPort, spec);
      assert.ok(!("lanes" in safeJson(response.body)), `${spec.path} leaked the ledger`);
      assert.ok([200, 404, 421].includes(response.status), `${spec.path}: ${response.status}`);
    }
    const reading = await gateway.ledger();
    assert.equal(reading.lanes.public.admitted, forgeries.length, "all charged to public");
    assert.equal(reading.lanes.provider_health.admitted, 0);
    assert.equal(reading.lanes.local_health.admitted, 0, "only the observer read the ledger");
    assert.equal(reading.lanes.local_health.reserve_in_use, 0);
    const health = await request(localPort, { path: "/v1/health" });
    assert.equal(JSON.parse(health.body).status, "ok", "the forged drain did not drain");
  } finally {
    await gateway.dispose();
  }
});

function safeJson(text: string): Record<string, unknown> {
  try {
    const value = JSON.parse(text);
    return typeof value === "object" && value !== null ? value : {};
  } catch {
    return {};
  }
}
