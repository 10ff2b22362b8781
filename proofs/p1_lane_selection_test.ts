/**
 * Proof 1 — lane selection by provenance: a request on each listener is charged to that
 * listener's lane, and only to it.
 */
import assert from "node:assert/strict";
import { freePorts, Gateway, proofConfig, writeConfig } from "../tests/fixtures/gateway.ts";
import { request } from "../tests/fixtures/http_client.ts";

Deno.test("proof 1: a request on each listener is charged to that listener's lane", async () => {
  const [publicPort, localPort, providerPort] = freePorts(3);
  const ports = { public: publicPort, local_health: localPort, provider_health: providerPort };
  const gateway = await Gateway.start(await writeConfig(proofConfig(ports)), ports);
  try {
    const before = await gateway.ledger();
    for (const lane of ["public", "local_health", "provider_health"]) {
      assert.equal(before.lanes[lane].admitted, 0, `${lane} starts at 0`);
    }

    assert.equal((await request(publicPort, { path: "/healthz" })).status, 200);
    let reading = await gateway.ledger();
    assert.equal(reading.lanes.public.admitted, 1);
    assert.equal(reading.lanes.provider_health.admitted, 0);
    // The first ledger read is the only other local_health admission so far.
    assert.equal(reading.lanes.local_health.admitted, 1);

    const probe = await request(providerPort, { path: "/healthz" });
    assert.equal(probe.status, 200);
    assert.equal(probe.body, "ok\n");
    reading = await gateway.ledger();
    assert.equal(reading.lanes.public.admitted, 1);
    assert.equal(reading.lanes.provider_health.admitted, 1);
    assert.equal(reading.lanes.local_health.admitted, 2);

    assert.equal((await request(localPort, { path: "/healthz" })).status, 200);
    reading = await gateway.ledger();
    assert.equal(reading.lanes.public.admitted, 1);
    assert.equal(reading.lanes.provider_health.admitted, 1);
    assert.equal(reading.lanes.local_health.admitted, 4);
    assert.equal(reading.admitted, 6);
    assert.equal(reading.release_balanced, true);
  } finally {
    await gateway.dispose();
  }
});
