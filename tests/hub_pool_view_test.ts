/**
 * Remote mode: the hub's view of its pool reaches the edge. `GET /v1/pool` on the hub's api answers
 * the pool's live ports to an authenticated, allowed node (refusing the rest like the config
 * stream), and a remote-mode edge on a transport reads it every probe interval: a pool port the
 * hub no longer lists has its breaker opened before any request is sent to it, and requests go to
 * the other port.
 *
 * @module
 */
import assert from "node:assert/strict";
import { boundedTest } from "./fixtures/bounded_test.ts";
import { json, request } from "./fixtures/http_client.ts";
import { type TestEdge, waitFor } from "./fixtures/in_process.ts";
import { bootRemoteEdge, getHost } from "./fixtures/remote_edge.ts";
import { startSocksHub } from "./fixtures/socks_hub.ts";
import { UpstreamFixture } from "./fixtures/upstream.ts";
import { stringify } from "yaml";

interface EgressView {
  readonly instances: { address: string; state: string; requests: number }[];
}

async function egressOf(edge: TestEdge): Promise<EgressView> {
  return json<EgressView>(await request(edge.ports.local_health, { path: "/v1/egress" }));
}

boundedTest(
  "hub pool view: /v1/pool answers an authenticated node; an edge opens the breaker of a port the hub stops listing, before any request finds it",
  async () => {
    const live = new Set<number>();
    const upstream = await UpstreamFixture.start();
    const hub = await startSocksHub({
      pool: (ports) => {
        for (const port of ports) live.add(port);
        return { hostname: "127.0.0.1", ports: () => [...live] };
      },
    });
    let edge: TestEdge | undefined;
    try {
      const ports = hub.socks.map((s) => s.port);
      const token = await hub.t.token("edge-a");
      const ask = (headers: [string, string][], node = "edge-a") =>
        request(hub.t.apiPort, { path: `/v1/pool?node_id=${node}`, headers });
      const answered = await ask([["Authorization", `Bearer ${token}`]]);
      assert.equal(answered.status, 200, answered.body);
      assert.deepEqual(JSON.parse(answered.body), { backends: ports.map((port) => ({ port })) });
      assert.equal((await ask([])).status, 404);
      assert.equal((await ask([["Authorization", `Bearer ${token}`]], "edge-b")).status, 404);

      await hub.t.write(
        "shop.test.yaml",
        stringify({
          host: "shop.test",
          routes: [{
            name: "all",
            match: { prefix: "/" },
            proxy: { backends: [{ url: `http://127.0.0.1:${upstream.port}` }] },
          }],
        }),
      );
      const tokenFile = `${hub.t.dir}/tokens/edge-a.token`;
      const cacheDir = await Deno.makeTempDir({ prefix: "portcullis-cache-" });
      edge = await bootRemoteEdge(hub.t.url, tokenFile, cacheDir, {
        transport: hub.transport(ports),
        probe_interval_ms: 200,
        allow_private: ["127.0.0.0/8"],
      });
      const served = edge;
      await waitFor(() => getHost(served, "shop.test", "/x"), ([status]) => status === 200, 10_000);
      const before = await egressOf(served);

      live.delete(ports[0]);
      const open = await waitFor(() => egressOf(served), (e) => e.instances[0].state !== "healthy");
      assert.equal(open.instances[0].requests, before.instances[0].requests, "no request found it");
      for (let i = 0; i < 6; i++) {
        assert.equal((await getHost(served, "shop.test", `/y${i}`))[0], 200);
      }
      const after = await egressOf(served);
      assert.equal(after.instances[0].requests, before.instances[0].requests);
    } finally {
      await edge?.dispose();
      await hub.dispose();
      await upstream.stop();
    }
  },
  30_000,
);
