/**
 * Per-tenant stream isolation (`egress.isolate_tenants`): with it on, each tenant's upstream SOCKS
 * connections authenticate with that tenant's own username (a salted hash, never the host), and a
 * kept-alive connection made for one tenant never carries another tenant's request; with it off,
 * no credentials are sent. The SOCKS double records, per connection, the username it was offered
 * and every tenant whose request went through it.
 *
 * @module
 */
import assert from "node:assert/strict";
import { isolatesTenants } from "../src/config/egress_schema.ts";
import { loadConfig } from "../src/config/load.ts";
import { MINIMAL, writeConfigText } from "./fixtures/config_files.ts";
import { request } from "./fixtures/http_client.ts";
import { balancedLedger, bootEdge, type TestEdge } from "./fixtures/in_process.ts";
import { SocksRecorder } from "./fixtures/socks_recorder.ts";
import { UpstreamFixture } from "./fixtures/upstream.ts";
import { withLegacyHeaders } from "./fixtures/named_headers.ts";

const TENANTS = ["a.test", "b.test"];

/** Boots an edge with two tenants proxied to one upstream through one recording SOCKS double. */
async function withTwoTenants(
  isolate: boolean | undefined,
  body: (t: TestEdge, socks: SocksRecorder) => Promise<void>,
): Promise<void> {
  const upstream = await UpstreamFixture.start();
  const socks = new SocksRecorder();
  let t: TestEdge | undefined;
  try {
    const route = {
      name: "api",
      match: { prefix: "/api/" },
      proxy: {
        backends: [{ url: `http://127.0.0.1:${upstream.port}` }],
        rewrite: { strip_prefix: "/api" },
      },
    };
    t = await bootEdge({
      lanes: ["public", "local_health"],
      tenants: TENANTS.map((host) => ({ host, routes: [route] })),
      edit(config) {
        config.egress = {
          socks: [{ hostname: "127.0.0.1", port: socks.port }],
          ...(isolate === undefined ? {} : { isolate_tenants: isolate }),
          // Each request is its own client connection; whether one tenant's connection goes on
          // to the other is the question here, not the settle time between clients.
          reuse_settle_ms: 0,
        };
        withLegacyHeaders(config); // the SOCKS recorder reads the tenant from X-Portcullis-Tenant
      },
    });
    await body(t, socks);
  } finally {
    await t?.dispose();
    await socks.stop();
    await upstream.stop();
  }
}

/** Sends `rounds` GETs per tenant, alternating tenants, one after another; all must be 200. */
async function alternate(t: TestEdge, rounds: number): Promise<void> {
  for (let i = 0; i < rounds; i++) {
    for (const host of TENANTS) {
      const response = await request(t.ports.public, {
        path: `/api/echo?i=${i}`,
        headers: [["Host", host]],
      });
      assert.equal(response.status, 200, `${host} #${i}: ${response.body}`);
    }
  }
}

Deno.test("isolation: each tenant's SOCKS connections carry its own username and only its requests", async () => {
  await withTwoTenants(true, async (t, socks) => {
    await alternate(t, 6);
    // Two at once per tenant as well, so a tenant may need a second connection.
    await Promise.all(
      TENANTS.flatMap((host) =>
        [0, 1].map(async (i) => {
          const response = await request(t.ports.public, {
            path: `/api/echo?together=${i}`,
            headers: [["Host", host]],
          });
          assert.equal(response.status, 200);
        })
      ),
    );
    const connections = socks.connections.filter((c) => c.tenants.length > 0);
    assert.ok(connections.length >= 2, JSON.stringify(socks.connections));
    for (const connection of connections) {
      assert.equal(connection.tenants.length, 1, `shared: ${JSON.stringify(connection)}`);
      assert.match(connection.username ?? "", /^t-[0-9a-f]{16}$/);
      assert.equal(connection.password, connection.username);
    }
    const usernames = TENANTS.map((host) => [
      ...new Set(connections.filter((c) => c.tenants[0] === host).map((c) => c.username)),
    ]);
    assert.equal(usernames[0].length, 1, "one username for a.test");
    assert.equal(usernames[1].length, 1, "one username for b.test");
    assert.notEqual(usernames[0][0], usernames[1][0]);
    for (const connection of socks.connections) {
      assert.ok(!TENANTS.some((host) => connection.username?.includes(host)), "no host sent");
    }
    // Kept alive per tenant: 16 requests did not need 16 connections.
    assert.ok(socks.connections.length < 16, `${socks.connections.length} connections`);
    await balancedLedger(t);
  });
});

Deno.test("isolation: with isolate_tenants false no credentials are sent, and tenants share the pool", async () => {
  await withTwoTenants(false, async (t, socks) => {
    await alternate(t, 6);
    assert.ok(socks.connections.length >= 1);
    for (const connection of socks.connections) {
      assert.equal(connection.username, undefined, JSON.stringify(connection));
    }
    // One agent per instance: a kept-alive connection went on to the other tenant.
    assert.ok(
      socks.connections.some((c) => c.tenants.length === 2),
      JSON.stringify(socks.connections),
    );
    await balancedLedger(t);
  });
});

Deno.test("isolation: isolate_tenants is off for local socks unless set, and on with a transport", async () => {
  const socks = "  socks: [{ hostname: 127.0.0.1, port: 9050 }]\n";
  const local = await loadConfig(await writeConfigText(`${MINIMAL}egress:\n${socks}`));
  assert.equal(isolatesTenants(local.egress), false);
  const set = await loadConfig(
    await writeConfigText(`${MINIMAL}egress:\n${socks}  isolate_tenants: true\n`),
  );
  assert.equal(isolatesTenants(set.egress), true);
  const transport = '  transport: { kind: wireguard, hub: "10.0.0.1", ports: [9050] }\n';
  const off = await loadConfig(
    await writeConfigText(`${MINIMAL}egress:\n${transport}  isolate_tenants: false\n`),
  );
  assert.equal(isolatesTenants(off.egress), false);
});
