/**
 * Proof 3 — protected-lane abuse bound: a flood on a protected lane gets that lane's own typed
 * overloads — the rate budget bounds back-to-back requests, the per-connection bound bounds
 * pipelining — and the other protected lane's floor is untouched.
 */
import assert from "node:assert/strict";
import { freePorts, Gateway, proofConfig, writeConfig } from "../tests/fixtures/gateway.ts";
import { exchange, parseResponses, renderRequest, request } from "../tests/fixtures/http_client.ts";

function config(ports: { public: number; local_health: number; provider_health: number }) {
  const base = proofConfig(ports);
  const ledger = base.ledger as Record<string, unknown> & { lanes: Record<string, unknown> };
  ledger.per_connection = 2;
  ledger.lanes.provider_health = {
    reserve: 2,
    footprint_bytes: 1024,
    deadline_ms: 1000,
    rate: { per_second: 2, burst: 5 },
  };
  return base;
}

Deno.test("proof 3: a provider_health flood is bounded by its own rate budget", async () => {
  const [publicPort, localPort, providerPort] = freePorts(3);
  const ports = { public: publicPort, local_health: localPort, provider_health: providerPort };
  const gateway = await Gateway.start(await writeConfig(config(ports)), ports);
  try {
    const started = performance.now();
    const answers = [];
    for (let i = 0; i < 30; i++) answers.push(await request(providerPort, { path: "/healthz" }));
    const seconds = (performance.now() - started) / 1000;
    const served = answers.filter((r) => r.status === 200).length;
    const limited = answers.filter((r) => r.status === 429);
    // burst 5, then 2 per second: back-to-back requests cannot do more work than that.
    assert.ok(served >= 5, `burst served (${served})`);
    assert.ok(
      served <= 5 + Math.ceil(seconds * 2) + 1,
      `${served} served in ${seconds.toFixed(2)} s`,
    );
    assert.equal(served + limited.length, 30, "every refusal is a typed 429");
    for (const response of limited) {
      assert.equal(JSON.parse(response.body).error.code, "rate_budget");
      assert.ok(Number(response.headers["retry-after"]) >= 1, "Retry-After set");
    }

    const reading = await gateway.ledger();
    const provider = reading.lanes.provider_health;
    assert.equal(provider.admitted, served);
    assert.equal(provider.overload.rate_budget, limited.length);
    // The other protected lane's floor is untouched: nothing charged, nothing refused.
    const local = reading.lanes.local_health;
    assert.equal(local.reserve_in_use, 0);
    for (const [kind, count] of Object.entries(local.overload)) assert.equal(count, 0, kind);
    assert.equal(reading.lanes.public.admitted, 0, "the flood never reached the public lane");
    assert.equal((await request(localPort, { path: "/healthz" })).status, 200);
  } finally {
    await gateway.dispose();
  }
});

Deno.test("proof 3: pipelining on a protected listener is bounded per connection", async () => {
  const [publicPort, localPort, providerPort] = freePorts(3);
  const ports = { public: publicPort, local_health: localPort, provider_health: providerPort };
  const gateway = await Gateway.start(await writeConfig(config(ports)), ports);
  try {
    // Ten pipelined requests on one connection: never more than per_connection (2) of them
    // admitted at once; the rest wait unadmitted behind them and are answered in order.
    const burst = Array.from(
      { length: 10 },
      (_, i) => renderRequest({ path: "/healthz", headers: [["X-Request-Id", `p${i}`]] }, i < 9),
    );
    const answers = parseResponses(await exchange(localPort, burst.join("")));
    assert.equal(answers.length, 10, "every pipelined request is answered");
    assert.deepEqual(answers.map((r) => r.status), Array(10).fill(200));
    assert.deepEqual(
      answers.map((r) => r.headers["x-request-id"]),
      burst.map((_, i) => `p${i}`),
      "in order",
    );
    const reading = await gateway.ledger();
    const local = reading.lanes.local_health;
    assert.equal(local.overload.per_connection_limit, 0, "waiting, not refused");
    assert.ok(
      reading.high_water_slots <= 2,
      `at most per_connection at once: ${reading.high_water_slots}`,
    );
    assert.ok(reading.high_water_slots <= local.max_slots, "occupancy stayed under the ceiling");
    assert.equal(reading.lanes.provider_health.admitted, 0);
    assert.equal((await request(providerPort, { path: "/healthz" })).status, 200);
  } finally {
    await gateway.dispose();
  }
});
