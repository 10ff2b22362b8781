/**
 * The `https_tunnel` transport end to end: an edge whose SOCKS instances are a hub's pool ports,
 * each connection one WebSocket to the hub's mutual-TLS endpoint whose first message names the
 * port (`{"op":"dial","port":N}`). A public request reaches the upstream through the tunnel and a
 * pool double; the edge's `--allow-net` holds its listeners and the hub's address, no pool port;
 * the hub refuses no or another CA's certificate, a node not in `api.nodes`, a dial op for a port
 * not in the pool, a first message that is not JSON or is binary, and a non-upgrade request to
 * `/v1/tunnel`; a pool double that dies opens that port's breaker while requests keep succeeding;
 * the config stream is served on the same endpoint. The WebSocket codec is tested in
 * `ws_frame_test.ts`.
 *
 * @module
 */
import assert from "node:assert/strict";
import https from "node:https";
import { formatFlags, requiredGrants } from "../src/boot/flags.ts";
import { loadConfig } from "../src/config/load.ts";
import { ConfigError, formatPath } from "../src/config/problems.ts";
import { parseYaml } from "../src/config/yaml_file.ts";
import { resolveHubConfig } from "../src/hub/config.ts";
import { hubGrants } from "../src/hub/grants.ts";
import { stringify } from "yaml";
import { Opcode } from "../src/egress/ws_frame.ts";
import { TestPki } from "./fixtures/certs.ts";
import { json } from "./fixtures/http_client.ts";
import { balancedLedger } from "./fixtures/in_process.ts";
import { type Echo, egressWhen, withProxyEdge } from "./fixtures/proxy_edge.ts";
import { type SocksHub, startSocksHub } from "./fixtures/socks_hub.ts";
import { clientFrame, dialThenGreet, tunnelClient, upgradeHead } from "./fixtures/tunnel_client.ts";

/** Runs `body` with a hub (tunnel + pool of doubles) and always disposes of it. */
async function withTunnelHub(
  setup: Parameters<typeof startSocksHub>[0],
  body: (hub: SocksHub) => Promise<void>,
): Promise<void> {
  const hub = await startSocksHub(setup);
  try {
    await body(hub);
  } finally {
    await hub.dispose();
  }
}

/** An edge setup whose egress is the tunnel to every pool port. */
function tunnelEdge(hub: SocksHub, extra: Record<string, unknown> = {}) {
  return {
    socks: [],
    egress: () => ({ transport: hub.transport(undefined, "https_tunnel"), ...extra }),
  };
}

Deno.test("https_tunnel: a public request reaches the upstream through the hub's tunnel and pool", async () => {
  await withTunnelHub({}, async (hub) => {
    await withProxyEdge(tunnelEdge(hub), async (p) => {
      const response = await p.send({ path: "/api/echo?via=tunnel" });
      assert.equal(response.status, 200);
      assert.equal(json<Echo>(response).url, "/echo?via=tunnel");
      const connects = hub.socks.flatMap((s) => s.connects);
      assert.equal(connects.length, 1, "one CONNECT, at one pool double");
      assert.deepEqual([connects[0].host, connects[0].port], ["127.0.0.1", p.upstream.port]);
      assert.match(connects[0].username ?? "", /^t-[0-9a-f]{16}$/);
      const tunnel = hub.t.hub.tunnel!.snapshot();
      assert.equal(tunnel.relayed, 1);
      assert.equal(hub.t.hub.relay!.snapshot().relayed, 0, "nothing went through the relay");
      const egress = await p.egress();
      assert.deepEqual(
        egress.instances.map((i) => i.address),
        hub.socks.map((s) => `127.0.0.1:${hub.tunnelPort}/${s.port}`),
      );
      await balancedLedger(p.t);
    });
  });
});

Deno.test("https_tunnel: the edge's --allow-net holds its listeners and the hub's address, no pool port", async () => {
  await withTunnelHub({}, async (hub) => {
    await withProxyEdge(tunnelEdge(hub), async (p) => {
      const config = await loadConfig(p.t.dir.config);
      const flags = formatFlags(requiredGrants(config));
      const net = flags.split(" ")[0];
      assert.equal(
        net,
        `--allow-net=127.0.0.1:${p.t.ports.public},127.0.0.1:${p.t.ports.local_health},` +
          `127.0.0.1:${hub.tunnelPort}`,
      );
      for (const fixture of hub.socks) assert.ok(!net.includes(`:${fixture.port}`));
      for (const file of [hub.edge.certFile, hub.edge.keyFile, hub.caFile]) {
        assert.ok(flags.includes(file), `${file} is granted read`);
      }
    });
  });
});

