/**
 * Proof 7 — release balance: after mixed load on every lane — served, redirected, refused,
 * denied, rate-limited and aborted requests — the quiet ledger shows
 * `completed + cancelled == admitted`, `outstanding == 0`, and no double release.
 */
import assert from "node:assert/strict";
import {
  DEMO_TENANT,
  freePorts,
  Gateway,
  proofConfig,
  writeConfig,
} from "../tests/fixtures/gateway.ts";
import {
  renderRequest,
  request,
  type RequestSpec,
  writeAll,
} from "../tests/fixtures/http_client.ts";

Deno.test("proof 7: mixed load on every lane releases every reservation exactly once", async () => {
  const [publicPort, localPort, providerPort] = freePorts(3);
  const ports = { public: publicPort, local_health: localPort, provider_health: providerPort };
  const config = proofConfig(ports);
  const ledger = config.ledger as { lanes: Record<string, Record<string, unknown>> };
  ledger.lanes.provider_health.rate = { per_second: 5, burst: 10 };
  const dir = await writeConfig(config, [DEMO_TENANT], {
    "assets/big.bin": new Uint8Array(16 * 1024 * 1024),
  });
  const gateway = await Gateway.start(dir, ports);
  try {
    const tenant: [string, string][] = [["Host", "demo.test"]];
    // Slow readers that give up mid-body: their reservations must be cancelled.
    const aborted: Deno.Conn[] = [];
    for (let i = 0; i < 4; i++) {
      const conn = await Deno.connect({ hostname: "127.0.0.1", port: publicPort });
      await writeAll(
        conn,
        new TextEncoder().encode(renderRequest({ path: "/asset", headers: tenant })),
      );
      aborted.push(conn);
    }
    const mixed: [number, RequestSpec][] = [
      [publicPort, { path: "/", headers: tenant }],
      [publicPort, { path: "/old/x", headers: tenant }],
      [publicPort, { path: "/nope", headers: tenant }],
      [publicPort, { path: "/", headers: [["Host", "x.test"]] }],
      [publicPort, { path: "/healthz" }],
      [providerPort, { path: "/healthz" }],
      [providerPort, { path: "/healthz" }],
      [providerPort, { path: "/healthz" }],
      [localPort, { path: "/metrics" }],
      [localPort, { path: "/forbidden" }],
    ];
    const answers = [];
    for (let wave = 0; wave < 10; wave++) {
      answers.push(...await Promise.all(mixed.map(([port, spec]) => request(port, spec))));
    }
    // One burst over the public lane's free slots.
    answers.push(
      ...await Promise.all(
        Array.from({ length: 30 }, () => request(publicPort, { path: "/healthz" })),
      ),
    );
    const statuses = new Set(answers.map((r) => r.status));
    for (const status of [200, 301, 404, 421, 429]) {
      assert.ok(statuses.has(status), `saw ${status}`);
    }
    await gateway.ledgerWhen((r) => r.lanes.public.in_use === 4);
    for (const conn of aborted) conn.close();

    const quiet = await gateway.ledgerWhen((r) => r.outstanding === 0);
    assert.equal(quiet.outstanding, 0);
    assert.equal(quiet.completed + quiet.cancelled, quiet.admitted);
    assert.ok(quiet.cancelled >= 4, `aborted readers cancelled (${quiet.cancelled})`);
    assert.equal(quiet.double_release, 0);
    assert.equal(quiet.release_balanced, true);
    assert.ok(quiet.lanes.provider_health.overload.rate_budget > 0, "the rate budget refused some");
    for (const lane of ["public", "local_health", "provider_health"]) {
      assert.equal(quiet.lanes[lane].in_use, 0, `${lane} holds nothing`);
    }
    assert.equal(quiet.bytes_in_use, 0);
  } finally {
    await gateway.dispose();
  }
});
