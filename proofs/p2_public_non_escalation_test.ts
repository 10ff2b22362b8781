/**
 * Proof 2 — public non-escalation: a `/healthz` flood plus an asset flood (slow readers holding
 * large responses) saturate the public lane with 429/503, while the protected lanes are never
 * admitted into and still answer. (The proof reads the ledger on `local_health`; each reading
 * leaves itself out, and the proof accounts for its own earlier reads.)
 */
import assert from "node:assert/strict";
import {
  DEMO_TENANT,
  freePorts,
  Gateway,
  proofConfig,
  writeConfig,
} from "../tests/fixtures/gateway.ts";
import { renderRequest, request, writeAll } from "../tests/fixtures/http_client.ts";

const ASSET_BYTES = 16 * 1024 * 1024; // more than loopback socket buffers absorb

Deno.test("proof 2: a public flood saturates public only; protected lanes stay at 0 and answer", async () => {
  const [publicPort, localPort, providerPort] = freePorts(3);
  const ports = { public: publicPort, local_health: localPort, provider_health: providerPort };
  const config = proofConfig(ports); // 16 slots: reserves 4 + 2, general pool 10
  const dir = await writeConfig(config, [DEMO_TENANT], {
    "assets/big.bin": new Uint8Array(ASSET_BYTES),
  });
  const gateway = await Gateway.start(dir, ports);
  const readers: Deno.Conn[] = [];
  try {
    const generalPool = (await gateway.ledger()).general_pool;
    assert.equal(generalPool, 10);

    // Asset flood: more slow readers than the general pool; none of them reads.
    for (let i = 0; i < generalPool + 6; i++) {
      const conn = await Deno.connect({ hostname: "127.0.0.1", port: publicPort });
      const head = renderRequest({ path: "/asset", headers: [["Host", "demo.test"]] }, true);
      await writeAll(conn, new TextEncoder().encode(head));
      readers.push(conn);
    }
    const saturated = await gateway.ledgerWhen((r) => r.lanes.public.in_use === generalPool);
    assert.equal(
      saturated.lanes.public.in_use,
      generalPool,
      "the asset flood holds the whole pool",
    );

    // /healthz flood on public while the pool is held: every answer is a typed overload.
    const statuses = await Promise.all(
      Array.from({ length: 60 }, () => request(publicPort, { path: "/healthz" })),
    );
    for (const response of statuses) {
      assert.ok(response.status === 429 || response.status === 503, `got ${response.status}`);
      const code = JSON.parse(response.body).error.code;
      assert.ok(["lane_pool_full", "aggregate_full", "byte_budget"].includes(code), code);
    }

    const reading = await gateway.ledger();
    const overloads = reading.lanes.public.overload;
    assert.ok(
      overloads.lane_pool_full + overloads.aggregate_full >= 66,
      "public refused the flood",
    );
    assert.equal(reading.lanes.public.in_use, generalPool, "public never exceeds the general pool");
    // The only local_health admissions are this proof's own earlier ledger reads.
    const observerReads = gateway.ledgerReads - 1;
    assert.equal(
      reading.lanes.local_health.admitted,
      observerReads,
      "no public work on local_health",
    );
    assert.equal(reading.lanes.provider_health.admitted, 0, "admitted_provider_health stays 0");
    assert.equal(reading.lanes.local_health.reserve_in_use, 0);
    assert.equal(reading.lanes.provider_health.reserve_in_use, 0);

    // Both protected lanes still answer while the public lane is saturated.
    const provider = await request(providerPort, { path: "/healthz" });
    assert.equal(provider.status, 200);
    assert.equal((await request(localPort, { path: "/healthz" })).status, 200);
    assert.equal((await request(localPort, { path: "/readyz" })).status, 200);
    const after = await gateway.ledger();
    assert.equal(after.lanes.provider_health.admitted, 1);
    assert.equal(after.lanes.public.in_use, generalPool, "still saturated when the probes ran");
  } finally {
    for (const conn of readers) conn.close();
    await gateway.ledgerWhen((r) => r.outstanding === 0).catch(() => {});
    await gateway.dispose();
  }
});