Deno.test("https_tunnel: the hub refuses no certificate, another CA's, a node not in api.nodes, a bad dial op, binary first, and a plain request", async () => {
  await withTunnelHub({ nodes: ["edge-1"] }, async (hub) => {
    const ca = hub.pki.ca.certPem;
    const port = hub.socks[0].port;
    const edge = { ca, cert: hub.edge.certPem, key: hub.edge.keyPem };
    const other = await TestPki.create();
    try {
      const foreign = await other.issue("edge-1");
      const stranger = await hub.pki.issue("edge-2");
      const tunnel = (options: Parameters<typeof tunnelClient>[1]) =>
        tunnelClient(hub.tunnelPort, options);
      const answers = {
        accepted: await tunnel({ ...edge, frames: dialThenGreet(port) }),
        noCertificate: await tunnel({ ca, frames: dialThenGreet(port) }),
        otherCa: await tunnel({
          ca,
          cert: foreign.certPem,
          key: foreign.keyPem,
          frames: dialThenGreet(port),
        }),
        notInNodes: await tunnel({
          ca,
          cert: stranger.certPem,
          key: stranger.keyPem,
          frames: dialThenGreet(port),
        }),
        portNotInPool: await tunnel({ ...edge, frames: dialThenGreet(1) }),
        notJson: await tunnel({ ...edge, frames: [clientFrame(Opcode.text, "dial 9050")] }),
        otherOp: await tunnel({
          ...edge,
          frames: [clientFrame(Opcode.text, JSON.stringify({ op: "bind", port }))],
        }),
        binaryFirst: await tunnel({ ...edge, frames: dialThenGreet(port).slice(1) }),
        plainRequest: await tunnel({
          ...edge,
          head: "GET /v1/tunnel HTTP/1.1\r\nHost: hub.test\r\n\r\n",
        }),
        badVersion: await tunnel({
          ...edge,
          head: upgradeHead().replace("Version: 13", "Version: 8"),
          frames: dialThenGreet(port),
        }),
        otherPath: await tunnel({ ...edge, head: upgradeHead("/v1/other") }),
      };
      // Only the accepted client reached a SOCKS server: it chose "no auth" (0x05 0x00).
      assert.deepEqual(answers.accepted, {
        handshake: true,
        status: 101,
        closeCode: undefined,
        data: [0x05, 0x00],
      });
      for (const [name, answer] of Object.entries(answers)) {
        if (name !== "accepted") assert.deepEqual(answer.data, [], `${name} got no SOCKS reply`);
      }
      assert.equal(answers.noCertificate.status, undefined, "no HTTP answer without a certificate");
      assert.equal(answers.otherCa.status, undefined);
      assert.equal(answers.notInNodes.status, 403);
      for (const name of ["portNotInPool", "notJson", "otherOp", "binaryFirst"] as const) {
        assert.equal(answers[name].status, 101, name);
        assert.equal(answers[name].closeCode, 1008, `${name} closed with 1008`);
      }
      assert.equal(answers.plainRequest.status, 426);
      assert.equal(answers.badVersion.status, 426);
      assert.equal(answers.otherPath.status, 404);
      assert.equal(hub.socks[0].accepted, 1, "only the accepted client reached the pool");
      assert.equal(hub.socks[1].accepted, 0);
      assert.deepEqual(hub.t.hub.tunnel!.snapshot().refused, {
        node: 1,
        request: 2,
        dial: 4,
        protocol: 0,
        upstream: 0,
      });
    } finally {
      await other.dispose();
    }
  });
});

Deno.test("https_tunnel: a pool double that dies opens that port's breaker while requests keep succeeding", async () => {
  await withTunnelHub({}, async (hub) => {
    const setup = tunnelEdge(hub, {
      probe_interval_ms: 60_000,
      breaker: { window: 10, min_samples: 10 },
    });
    await withProxyEdge(setup, async (p) => {
      const statuses: number[] = [];
      let running = true;
      const clients = Array.from({ length: 4 }, async (_, worker) => {
        for (let i = 0; running; i++) {
          statuses.push((await p.send({ path: `/api/echo?w=${worker}&i=${i}` })).status);
        }
      });
      try {
        await egressWhen(p, (e) => e.instances.every((i) => i.requests >= 3), 5000);
        hub.socks[0].kill();
        const open = await egressWhen(p, (e) => e.instances[0].state === "open", 5000);
        assert.equal(open.instances[1].state, "healthy");
        const after = open.instances[1].requests;
        await egressWhen(p, (e) => e.instances[1].requests >= after + 10, 5000);
      } finally {
        running = false;
        await Promise.all(clients);
      }
      const failed = statuses.filter((status) => status !== 200);
      assert.deepEqual(failed, [], `${failed.length} of ${statuses.length} requests failed`);
      assert.ok(hub.t.hub.tunnel!.snapshot().refused.upstream > 0, "the dead port was refused");
      await balancedLedger(p.t);
    });
  });
});

