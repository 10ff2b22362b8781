/**
 * The `socks5_tls` transport end to end: an edge whose SOCKS instances are a hub's pool ports,
 * each dialled in mutual TLS to the hub's relay, the port named by a preamble inside the stream
 * (`transport_socks5_tls_wire_test.ts` tests what the wire shows and every bad preamble). A public
 * request reaches the upstream through the relay and a pool double; the edge's `--allow-net`
 * holds its listeners and the hub's address, no pool port; the relay refuses a client without a
 * certificate, with another CA's, of a node not in `api.nodes`, with no preamble or one naming a
 * port not in the pool; a pool double that dies opens that port's breaker on the edge while
 * requests keep succeeding on the other.
 *
 * @module
 */
import assert from "node:assert/strict";
import { stringify } from "yaml";
import { formatFlags, requiredGrants } from "../src/boot/flags.ts";
import { isolatesTenants } from "../src/config/egress_schema.ts";
import { encodePreamble } from "../src/egress/relay_preamble.ts";
import { loadConfig } from "../src/config/load.ts";
import { ConfigError, formatPath } from "../src/config/problems.ts";
import { parseYaml } from "../src/config/yaml_file.ts";
import { loadHubConfig, resolveHubConfig } from "../src/hub/config.ts";
import { hubGrants } from "../src/hub/grants.ts";
import { TestPki } from "./fixtures/certs.ts";
import { MINIMAL, writeConfigText } from "./fixtures/config_files.ts";
import { json } from "./fixtures/http_client.ts";
import { balancedLedger } from "./fixtures/in_process.ts";
import { type Echo, egressWhen, withProxyEdge } from "./fixtures/proxy_edge.ts";
import { relayClient, type SocksHub, startSocksHub } from "./fixtures/socks_hub.ts";

/** Runs `body` with a hub (relay + pool of doubles) and always disposes of it. */
async function withSocksHub(
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

Deno.test("socks5_tls: a public request reaches the upstream through the hub's relay and pool", async () => {
  await withSocksHub({}, async (hub) => {
    const setup = { socks: [], egress: () => ({ transport: hub.transport() }) };
    await withProxyEdge(setup, async (p) => {
      const response = await p.send({ path: "/api/echo?via=hub" });
      assert.equal(response.status, 200);
      assert.equal(json<Echo>(response).url, "/echo?via=hub");
      const connects = hub.socks.flatMap((s) => s.connects);
      assert.equal(connects.length, 1, "one CONNECT, at one pool double");
      assert.deepEqual(
        [connects[0].host, connects[0].port],
        ["127.0.0.1", p.upstream.port],
      );
      // Isolation is on by default with a transport: the CONNECT carried the tenant's username.
      assert.match(connects[0].username ?? "", /^t-[0-9a-f]{16}$/);
      assert.equal(hub.t.hub.relay!.snapshot().relayed, 1);
      const egress = await p.egress();
      assert.deepEqual(
        egress.instances.map((i) => i.address),
        hub.socks.map((s) => `127.0.0.1:${hub.relayPort}/${s.port}`),
      );
      await balancedLedger(p.t);
    });
  });
});

Deno.test("socks5_tls: the edge's --allow-net holds its listeners and the hub's address, no pool port", async () => {
  await withSocksHub({}, async (hub) => {
    const setup = { socks: [], egress: () => ({ transport: hub.transport() }) };
    await withProxyEdge(setup, async (p) => {
      const config = await loadConfig(p.t.dir.config);
      const net = formatFlags(requiredGrants(config)).split(" ")[0];
      assert.equal(
        net,
        `--allow-net=127.0.0.1:${p.t.ports.public},127.0.0.1:${p.t.ports.local_health},` +
          `127.0.0.1:${hub.relayPort}`,
      );
      for (const fixture of hub.socks) assert.ok(!net.includes(`:${fixture.port}`));
    });
  });
});

Deno.test("socks5_tls: the relay refuses no certificate, another CA's, a node not in api.nodes, and a bad preamble", async () => {
  await withSocksHub({ nodes: ["edge-1"] }, async (hub) => {
    const ca = hub.pki.ca.certPem;
    const port = hub.socks[0].port;
    const alpn = ["http/1.1"];
    const preamble = encodePreamble(port);
    const edge = { ca, cert: hub.edge.certPem, key: hub.edge.keyPem, preamble };
    const other = await TestPki.create();
    try {
      const foreign = await other.issue("edge-1");
      const stranger = await hub.pki.issue("edge-2");
      const answers = {
        accepted: await relayClient(hub.relayPort, { ...edge, alpn }),
        noCertificate: await relayClient(hub.relayPort, { ca, alpn, preamble }),
        otherCa: await relayClient(hub.relayPort, {
          ca,
          cert: foreign.certPem,
          key: foreign.keyPem,
          alpn,
          preamble,
        }),
        notInNodes: await relayClient(hub.relayPort, {
          ca,
          cert: stranger.certPem,
          key: stranger.keyPem,
          alpn,
          preamble,
        }),
        portNotInPool: await relayClient(hub.relayPort, {
          ...edge,
          alpn,
          preamble: encodePreamble(1),
        }),
        noPreamble: await relayClient(hub.relayPort, { ...edge, preamble: undefined, alpn }),
        oldAlpn: await relayClient(hub.relayPort, { ...edge, alpn: [`portcullis-socks/${port}`] }),
      };
      // Only the accepted client reached a SOCKS server: it chose "no auth" (0x05 0x00).
      assert.deepEqual(answers.accepted, {
        handshake: true,
        reply: [0x05, 0x00],
        alpn: "http/1.1",
      });
      for (const [name, answer] of Object.entries(answers)) {
        if (name !== "accepted") assert.deepEqual(answer.reply, [], `${name} got no SOCKS reply`);
      }
      assert.equal(hub.socks[0].accepted, 1, "only the accepted client reached the pool");
      assert.equal(hub.socks[1].accepted, 0);
      const refused = hub.t.hub.relay!.snapshot().refused;
      assert.equal(refused.node, 1, "edge-2 finished its handshake and was refused as a node");
      assert.equal(refused.preamble, 2, "no preamble and a port not in the pool were refused");
      assert.equal(answers.oldAlpn.handshake, false, "the old ALPN is never selected");
    } finally {
      await other.dispose();
    }
  });
});

Deno.test("socks5_tls: a pool double that dies opens that port's breaker while requests keep succeeding", async () => {
  await withSocksHub({}, async (hub) => {
    const setup = {
      socks: [],
      egress: () => ({
        transport: hub.transport(),
        probe_interval_ms: 60_000,
        breaker: { window: 10, min_samples: 10 },
      }),
    };
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
      await balancedLedger(p.t);
    });
  });
});

