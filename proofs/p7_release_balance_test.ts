/**
 * Proof 7 — release balance: after mixed load on every lane — served, proxied, redirected,
 * refused, denied, rate-limited and aborted requests — the quiet ledger shows
 * `completed + cancelled == admitted`, `outstanding == 0`, and no double release.
 *
 * The balance is the ledger's own arithmetic, so the proof checks each term against evidence from
 * outside the gateway: every answer the clients received, tallied by lane, status and error code;
 * the requests the upstream received; and the clients that gave up mid-body. Admitted is what the
 * clients were answered without an admission refusal, completed is what they received whole,
 * cancelled is what they abandoned.
 */
import assert from "node:assert/strict";
import {
  DEMO_TENANT,
  freePorts,
  Gateway,
  type LedgerReading,
  proofConfig,
  writeConfig,
} from "../tests/fixtures/gateway.ts";
import { type RawResponse, request, type RequestSpec } from "../tests/fixtures/http_client.ts";
import { UpstreamFixture } from "../tests/fixtures/upstream.ts";
import { errorCode, explained, tally } from "./fixtures/evidence.ts";
import { proxyTenant } from "./fixtures/held_upstream.ts";
import { type Holder, slowReader } from "./fixtures/holders.ts";

type Lane = "public" | "local_health" | "provider_health";

/** Refusals decided at admission: the request was never admitted. */
const ADMISSION_REFUSALS = new Set([
  "lane_pool_full",
  "per_connection_limit",
  "rate_budget",
  "aggregate_full",
  "byte_budget",
  "connection_rate",
]);

/** Overloads counted after admission: the request was admitted, then cancelled. */
const ADMITTED_THEN_CANCELLED = ["deadline_exceeded", "priority_shed"];

