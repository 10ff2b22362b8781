/**
 * Proof 12 — no path inward: a tenant can never make the gateway a client of its own listeners.
 *
 * - A tenant whose backends aim at each of the edge's listeners (public, local_health,
 *   provider_health, ACME http-01, passthrough), in every spelling of the host a resolver accepts,
 *   is refused by `check`, by boot, and when a hub pushes it to a running edge; an `egress.direct`
 *   entry naming a listener is refused too.
 * - A backend whose *name* only the SOCKS instance resolves (to this machine) is refused at connect
 *   time: the instance reports it connected from a loopback address, and the tunnel is closed
 *   before a byte of the request goes through. The protected lane never sees a request.
 *
 * @module
 */
import assert from "node:assert/strict";
import { stringify } from "yaml";
import {
  checkConfig,
  freePorts,
  Gateway,
  type LanePorts,
  proofConfig,
  writeConfig,
} from "../tests/fixtures/gateway.ts";
import { request } from "../tests/fixtures/http_client.ts";
import { edgeStatus, HubProcess, startRemoteEdge, tenantText } from "../tests/fixtures/hub.ts";
import { SocksFixture } from "../tests/fixtures/socks5.ts";
import { startTestHub } from "../tests/fixtures/hub_in_process.ts";
import { formatFlags, requiredGrants } from "../src/boot/flags.ts";
import { loadConfig } from "../src/config/load.ts";

/** Every spelling of "this machine" a backend URL can carry. */
const SPELLINGS = [
  "127.0.0.1",
  "127.0.0.2",
  "127.1",
  "2130706433",
  "0177.0.0.1",
  "0x7f.0.0.1",
  "0x7f000001",
  "localhost",
  "LocalHost",
  "edge.localhost",
  "0.0.0.0",
  "0",
  "[::1]",
  "[::]",
  "[::ffff:127.0.0.1]",
  "[::ffff:7f00:1]",
  "[0:0:0:0:0:ffff:7f00:1]",
];

interface Listeners {
  readonly ports: LanePorts;
  readonly acme: number;
  readonly passthrough: number;
}

/** An edge config with all five kinds of listener on loopback. */
async function everyListener(): Promise<{ config: Record<string, unknown>; listeners: Listeners }> {
  const [publicPort, localPort, providerPort, acme, passthrough] = freePorts(5);
  const ports = { public: publicPort, local_health: localPort, provider_health: providerPort };
  const config = proofConfig(ports);
  const challenges = await Deno.makeTempDir({ prefix: "portcullis-acme-" });
  // deno-lint-ignore no-explicit-any
  const lanes = config.lanes as any;
  lanes.public.acme_http = { hostname: "127.0.0.1", port: acme, challenge_dir: challenges };
  lanes.public.passthrough = { listen: [{ hostname: "127.0.0.1", port: passthrough }] };
  // No loopback allowance: what the static check refuses must not depend on it.
  config.egress = { socks: [{ hostname: "127.0.0.1", port: freePorts(1)[0] }], allow_private: [] };
  return { config, listeners: { ports, acme, passthrough } };
}

/** One route per (listener, spelling): `r<i>` proxies to `http://<spelling>:<port>`. */
function inwardTenant(ports: readonly number[]): { tenant: Record<string, unknown>; n: number } {
  const routes = ports.flatMap((port, p) =>
    SPELLINGS.map((spelling, s) => ({
      name: `r${p}-${s}`,
      match: { prefix: `/r${p}-${s}/` },
      proxy: { backends: [{ url: `http://${spelling}:${port}` }] },
    }))
  );
  return { tenant: { host: "inward.test", routes }, n: routes.length };
}

function listenerPorts(l: Listeners): number[] {
  return [l.ports.public, l.ports.local_health, l.ports.provider_health, l.acme, l.passthrough];
}

