/**
 * Proof 1 — lane selection by provenance: a request on each listener is charged to that
 * listener's lane, and only to it — two listeners of one lane alike.
 *
 * Evidence from outside the gateway stands beside the ledger: the same request sent to every
 * listener is answered as that listener's lane answers it (only a public listener reaches the
 * tenant dataplane, and only then does the upstream receive it), and each lane's own route is
 * served only where that lane listens.
 */
import assert from "node:assert/strict";
import {
  freePorts,
  Gateway,
  type LedgerReading,
  proofConfig,
  writeConfig,
} from "../tests/fixtures/gateway.ts";
import { type RawResponse, request, type RequestSpec } from "../tests/fixtures/http_client.ts";
import { envelope } from "../tests/fixtures/in_process.ts";
import { UpstreamFixture } from "../tests/fixtures/upstream.ts";
import { explained } from "./fixtures/evidence.ts";
import { proxyTenant } from "./fixtures/held_upstream.ts";

type Lane = "public" | "local_health" | "provider_health";
const LANES: Lane[] = ["public", "local_health", "provider_health"];

Deno.test("proof 1: a request on each listener is charged to that listener's lane", async () => {
  const [publicPort, secondPublic, localPort, providerPort] = freePorts(4);
  const ports = { public: publicPort, local_health: localPort, provider_health: providerPort };
  const upstream = await UpstreamFixture.start();
  const config = proofConfig(ports, { egress: { direct: [`127.0.0.1:${upstream.port}`] } });
  (config.lanes as Record<string, { listen: unknown[] }>).public.listen.push({
    hostname: "127.0.0.1",
    port: secondPublic,
  });
  const dir = await writeConfig(config, [proxyTenant("shop.test", upstream.port)]);
  const gateway = await Gateway.start(dir, ports);
  const listeners: [string, number, Lane][] = [
    ["public #1", publicPort, "public"],
    ["public #2", secondPublic, "public"],
    ["local_health", localPort, "local_health"],
    ["provider_health", providerPort, "provider_health"],
  ];

  /** Sends `spec` to `port`; returns the answer and how each lane's admissions moved. */
  async function charged(port: number, spec: RequestSpec) {
    const before = await gateway.ledger();
    const response = await request(port, spec);
    const after = await gateway.ledger();
    const moved = {} as Record<Lane, number>;
    for (const lane of LANES) moved[lane] = admitted(after, lane) - admitted(before, lane);
    // The `before` reading was itself a local_health admission (each reading leaves itself out).
    moved.local_health -= 1;
    return { response, moved, before, after };
  }

  await explained([gateway], async () => {
    const start = await gateway.ledger();
    for (const lane of LANES) assert.equal(admitted(start, lane), 0, `${lane} starts at 0`);

    // The same tenant request on every listener: charged to that listener's lane only.
    for (const [name, port, lane] of listeners) {
      const path = `/echo/via-${name.replace(/\W+/g, "-")}`;
      const { response, moved, before, after } = await charged(port, {
        path,
        headers: [["Host", "shop.test"]],
      });
      assert.deepEqual(moved, only(lane), `${name}: ${response.status} ${response.body}`);
      if (lane === "public") {
        assert.equal(response.status, 200, response.body);
        assert.equal(JSON.parse(response.body).url, path, "the upstream's own answer");
      } else {
        // No dataplane on a protected lane: its own typed denial, counted on it.
        assert.equal(response.status, 404, response.body);
        assert.equal(envelope(response).code, "route_not_allowed");
        assert.equal(deniedRoute(after, lane) - deniedRoute(before, lane), 1);
      }
    }
    // The upstream received exactly the requests sent to the public listeners.
    assert.deepEqual(upstream.seen.map((r) => r.url), ["/echo/via-public-1", "/echo/via-public-2"]);

    // Each lane's own route, on its own listener: answered as only that lane answers.
    const own: [number, RequestSpec, Lane, (r: RawResponse) => void][] = [
      [publicPort, { path: "/healthz" }, "public", (r) => assert.equal(r.body, '{"status":"ok"}')],
      [secondPublic, { path: "/healthz" }, "public", (r) => {
        assert.equal(r.body, '{"status":"ok"}');
      }],
      [providerPort, { path: "/healthz" }, "provider_health", (r) => assert.equal(r.body, "ok\n")],
      [localPort, { path: "/readyz" }, "local_health", (r) => {
        assert.equal(r.body, '{"ready":true}');
      }],
    ];
    for (const [port, spec, lane, check] of own) {
      const { response, moved } = await charged(port, spec);
      assert.equal(response.status, 200, `${lane} ${spec.path}: ${response.body}`);
      check(response);
      assert.deepEqual(moved, only(lane), `${lane} ${spec.path}`);
    }
    // The local lane's route is not served on the others: another lane's own answer.
    for (const port of [publicPort, providerPort]) {
      const { response, moved } = await charged(port, { path: "/readyz" });
      assert.notEqual(response.body, '{"ready":true}', `port ${port}`);
      assert.ok([404, 421].includes(response.status), `${response.status} ${response.body}`);
      assert.deepEqual(moved, only(port === publicPort ? "public" : "provider_health"));
    }

    const end = await gateway.ledger();
    assert.equal(admitted(end, "public"), 5);
    assert.equal(admitted(end, "provider_health"), 3);
    assert.equal(admitted(end, "local_health"), 2 + gateway.ledgerReads - 1);
    assert.equal(upstream.seen.length, 2, "nothing else reached the upstream");
    const quiet = await gateway.ledgerWhen((r) => r.outstanding === 0);
    assert.equal(quiet.release_balanced, true);
  }).finally(async () => {
    await upstream.stop();
    await gateway.dispose();
  });
});

function admitted(reading: LedgerReading, lane: Lane): number {
  return reading.lanes[lane].admitted;
}

function deniedRoute(reading: LedgerReading, lane: Lane): number {
  return reading.lanes[lane].denied_route;
}

function only(lane: Lane): Record<Lane, number> {
  return { public: 0, local_health: 0, provider_health: 0, [lane]: 1 };
}