Deno.test("https_tunnel: the config stream is served on the same endpoint, by client certificate", async () => {
  await withTunnelHub({ nodes: ["edge-1"] }, async (hub) => {
    const edge = { ca: hub.pki.ca.certPem, cert: hub.edge.certPem, key: hub.edge.keyPem };
    const get = (path: string) =>
      new Promise<{ status: number; body: string }>((resolve, reject) => {
        const request = https.get(
          { host: "127.0.0.1", port: hub.tunnelPort, path, servername: "hub.test", ...edge },
          (response) => {
            let body = "";
            response.on("data", (chunk) => body += chunk);
            response.on("end", () => resolve({ status: response.statusCode ?? 0, body }));
          },
        );
        request.on("error", reject);
      });
    const own = await get("/v1/config/stream?node_id=edge-1&wait=0");
    assert.equal(own.status, 200, own.body);
    const answer = JSON.parse(own.body);
    assert.equal(answer.generation, hub.t.hub.store.current.number);
    assert.equal(hub.t.hub.nodes.get("edge-1")?.polls, 1, "the poll was recorded as edge-1's");
    const other = await get("/v1/config/stream?node_id=edge-2&wait=0");
    assert.equal(other.status, 403, "edge-1's certificate does not speak for edge-2");
    assert.equal(JSON.parse(other.body).error.code, "wrong_node");
  });
});

/** A hub config with the tunnel on `listen` and `pool`, resolved (or its problems). */
function hubWith(pool: unknown, listen = { hostname: "127.0.0.1", port: 9451 }) {
  const config = {
    role: "hub",
    node_id: "hub-1",
    runtime_dir: "runtime",
    api: { listen: [{ hostname: "127.0.0.1", port: 9443 }], tokens_dir: "tokens" },
    transport: {
      https_tunnel: {
        listen,
        cert_file: "tls/hub.crt",
        key_file: "tls/hub.key",
        client_ca_file: "tls/ca.crt",
      },
    },
    ...(pool === undefined ? {} : { pool }),
  };
  const parsed = parseYaml("/etc/portcullis/hub.yaml", stringify(config));
  if (Array.isArray(parsed)) throw new Error("unparsable");
  try {
    return resolveHubConfig(parsed);
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error;
    return error.problems.map((p) => `${formatPath(p.path)}: ${p.message}`);
  }
}

Deno.test("https_tunnel: the hub grants its endpoint, its TLS files and each pool port, and refuses no pool or an overlap", () => {
  const config = hubWith({ socks: [{ hostname: "127.0.0.1", port: 9050 }] });
  assert.ok(!Array.isArray(config), String(config));
  assert.equal(
    formatFlags(hubGrants(config)),
    "--allow-net=127.0.0.1:9443,127.0.0.1:9451,127.0.0.1:9050 " +
      "--allow-read=/etc/portcullis/hub.yaml,/etc/portcullis/runtime,/etc/portcullis/tokens," +
      "/etc/portcullis/tls/hub.crt,/etc/portcullis/tls/hub.key,/etc/portcullis/tls/ca.crt," +
      "/etc/hosts --allow-sys=hostname,networkInterfaces --ignore-env=LOG_STREAM,LOG_TOKENS",
  );
  assert.deepEqual(hubWith(undefined), [
    "transport.https_tunnel: The tunnel needs a pool to relay to: set pool.socks or pool.torpool",
  ]);
  assert.deepEqual(
    hubWith({ socks: [{ hostname: "127.0.0.1", port: 9050 }] }, {
      hostname: "0.0.0.0",
      port: 9443,
    }),
    [
      "transport.https_tunnel.listen: Overlaps api.listen[0] (127.0.0.1:9443): each listener " +
      "must be its own socket",
    ],
  );
});