/** Asserts that every route of the inward tenant was refused as reaching a listener. */
function assertEveryRouteRefused(output: string, n: number): void {
  const refused = output.match(/reaches this gateway's own listener/g)?.length ?? 0;
  assert.equal(refused, n, `${refused} of ${n} inward backends refused:\n${output.slice(0, 3000)}`);
}

Deno.test("proof 12: check refuses a tenant aimed at each own listener, in every spelling", async () => {
  const { config, listeners } = await everyListener();
  const { tenant, n } = inwardTenant(listenerPorts(listeners));
  const dir = await writeConfig(config, [tenant]);
  try {
    const result = await checkConfig(dir.config);
    assert.equal(result.code, 1, result.stdout);
    assertEveryRouteRefused(result.stderr, n);
  } finally {
    await Deno.remove(dir.dir, { recursive: true });
  }
});

Deno.test("proof 12: boot refuses it too, and an egress.direct entry naming a listener", async () => {
  const { config, listeners } = await everyListener();
  const { tenant, n } = inwardTenant(listenerPorts(listeners));
  const local = listeners.ports.local_health;
  // deno-lint-ignore no-explicit-any
  (config.egress as any).direct = [`127.0.0.1:${local}`, `localhost:${local}`];
  const dir = await writeConfig(config, [tenant]);
  try {
    // The grants of the config as written: `flags` refuses what `check` refuses, and this proof
    // is about the boot.
    const grants = formatFlags(requiredGrants(await loadConfig(dir.config))).split(" ");
    await assert.rejects(
      () => Gateway.start(dir, listeners.ports, grants),
      (error: Error) => {
        assert.match(error.message, /^gateway exited before ready/);
        assertEveryRouteRefused(error.message, n + 2);
        assert.match(error.message, /egress\.direct\[0\].*reaches this gateway's own listener/);
        assert.match(error.message, /egress\.direct\[1\].*reaches this gateway's own listener/);
        return true;
      },
    );
  } finally {
    await Deno.remove(dir.dir, { recursive: true }).catch(() => {});
  }
});

Deno.test("proof 12: a hub push aimed at the edge's listeners is rejected; the edge keeps serving", async () => {
  const hub = await HubProcess.start({
    runtime: { "demo.test.yaml": tenantText("demo.test", "v1") },
  });
  let edge: Gateway | undefined;
  try {
    edge = await startRemoteEdge(hub, "edge-a");
    const until = Date.now() + 10_000;
    while ((await edgeStatus(edge)).tenants !== 1 && Date.now() < until) {
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    const ports = [edge.ports.public, edge.ports.local_health];
    const { tenant, n } = inwardTenant(ports);
    await hub.writeTenant("inward.test.yaml", stringify(tenant));
    let status = await edgeStatus(edge);
    while (status.last_rejected === null && Date.now() < until) {
      await new Promise((resolve) => setTimeout(resolve, 50));
      status = await edgeStatus(edge);
    }
    const rejected = JSON.stringify(status.last_rejected);
    assertEveryRouteRefused(rejected, n);
    assert.equal(status.tenants, 1, "the previous generation stays");
    const demo = await request(edge.ports.public, { path: "/", headers: [["Host", "demo.test"]] });
    assert.equal(demo.status, 200);
    const inward = await request(edge.ports.public, {
      path: "/r1-0/v1/ledger",
      headers: [["Host", "inward.test"]],
    });
    assert.equal(inward.status, 421, "the inward tenant was never served");
  } finally {
    await edge?.dispose();
    await hub.dispose();
  }
});

Deno.test("proof 12: a name the SOCKS instance resolves to this machine is refused at connect time", async () => {
  const [publicPort, localPort, providerPort] = freePorts(3);
  const ports = { public: publicPort, local_health: localPort, provider_health: providerPort };
  // The instance resolves sneaky.test to this machine: only it knows; the gateway sees a name.
  const socks = await SocksFixture.start({
    resolve: { "sneaky.test": { hostname: "127.0.0.1", port: localPort } },
  });
  const config = proofConfig(ports);
  config.egress = { socks: [{ hostname: "127.0.0.1", port: socks.port }], allow_private: [] };
  const tenant = {
    host: "sneaky.test",
    routes: [{
      name: "inward",
      match: { prefix: "/" },
      proxy: { backends: [{ url: `http://sneaky.test:${localPort}` }], attempts: 1 },
    }],
  };
  const gateway = await Gateway.start(await writeConfig(config, [tenant]), ports);
  try {
    const before = await gateway.ledger();
    for (const path of ["/v1/ledger", "/v1/drain", "/metrics"]) {
      const method = path === "/v1/drain" ? "POST" : "GET";
      const response = await request(publicPort, {
        method,
        path,
        headers: [["Host", "sneaky.test"]],
        body: method === "POST" ? "" : undefined,
      });
      assert.equal(response.status, 502, `${path}: ${response.body}`);
      assert.equal(JSON.parse(response.body).error.code, "upstream_unreachable");
      assert.ok(!response.body.includes("lanes"), "nothing of the protected lane came back");
    }
    assert.equal(socks.connects.length, 3, "the instance was asked, and did connect");
    const after = await gateway.ledger();
    // The second ledger read is the only local_health request since the first one.
    assert.equal(after.lanes.local_health.admitted, before.lanes.local_health.admitted + 1);
    assert.match(
      gateway.stderr,
      /reached sneaky\.test:\d+ from 127\.0\.0\.1: it is on this machine/,
    );
    const health = await request(localPort, { path: "/healthz" });
    assert.equal(JSON.parse(health.body).status, "ok", "the edge did not drain");
  } finally {
    await gateway.dispose();
    await socks.stop();
  }
});

Deno.test("proof 12: a hub refuses a tenant set aimed at its own listeners", async () => {
  const hub = await startTestHub();
  try {
    const { tenant, n } = inwardTenant([hub.apiPort, hub.healthPort]);
    await hub.write("inward.test.yaml", stringify(tenant));
    const outcome = await hub.hub.reload();
    assert.equal(outcome.outcome, "rejected");
    const problems = outcome.outcome === "rejected" ? outcome.rejection.problems : [];
    const refused = problems.filter((p) => /reaches this gateway's own listener/.test(p.message));
    assert.equal(refused.length, n, JSON.stringify(problems.slice(0, 3)));
    assert.equal(hub.hub.store.current.number, 1, "the hub keeps serving its last good set");
  } finally {
    await hub.dispose();
  }
});