Deno.test("proof 7: mixed load on every lane releases every reservation exactly once", async () => {
  const [publicPort, localPort, providerPort] = freePorts(3);
  const ports = { public: publicPort, local_health: localPort, provider_health: providerPort };
  const upstream = await UpstreamFixture.start();
  const config = proofConfig(ports, { egress: { direct: [`127.0.0.1:${upstream.port}`] } });
  const ledger = config.ledger as { lanes: Record<string, Record<string, unknown>> };
  ledger.lanes.provider_health.rate = { per_second: 5, burst: 10 };
  const dir = await writeConfig(config, [DEMO_TENANT, proxyTenant("shop.test", upstream.port)], {
    "assets/big.bin": new Uint8Array(16 * 1024 * 1024),
  });
  const gateway = await Gateway.start(dir, ports);
  const aborted: Holder[] = [];
  await explained([gateway], async () => {
    const tenant: [string, string][] = [["Host", "demo.test"]];
    // Slow readers that give up mid-body: their reservations must be cancelled.
    for (let i = 0; i < 4; i++) {
      aborted.push(await slowReader(publicPort, { path: "/asset", headers: tenant }));
    }
    assert.deepEqual(aborted.map((r) => r.status), [200, 200, 200, 200]);
    const mixed: [Lane, RequestSpec][] = [
      ["public", { path: "/", headers: tenant }],
      ["public", { path: "/old/x", headers: tenant }],
      ["public", { path: "/nope", headers: tenant }],
      ["public", { path: "/", headers: [["Host", "x.test"]] }],
      ["public", { path: "/healthz" }],
      ["public", { path: "/echo/proxied", headers: [["Host", "shop.test"]] }],
      ["provider_health", { path: "/healthz" }],
      ["provider_health", { path: "/healthz" }],
      ["provider_health", { path: "/healthz" }],
      ["local_health", { path: "/metrics" }],
      ["local_health", { path: "/forbidden" }],
    ];
    const answers: [Lane, RawResponse][] = [];
    const send = async (lane: Lane, spec: RequestSpec) => {
      answers.push([lane, await request(ports[lane], spec)]);
    };
    for (let wave = 0; wave < 10; wave++) {
      await Promise.all(mixed.map(([lane, spec]) => send(lane, spec)));
    }
    // One burst over the public lane's free slots.
    await Promise.all(Array.from({ length: 30 }, () => send("public", { path: "/healthz" })));
    const statuses = new Set(answers.map(([, r]) => r.status));
    for (const status of [200, 301, 404, 421, 429]) {
      assert.ok(statuses.has(status), `saw ${status}: ${JSON.stringify(tallyAll(answers))}`);
    }
    const held = await gateway.ledgerWhen((r) => r.lanes.public.in_use === aborted.length, 30_000);
    assert.equal(held.lanes.public.in_use, aborted.length, "the slow readers hold their slots");
    for (const reader of aborted) reader.close();

    const quiet = await gateway.ledgerWhen((r) => r.outstanding === 0, 30_000);
    const observerReads = gateway.ledgerReads - 1;
    assert.equal(quiet.outstanding, 0);
    assert.equal(quiet.double_release, 0);
    for (const lane of ["public", "local_health", "provider_health"] as const) {
      assert.equal(quiet.lanes[lane].in_use, 0, `${lane} holds nothing`);
    }
    assert.equal(quiet.bytes_in_use, 0);

    // Each lane's counters against what its clients were told.
    const extra = { public: aborted.length, local_health: observerReads, provider_health: 0 };
    let admittedSeen = 0;
    for (const lane of ["public", "local_health", "provider_health"] as const) {
      const seen = answers.filter(([l]) => l === lane).map(([, r]) => r);
      const refused = seen.filter((r) => ADMISSION_REFUSALS.has(errorCode(r)));
      const admitted = seen.length - refused.length + extra[lane];
      admittedSeen += admitted;
      const view = `${lane}: client ${JSON.stringify(tally(seen))}, ledger ${
        JSON.stringify(quiet.lanes[lane])
      }`;
      assert.equal(quiet.lanes[lane].admitted, admitted, view);
      for (const kind of ADMISSION_REFUSALS) {
        const told = refused.filter((r) => errorCode(r) === kind).length;
        assert.equal(quiet.lanes[lane].overload[kind], told, `${kind}: ${view}`);
      }
    }
    assert.equal(quiet.admitted, admittedSeen);
    assert.ok(quiet.lanes.provider_health.overload.rate_budget > 0, "the rate budget refused some");

    // Cancelled: exactly the readers that gave up, and requests cut at their deadline.
    const cutAfterAdmission = sumOverloads(quiet, ADMITTED_THEN_CANCELLED);
    assert.equal(quiet.cancelled, aborted.length + cutAfterAdmission, "cancelled = abandoned");
    // Completed: every admitted answer a client received whole (the earlier ledger reads too).
    assert.equal(quiet.completed, admittedSeen - aborted.length - cutAfterAdmission);
    assert.equal(quiet.completed + quiet.cancelled, quiet.admitted);
    assert.equal(quiet.release_balanced, true);

    // The upstream received exactly the proxied requests the clients saw answered by it.
    const proxied = answers.filter(([, r]) => r.body.includes('"url":"/echo/proxied"'));
    assert.equal(upstream.seen.length, proxied.length, "upstream received = clients answered");
    assert.ok(proxied.length > 0, "some proxied requests got through");
  }).finally(async () => {
    for (const reader of aborted) reader.close();
    await upstream.stop();
    await gateway.dispose();
  });
});

function sumOverloads(reading: LedgerReading, kinds: readonly string[]): number {
  let sum = 0;
  for (const lane of Object.values(reading.lanes) as { overload: Record<string, number> }[]) {
    for (const kind of kinds) sum += lane.overload[kind] ?? 0;
  }
  return sum;
}

function tallyAll(answers: readonly [Lane, RawResponse][]): Record<string, number> {
  return tally(answers.map(([, r]) => r));
}
