/**
 * Proof 2 — public non-escalation: a concurrent public flood that tries to take every slot of the
 * gateway gets exactly the general pool (`application_slots − Σ reserves`), the rest typed 429s,
 * and a `/healthz` flood on `public` meanwhile is refused too — while both protected lanes, never
 * charged for public work, still serve from their reserves.
 *
 * The flood is held by an upstream that answers only when the proof lets go, so "public holds the
 * whole general pool" is a state, not a race. Evidence from outside the gateway stands beside the
 * ledger: what the clients were answered (200 against 429/503) and what the upstream received.
 */
import assert from "node:assert/strict";
import {
  DEMO_TENANT,
  freePorts,
  Gateway,
  proofConfig,
  writeConfig,
} from "../tests/fixtures/gateway.ts";
import { type RawResponse, request } from "../tests/fixtures/http_client.ts";
import { countStatus, explained, pollUntil, tally } from "./fixtures/evidence.ts";
import { HeldUpstream, proxyTenant } from "./fixtures/held_upstream.ts";

const SHOP = "shop.test";

Deno.test("proof 2: a public flood gets the general pool only; protected lanes still serve", async () => {
  const [publicPort, localPort, providerPort] = freePorts(3);
  const ports = { public: publicPort, local_health: localPort, provider_health: providerPort };
  const upstream = await HeldUpstream.start();
  const config = proofConfig(ports, { egress: { direct: [`127.0.0.1:${upstream.port}`] } });
  const ledger = config.ledger as {
    application_slots: number;
    lanes: Record<string, { reserve?: number }>;
  };
  // The expectation comes from the configured numbers, not from the gateway's own reading.
  const slots = ledger.application_slots;
  const localReserve = ledger.lanes.local_health.reserve!;
  const providerReserve = ledger.lanes.provider_health.reserve!;
  const generalPool = slots - localReserve - providerReserve;
  assert.equal(generalPool, 10);
  const dir = await writeConfig(config, [DEMO_TENANT, proxyTenant(SHOP, upstream.port)]);
  const gateway = await Gateway.start(dir, ports);
  const flood = slots + 8;
  const answers: RawResponse[] = [];
  let pending: Promise<unknown> = Promise.resolve();
  await explained([gateway], async () => {
    // Every public request tries for a slot at once; the admitted ones wait at the upstream.
    pending = Promise.all(
      Array.from(
        { length: flood },
        (_, i) =>
          request(publicPort, { path: `/flood/${i}`, headers: [["Host", SHOP]] })
            .then((response) => answers.push(response)),
      ),
    );
    await pollUntil(
      "every flood request is refused at the client or held at the upstream",
      () => answers.length + upstream.received.length === flood || undefined,
      { seen: () => ({ answers: tally(answers), upstream: upstream.received.length }) },
    );
    // Exactly the general pool got through, the (pool + 1)-th and every later one refused.
    assert.equal(upstream.received.length, generalPool, "the upstream saw the general pool only");
    assert.deepEqual(tally(answers), { "429 lane_pool_full": flood - generalPool });

    // A /healthz flood on public while the pool is held: every answer is the public lane's own
    // typed overload, none is served.
    const health = await Promise.all(
      Array.from({ length: 20 }, () => request(publicPort, { path: "/healthz" })),
    );
    assert.deepEqual(tally(health), { "429 lane_pool_full": 20 });

    // Both protected lanes still serve, from their reserves: as many requests at once as each
    // reserve holds.
    const local = await Promise.all(
      ["/healthz", "/readyz", "/v1/health", "/metrics"].slice(0, localReserve).map((path) =>
        request(localPort, { path })
      ),
    );
    assert.deepEqual(local.map((r) => r.status), Array(localReserve).fill(200), bodies(local));
    const provider = await Promise.all(
      Array.from({ length: providerReserve }, () => request(providerPort, { path: "/healthz" })),
    );
    assert.deepEqual(provider.map((r) => r.body), Array(providerReserve).fill("ok\n"));

    // The ledger, beside what the clients and the upstream saw.
    const reading = await gateway.ledger();
    const pub = reading.lanes.public;
    assert.equal(reading.general_pool, generalPool);
    assert.equal(pub.admitted, upstream.received.length, "admitted = what reached the upstream");
    assert.equal(pub.in_use, generalPool, "public holds the whole general pool, not more");
    assert.equal(pub.overload.lane_pool_full, flood - generalPool + health.length);
    assert.equal(pub.overload.aggregate_full + pub.overload.byte_budget, 0);
    assert.equal(reading.general_in_use, generalPool);
    assert.ok(reading.high_water_slots <= slots, `high water ${reading.high_water_slots}`);
    // Nothing public was charged to a protected lane: their admissions are the protected
    // requests above (and this proof's earlier ledger reads), their reserves are free again.
    assert.equal(reading.lanes.provider_health.admitted, providerReserve);
    assert.equal(reading.lanes.local_health.admitted, localReserve + gateway.ledgerReads - 1);
    assert.equal(reading.lanes.local_health.reserve_in_use, 0);
    assert.equal(reading.lanes.provider_health.reserve_in_use, 0);
    for (const lane of ["local_health", "provider_health"]) {
      for (const [kind, count] of Object.entries(reading.lanes[lane].overload)) {
        assert.equal(count, 0, `${lane} ${kind}`);
      }
    }

    // The upstream lets go: every admitted request is answered, and public admits again.
    upstream.release();
    await pending;
    assert.equal(countStatus(answers, 200), generalPool);
    assert.equal(upstream.answered, generalPool);
    const after = await request(publicPort, { path: "/after", headers: [["Host", SHOP]] });
    assert.equal(after.status, 200, after.body);
    const quiet = await gateway.ledgerWhen((r) => r.outstanding === 0, 30_000);
    assert.equal(quiet.lanes.public.admitted, generalPool + 1);
    assert.equal(upstream.received.length, generalPool + 1);
    assert.equal(quiet.release_balanced, true);
  }).finally(async () => {
    upstream.release();
    await pending.catch(() => {});
    await upstream.stop();
    await gateway.dispose();
  });
});

function bodies(responses: readonly RawResponse[]): string {
  return responses.map((r) => `${r.status} ${r.body.slice(0, 200)}`).join("\n");
}
