/**
 * End to end through a real SOCKS5 server: `microsocks` on loopback, the upstream fixture, and the
 * real gateway subprocess started with exactly the flags `main.ts flags` derives. The backend is
 * named `localhost:<port>`, a name the gateway may not reach itself (its `--allow-net` holds the
 * SOCKS instance and its own listeners, never the upstream port), so every byte that arrives proves
 * the SOCKS hop.
 *
 * Without `microsocks` the test is ignored, unless `PORTCULLIS_REQUIRE_PEERS=1`, in which case it
 * fails naming the package (tests/fixtures/require.ts).
 *
 * @module
 */
import assert from "node:assert/strict";
import {
  freePorts,
  Gateway,
  type LanePorts,
  proofConfig,
  writeConfig,
} from "./fixtures/gateway.ts";
import { json, request } from "./fixtures/http_client.ts";
import { waitFor } from "./fixtures/in_process.ts";
import { startMicrosocks } from "./fixtures/microsocks.ts";
import { peerTest } from "./fixtures/require.ts";
import { UpstreamFixture } from "./fixtures/upstream.ts";
import { LEGACY_BACKEND_HEADERS } from "./fixtures/named_headers.ts";

const HOST = "proxied.test";

peerTest(
  "microsocks e2e: proxied requests reach a named upstream only through the SOCKS instance",
  ["microsocks"],
  async ({ microsocks }, t) => {
    const socks = await startMicrosocks(microsocks);
    const upstream = await UpstreamFixture.start();
    let gateway: Gateway | undefined;
    try {
      const [publicPort, healthPort] = freePorts(2);
      const ports: LanePorts = { public: publicPort, local_health: healthPort, provider_health: 0 };
      const config = proofConfig(ports, {
        egress: { socks: [{ hostname: "127.0.0.1", port: socks.port }] },
        // The operator's explicit choice of the backend headers' names (default: none).
        forwarding: { backend_headers: { ...LEGACY_BACKEND_HEADERS } },
      });
      const tenant = {
        host: HOST,
        routes: [{
          name: "via-socks",
          match: { prefix: "/" },
          proxy: { backends: [{ url: `http://localhost:${upstream.port}` }] },
        }],
      };
      gateway = await Gateway.start(await writeConfig(config, [tenant]), ports);
      const live = gateway;

      await t.step("the derived flags reach the SOCKS instance, never the upstream", () => {
        const net = live.flags.find((flag) => flag.startsWith("--allow-net="));
        const hosts = net?.slice("--allow-net=".length).split(",") ?? [];
        assert.deepEqual(hosts, [
          `127.0.0.1:${publicPort}`,
          `127.0.0.1:${healthPort}`,
          `127.0.0.1:${socks.port}`,
        ]);
        assert.equal(hosts.some((host) => host.endsWith(`:${upstream.port}`)), false);
        assert.equal(live.flags.includes("--allow-net"), false);
      });

      await t.step(
        "a GET arrives with the gateway's X-Portcullis-* headers, not spoofed ones",
        async () => {
          const response = await request(live.ports.public, {
            path: "/echo?q=1",
            headers: [
              ["Host", HOST],
              ["X-Portcullis-Tenant", "spoofed"],
              ["X-Portcullis-Route", "spoofed"],
              ["X-Request-Id", "client-id-7"],
              ["X-Forwarded-For", "6.6.6.6"],
            ],
          });
          assert.equal(response.status, 200, response.body);
          const seen = upstream.seen.at(-1)!;
          assert.equal(seen.method, "GET");
          assert.equal(seen.url, "/echo?q=1");
          const headers = upstream.headersOf();
          assert.deepEqual(headers.get("host"), [`localhost:${upstream.port}`]);
          assert.deepEqual(headers.get("x-portcullis-tenant"), [HOST]);
          assert.deepEqual(headers.get("x-portcullis-route"), ["via-socks"]);
          // A valid inbound request id is kept (once); the upstream's own is never passed back.
          assert.deepEqual(headers.get("x-request-id"), ["client-id-7"]);
          assert.deepEqual(headers.get("x-portcullis-request-id"), ["client-id-7"]);
          assert.deepEqual(headers.get("x-forwarded-for"), ["127.0.0.1"]);
          assert.deepEqual(headers.get("x-real-ip"), ["127.0.0.1"]);
          assert.equal(response.headers["x-request-id"], "client-id-7");
          assert.equal(response.headers["x-portcullis-tenant"], undefined);
          assert.equal(json<{ method: string }>(response).method, "GET");
        },
      );

      await t.step("a 1 MiB response streams back intact", async () => {
        const size = 1024 * 1024;
        const response = await request(live.ports.public, {
          path: `/bytes/${size}`,
          headers: [["Host", HOST]],
        });
        assert.equal(response.status, 200);
        assert.equal(response.headers["content-length"], String(size));
        assert.equal(response.body.length, size);
        assert.equal(response.body, "x".repeat(size));
      });

      await t.step("a POST body arrives intact", async () => {
        const body = Array.from({ length: 4096 }, (_, i) => `line ${i} é\n`).join("");
        const response = await request(live.ports.public, {
          method: "POST",
          path: "/echo/post",
          headers: [["Host", HOST], ["Content-Type", "text/plain; charset=utf-8"]],
          body,
        });
        assert.equal(response.status, 200, response.body);
        const seen = upstream.seen.at(-1)!;
        assert.equal(seen.method, "POST");
        assert.equal(seen.url, "/echo/post");
        assert.equal(seen.body, body);
        assert.equal(json<{ body: string }>(response).body, body);
      });

      await t.step("/v1/egress shows the instance closed, with no failures", async () => {
        const reading = await waitFor(
          async () =>
            json<EgressReading>(await request(live.ports.local_health, { path: "/v1/egress" })),
          (r) => r.instances[0]?.requests >= 3,
        );
        assert.equal(reading.instances.length, 1);
        const [instance] = reading.instances;
        assert.equal(instance.address, `127.0.0.1:${socks.port}`);
        assert.equal(instance.state, "healthy");
        assert.equal(instance.requests, 3);
        assert.equal(instance.failures, 0);
        assert.equal(instance.opens, 0);
        assert.deepEqual(reading.direct, []);
        assert.equal(upstream.seen.length, 3);
      });
    } finally {
      await gateway?.dispose();
      await upstream.stop();
      await socks.stop();
    }
  },
);

/** The part of `/v1/egress` this test reads. */
interface EgressReading {
  instances: {
    address: string;
    state: string;
    requests: number;
    failures: number;
    opens: number;
  }[];
  direct: string[];
}
