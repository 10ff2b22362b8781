/**
 * Issue 34, the product-blind default, for what the gateway sends on its own account: the active
 * health probes' User-Agent (src/egress/health_checks.ts) and the `WWW-Authenticate` challenge of
 * the edge's `local_health` lane (src/server/lane_router.ts) and of a token hub
 * (src/hub/api_auth.ts). Each has no default that names the software — no User-Agent, a `Bearer`
 * challenge without a realm — and each honours the operator's explicit choice
 * (`forwarding.health_user_agent`, `admin.realm`; the hub has no realm), against real processes and a real
 * backend. The defaults at the backend and on the edge's lane are asserted in
 * health_checks_test.ts, local_health_routes_test.ts and adversarial/admin_test.ts.
 *
 * @module
 */
import assert from "node:assert/strict";
import http from "node:http";
import type { AddressInfo, Socket } from "node:net";
import { freePorts, Gateway, proofConfig, writeConfig } from "./fixtures/gateway.ts";
import { request } from "./fixtures/http_client.ts";
import { waitFor } from "./fixtures/in_process.ts";
import { HubProcess } from "./fixtures/hub.ts";
import { values, withProxyEdge } from "./fixtures/proxy_edge.ts";

/** A backend that records the raw headers of every `/probe` request and answers 200. */
async function probedBackend(): Promise<
  { port: number; probes: string[][]; stop: () => Promise<void> }
> {
  const probes: string[][] = [];
  const sockets = new Set<Socket>();
  const server = http.createServer((request, response) => {
    if (request.url === "/probe") probes.push(request.rawHeaders);
    request.resume();
    response.writeHead(200, { "content-length": "2" }).end("ok");
  });
  server.on("connection", (socket: Socket) => {
    sockets.add(socket);
    socket.once("close", () => sockets.delete(socket));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    port: (server.address() as AddressInfo).port,
    probes,
    async stop() {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

Deno.test("health checks send the operator's forwarding.health_user_agent, once, and nothing else naming the gateway", async () => {
  const backend = await probedBackend();
  const url = `http://127.0.0.1:${backend.port}`;
  try {
    await withProxyEdge({
      routes: () => [{
        name: "api",
        match: { prefix: "/api/" },
        proxy: { backends: [{ url, health: { path: "/probe", interval_ms: 500 } }] },
      }],
      edit(config) {
        config.forwarding = { health_user_agent: "uptime-probe/2 (ops)" };
      },
    }, async () => {
      await waitFor(() => backend.probes.length, (n) => n >= 2, 5000);
      for (const raw of backend.probes) {
        assert.deepEqual(values(raw, "user-agent"), ["uptime-probe/2 (ops)"]);
        assert.deepEqual(values(raw, "host"), [`127.0.0.1:${backend.port}`]);
        assert.ok(!/portcullis/i.test(raw.join("\n")), raw.join(", "));
      }
    });
  } finally {
    await backend.stop();
  }
});

Deno.test("local_health: a refused acting request's challenge names admin.realm when set", async () => {
  const [publicPort, localPort] = freePorts(2);
  const ports = { public: publicPort, local_health: localPort, provider_health: 0 };
  // No token: only a Unix-socket client may act, so every TCP request is refused.
  const config = proofConfig(ports, { admin: { realm: "ops" } });
  const gateway = await Gateway.start(await writeConfig(config), ports);
  try {
    for (const headers of [[], [["Authorization", "Bearer wrong-token-0123456789"]]]) {
      const refused = await request(localPort, {
        method: "POST",
        path: "/v1/drain",
        headers: headers as [string, string][],
      });
      assert.equal(refused.status, 401, refused.body);
      assert.equal(refused.headers["www-authenticate"], 'Bearer realm="ops"');
    }
  } finally {
    await gateway.dispose();
  }
});

Deno.test("hub: a caller without a token gets no challenge (the unknown path's 404), and api.realm is no setting", async () => {
  const poll = (hub: HubProcess) =>
    request(hub.apiPort, { path: "/v1/config/stream?node_id=edge-a&have=&wait=0" });
  const plain = await HubProcess.start({ nodes: ["edge-a"] });
  try {
    // A challenge would tell a protected path from an unknown one (hub_outsider_test.ts).
    const refused = await poll(plain);
    assert.equal(refused.status, 404, refused.body);
    assert.equal(refused.headers["www-authenticate"], undefined);
  } finally {
    await plain.dispose();
  }
  // No caller without a credential gets a challenge, so a realm would reach nobody: refused.
  await assert.rejects(
    () =>
      HubProcess.start({
        nodes: ["edge-a"],
        edit(config) {
          (config.api as Record<string, unknown>).realm = "fleet";
        },
      }),
    /realm/,
  );
});
