/**
 * Proxy dataplane, ways out: SOCKS5 with remote name resolution (a `.onion`-style name never
 * resolved by the gateway) and the `direct` allowlist (no SOCKS at all).
 *
 * @module
 */
import assert from "node:assert/strict";
import { json } from "./fixtures/http_client.ts";
import { balancedLedger } from "./fixtures/in_process.ts";
import { type Echo, single, type Site, withProxyEdge } from "./fixtures/proxy_edge.ts";

const onionRoutes = () => [{
  name: "hidden",
  match: { prefix: "/" },
  proxy: { backends: [{ url: "http://shop.onion" }] },
}];

Deno.test("proxy egress: a name backend is resolved by the SOCKS instance, not the gateway", async () => {
  const setup = {
    routes: onionRoutes,
    resolve: (site: Site) => ({
      "shop.onion": { hostname: "127.0.0.1", port: site.upstream.port },
    }),
  };
  await withProxyEdge(setup, async (p) => {
    const response = await p.send({ path: "/echo?via=tor" });
    assert.equal(response.status, 200);
    const echo = json<Echo>(response);
    assert.equal(echo.url, "/echo?via=tor");
    assert.equal(single(echo.headers, "host"), "shop.onion");
    assert.deepEqual(p.socks[0].connects, [{ host: "shop.onion", port: 80, atyp: "domain" }]);
    const egress = await p.egress();
    assert.equal(egress.instances[0].requests, 1);
    assert.equal(egress.instances[0].failures, 0);
  });
});

Deno.test("proxy egress: a name the SOCKS instance cannot resolve is 502 upstream_unreachable", async () => {
  await withProxyEdge({ routes: onionRoutes }, async (p) => {
    const response = await p.send({ path: "/echo" });
    assert.equal(response.status, 502);
    assert.equal(JSON.parse(response.body).error.code, "upstream_unreachable");
    assert.ok(!response.body.includes("onion"), response.body);
    assert.equal(p.upstream.seen.length, 0);
  });
});

Deno.test("proxy egress: a backend in egress.direct bypasses a configured SOCKS pool", async () => {
  const setup = {
    egress: (site: Site) => ({ direct: [`127.0.0.1:${site.upstream.port}`] }),
  };
  await withProxyEdge(setup, async (p) => {
    for (let i = 0; i < 3; i++) {
      const response = await p.send({ path: "/api/echo" });
      assert.equal(response.status, 200);
      assert.equal(single(json<Echo>(response).headers, "host"), `127.0.0.1:${p.upstream.port}`);
    }
    assert.equal(p.upstream.seen.length, 3);
    assert.equal(p.socks[0].accepted, 0);
    assert.deepEqual(p.socks[0].connects, []);
    const egress = await p.egress();
    assert.deepEqual(egress.direct, [`127.0.0.1:${p.upstream.port}`]);
    assert.equal(egress.instances[0].requests, 0);
  });
});

Deno.test("proxy egress: direct egress works with no egress.socks configured at all", async () => {
  const setup = {
    socks: [],
    egress: (site: Site) => ({ direct: [`127.0.0.1:${site.upstream.port}`] }),
  };
  await withProxyEdge(setup, async (p) => {
    const response = await p.send({ path: "/api/echo?d=1" });
    assert.equal(response.status, 200);
    assert.equal(json<Echo>(response).url, "/echo?d=1");
    const egress = await p.egress();
    assert.deepEqual(egress.instances, []);
    assert.deepEqual(egress.direct, [`127.0.0.1:${p.upstream.port}`]);
    await balancedLedger(p.t);
  });
});