Deno.test("socks5_tls: egress.transport with egress.socks is a config error naming the field", async () => {
  const transport = '  transport: { kind: wireguard, hub: "10.0.0.1", ports: [9050, 9051] }\n';
  const socks = "  socks: [{ hostname: 127.0.0.1, port: 9050 }]\n";
  const file = await writeConfigText(`${MINIMAL}egress:\n${transport}${socks}`);
  const error = await loadConfig(file).then(() => undefined, (e) => e);
  assert.ok(error instanceof ConfigError, String(error));
  assert.equal(error.problems.length, 1);
  assert.deepEqual(error.problems[0].path, ["egress", "socks"]);
  assert.match(error.problems[0].message, /^With egress\.transport \(wireguard\) the SOCKS/);

  // Alone, wireguard's instances are the hub's private address and each pool port, in plain TCP.
  const wireguard = await loadConfig(await writeConfigText(`${MINIMAL}egress:\n${transport}`));
  assert.deepEqual(wireguard.egress.socks, [
    { hostname: "10.0.0.1", port: 9050 },
    { hostname: "10.0.0.1", port: 9051 },
  ]);
  assert.equal(isolatesTenants(wireguard.egress), true);
  const net = formatFlags(requiredGrants(wireguard)).split(" ")[0];
  assert.equal(net, "--allow-net=127.0.0.1:8080,10.0.0.1:9050,10.0.0.1:9051");
});

