/**
 * Proof 6 — forgery negative: a public request whose Host, Origin, X-Forwarded-* or path names the
 * protected port or route — even one carrying the real admin token — is charged to `public`, and
 * is answered as public traffic.
 *
 * Evidence from outside the gateway stands beside the ledger: each client's answer (a tenant's,
 * or a typed public refusal — never the ledger, metrics or a drain), what the upstream received
 * (the forged paths arrive there, as tenant traffic), and the other side: the same requests on
 * the local_health listener do get the ledger, the metrics, and the drain.
 */
import assert from "node:assert/strict";
import {
  ADMIN_AUTH,
  DEMO_TENANT,
  freePorts,
  Gateway,
  proofConfig,
  writeConfig,
} from "../tests/fixtures/gateway.ts";
import {
  json,
  type RawResponse,
  request,
  type RequestSpec,
} from "../tests/fixtures/http_client.ts";
import { connectionRefused, envelope } from "../tests/fixtures/in_process.ts";
import { UpstreamFixture } from "../tests/fixtures/upstream.ts";
import { explained, pollUntil } from "./fixtures/evidence.ts";
import { proxyTenant } from "./fixtures/held_upstream.ts";

const SHOP = "shop.test";

/** How a forgery must be answered on public: a typed refusal's code, or the upstream's echo. */
type Expected = { code: string } | { upstream: string } | { body: string };

Deno.test("proof 6: request fields naming a protected lane are charged to public", async () => {
  const [publicPort, localPort, providerPort] = freePorts(3);
  const ports = { public: publicPort, local_health: localPort, provider_health: providerPort };
  const upstream = await UpstreamFixture.start();
  const config = proofConfig(ports, { egress: { direct: [`127.0.0.1:${upstream.port}`] } });
  const dir = await writeConfig(config, [DEMO_TENANT, proxyTenant(SHOP, upstream.port)]);
  const gateway = await Gateway.start(dir, ports);
  const local = `127.0.0.1:${localPort}`;
  const provider = `127.0.0.1:${providerPort}`;
  const forwarded: [string, string][] = [
    ["X-Forwarded-For", "127.0.0.1"],
    ["X-Forwarded-Host", local],
    ["X-Forwarded-Port", String(localPort)],
    ["X-Forwarded-Proto", "http"],
    ["Forwarded", `for=127.0.0.1;host=${local}`],
  ];
  const drain = { method: "POST", path: "/v1/drain", body: "" };
  const forgeries: [RequestSpec, Expected][] = [
    // Naming the protected listener as the host: no such tenant.
    [{ path: "/v1/ledger", headers: [["Host", local]] }, { code: "misdirected_request" }],
    [{ path: "/metrics", headers: [["Host", local]] }, { code: "misdirected_request" }],
    [{ ...drain, headers: [["Host", local], ADMIN_AUTH] }, { code: "misdirected_request" }],
    [{ path: "/readyz", headers: [["Host", local]] }, { code: "misdirected_request" }],
    [{ path: `http://${local}/v1/ledger`, headers: [["Host", local]] }, {
      code: "misdirected_request",
    }],
    // A real tenant, with every forwarding header naming the protected listener: tenant traffic.
    [{ path: "/v1/ledger", headers: [["Host", SHOP], ["Origin", `http://${local}`]] }, {
      upstream: "/v1/ledger",
    }],
    [{ path: "/metrics", headers: [["Host", SHOP], ...forwarded] }, { upstream: "/metrics" }],
    [{ ...drain, headers: [["Host", SHOP], ADMIN_AUTH, ...forwarded] }, {
      upstream: "/v1/drain",
    }],
    [{ path: "/v1/ledger", headers: [["Host", "demo.test"], ...forwarded] }, { code: "no_route" }],
    // Naming the provider probe port: public's own /healthz answer, not the probe's.
    [{ path: "/healthz", headers: [["Host", provider], ["X-Forwarded-Port", `${providerPort}`]] }, {
      body: '{"status":"ok"}',
    }],
  ];
  await explained([gateway], async () => {
    for (const [spec, expected] of forgeries) {
      const response = await request(publicPort, spec);
      const what = `${spec.method ?? "GET"} ${spec.path} ${
        JSON.stringify(spec.headers)
      }: ${response.status} ${response.body}`;
      assert.ok(!leaks(response), `${what}: a protected answer leaked`);
      if ("code" in expected) {
        assert.equal(envelope(response).code, expected.code, what);
      } else if ("upstream" in expected) {
        assert.equal(response.status, 200, what);
        assert.equal(json(response).url, expected.upstream, `${what}: the upstream's answer`);
      } else {
        assert.deepEqual([response.status, response.body], [200, expected.body], what);
      }
    }
    // The upstream received exactly the forgeries addressed to its tenant, as tenant traffic.
    const toShop = forgeries.filter(([, e]) => "upstream" in e).map(([, e]) => e);
    assert.deepEqual(
      upstream.seen.map((r) => r.url),
      toShop.map((e) => (e as { upstream: string }).upstream),
    );

    const reading = await gateway.ledger();
    assert.equal(reading.lanes.public.admitted, forgeries.length, "all charged to public");
    assert.equal(reading.lanes.provider_health.admitted, 0);
    assert.equal(reading.lanes.local_health.admitted, 0, "only the observer read the ledger");
    assert.equal(reading.lanes.local_health.reserve_in_use, 0);
    // Not drained by the forged drains, with the real token: every lane still serves.
    const health = await request(localPort, { path: "/v1/health" });
    assert.equal(json(health).status, "ok", "the forged drain did not drain");
    assert.equal((await request(publicPort, { path: "/healthz" })).status, 200);
    assert.equal((await request(providerPort, { path: "/healthz" })).body, "ok\n");

    // The other side: on the local_health listener the same requests reach what they name.
    const ledger = await request(localPort, { path: "/v1/ledger" });
    assert.ok(leaks(ledger), "the ledger is served on local_health");
    const metrics = await request(localPort, { path: "/metrics" });
    assert.ok(leaks(metrics), "the metrics are served on local_health");
    const drained = await request(localPort, { ...drain, headers: [ADMIN_AUTH] });
    assert.equal(drained.status, 202, drained.body);
    await pollUntil(
      "the genuine drain stops public admission",
      async () => await connectionRefused(publicPort) || undefined,
    );
  }).finally(async () => {
    await upstream.stop();
    await gateway.dispose();
  });
});

/** True when an answer carries what only local_health serves: the ledger or the metrics. */
function leaks(response: RawResponse): boolean {
  if (response.body.includes("# TYPE portcullis_")) return true;
  try {
    const value = JSON.parse(response.body);
    return typeof value === "object" && value !== null && "lanes" in value;
  } catch {
    return false;
  }
}