/** A hub config with the relay on 127.0.0.1:9450 and `pool`, resolved (or its problems). */
function hubWith(pool: unknown) {
  const config = {
    role: "hub",
    node_id: "hub-1",
    runtime_dir: "runtime",
    api: { listen: [{ hostname: "127.0.0.1", port: 9443 }], tokens_dir: "tokens" },
    health: { listen: [{ hostname: "127.0.0.1", port: 9444 }] },
    transport: {
      socks5_tls: {
        listen: { hostname: "127.0.0.1", port: 9450 },
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

Deno.test("socks5_tls: the hub grants its relay listener, its TLS files and each pool port", () => {
  const config = hubWith({
    socks: [{ hostname: "127.0.0.1", port: 9050 }, { hostname: "127.0.0.1", port: 9051 }],
  });
  assert.ok(!Array.isArray(config), String(config));
  assert.equal(
    formatFlags(hubGrants(config)),
    "--allow-net=127.0.0.1:9443,127.0.0.1:9444,127.0.0.1:9450,127.0.0.1:9050,127.0.0.1:9051 " +
      "--allow-read=/etc/portcullis/hub.yaml,/etc/portcullis/runtime,/etc/portcullis/tokens," +
      "/etc/portcullis/tls/hub.crt,/etc/portcullis/tls/hub.key,/etc/portcullis/tls/ca.crt," +
      "/etc/hosts --allow-sys=hostname,networkInterfaces --ignore-env=LOG_STREAM,LOG_TOKENS",
  );
});

Deno.test("socks5_tls: the hub refuses a relay without a pool, a pool on two hosts, a port twice, and its own listener", () => {
  assert.deepEqual(hubWith(undefined), [
    "transport.socks5_tls: The relay needs a pool to relay to: set pool.socks or pool.torpool",
  ]);
  assert.deepEqual(
    hubWith({
      socks: [
        { hostname: "127.0.0.1", port: 9050 },
        { hostname: "127.0.0.2", port: 9051 },
        { hostname: "127.0.0.1", port: 9050 },
        { hostname: "127.0.0.1", port: 9443 },
      ],
    }),
    [
      "pool.socks[1].hostname: Every pool instance must be on 127.0.0.1: an edge names an " +
      "instance by its port alone",
      "pool.socks[2].port: Each pool port may appear once",
      "pool.socks[3]: Is the hub's own api.listen[0] (127.0.0.1:9443)",
    ],
  );
});

/** A hub config with the relay and `pool`, written under `dir`, loaded (or its problems). */
async function loadHubWith(dir: string, pool: unknown): Promise<ReturnType<typeof hubWith>> {
  const config = {
    role: "hub",
    node_id: "hub-1",
    runtime_dir: "runtime",
    api: { listen: [{ hostname: "127.0.0.1", port: 9443 }], tokens_dir: "tokens" },
    transport: {
      socks5_tls: {
        listen: { hostname: "127.0.0.1", port: 9450 },
        cert_file: "hub.crt",
        key_file: "hub.key",
        client_ca_file: "ca.crt",
      },
    },
    pool,
  };
  const parsed = parseYaml(`${dir}/hub.yaml`, stringify(config));
  if (Array.isArray(parsed)) throw new Error("unparsable");
  try {
    return await loadHubConfig(parsed);
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error;
    return error.problems.map((p) => `${formatPath(p.path)}: ${p.message}`);
  }
}

Deno.test("embedded Tor pool: pool.torpool loads its pool.yaml; exactly one kind of pool; the hub runs only its Tor", async () => {
  const dir = await Deno.makeTempDir({ prefix: "portcullis-hubpool-" });
  try {
    await Deno.writeTextFile(
      `${dir}/pool.yaml`,
      stringify({
        role: "torpool",
        tor_binary: "/usr/sbin/tor",
        data_dir: "tor",
        api_socket: "run/pool.sock",
        socks_base_port: 19050,
        control_base_port: 19150,
        min_instances: 1,
        max_instances: 2,
      }),
    );
    await Deno.writeTextFile(`${dir}/not-a-pool.yaml`, stringify({ role: "hub" }));
    const loaded = await loadHubWith(dir, { torpool: "pool.yaml" });
    assert.ok(!Array.isArray(loaded), String(loaded));
    assert.equal(loaded.torpool?.socksBasePort, 19050);
    const flags = formatFlags(hubGrants(loaded));
    assert.ok(flags.includes("--allow-run=/usr/sbin/tor "), flags);
    for (const port of [19050, 19051, 19150, 19151]) assert.ok(flags.includes(`127.0.0.1:${port}`));
    assert.ok(flags.includes(`--allow-write=${dir}/tor,${dir}/run`), flags);

    assert.deepEqual(await loadHubWith(dir, { torpool: "not-a-pool.yaml" }), [
      "pool.torpool: Expected a Tor pool config (a file that says role: torpool)",
    ]);
    const both = await loadHubWith(dir, {
      torpool: "pool.yaml",
      socks: [{ hostname: "127.0.0.1", port: 9050 }],
    });
    assert.ok(Array.isArray(both) && both.some((p) => p.includes("exactly one of pool.socks")));
    const neither = await loadHubWith(dir, {});
    assert.ok(Array.isArray(neither) && neither.some((p) => p.includes("exactly one of")));
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
