/**
 * Proof 13 — remote mode as the onion-gateway design draws it: real `main.ts hub` and remote-mode
 * `main.ts serve` processes, each under the flags its `flags` command prints. The hub supervises an
 * embedded Tor pool (Tor doubles speaking the control protocol and SOCKS5) and carries SOCKS5 to
 * it over a transport — run once per transport: `socks5_tls` (SOCKS5 inside mutual TLS, the port
 * named by ALPN) and `https_tunnel` (a WebSocket per connection, the port named by its first
 * message, the config stream served on the same endpoint); the edge follows the hub's config
 * stream and reaches every upstream through the hub.
 *
 * - the edge's `--allow-net` is its listeners and the hub's ports, nothing else: the api and the
 *   relay with `socks5_tls`, the one tunnel endpoint with `https_tunnel`;
 * - a public request reaches the upstream through relay and pool;
 * - under the edge's own flags, the upstream and the pool's ports are `NotCapable`: the edge cannot
 *   reach a destination, or the pool, except through the hub;
 * - an instance killed under load is respawned on its port while every GET succeeds.
 *
 * @module
 */
import assert from "node:assert/strict";
import { stringify } from "yaml";
import { boundedTest } from "../tests/fixtures/bounded_test.ts";
import { TestPki } from "../tests/fixtures/certs.ts";
import { freePorts, type Gateway, TEST_PRIVATE } from "../tests/fixtures/gateway.ts";
import { disposeAll, getFrom, HubProcess, startRemoteEdge } from "../tests/fixtures/hub.ts";
import { freeRanges, makePoolDir, waitFor } from "../tests/fixtures/torpool_harness.ts";
import { unixRequest } from "../tests/fixtures/unix_request.ts";
import { UpstreamFixture } from "../tests/fixtures/upstream.ts";

const LIMIT_MS = 60_000;

/** The JSON body of a raw HTTP/1.1 response text. */
function bodyOf(raw: string): unknown {
  return JSON.parse(raw.slice(raw.indexOf("\r\n\r\n") + 4));
}

interface InstanceStats {
  readonly index: number;
  readonly socksPort: number;
  readonly state: string;
  readonly pid: number | null;
  readonly life: number;
}

/** The embedded pool's `/stats` instances, read over its Unix socket. */
async function instances(socket: string): Promise<InstanceStats[]> {
  const stats = bodyOf(await unixRequest(socket, "/stats")) as { each: InstanceStats[] };
  return stats.each;
}

/** What `deno run` under `flags` says when it dials `port` on loopback. */
async function dialUnder(flags: readonly string[], port: number): Promise<string> {
  const script = await Deno.makeTempFile({ suffix: ".ts" });
  await Deno.writeTextFile(
    script,
    `try { (await Deno.connect({ hostname: "127.0.0.1", port: ${port} })).close(); ` +
      `console.log("connected"); } catch (error) { console.log(error.name); }\n`,
  );
  try {
    const net = flags.filter((flag) => flag.startsWith("--allow-net"));
    const out = await new Deno.Command(Deno.execPath(), {
      args: ["run", "--no-prompt", ...net, script],
      stdout: "piped",
      stderr: "piped",
    }).output();
    return new TextDecoder().decode(out.stdout).trim();
  } finally {
    await Deno.remove(script);
  }
}

/** One run of the proof: the transport, and where the edge follows the config stream. */
interface TransportCase {
  readonly kind: "socks5_tls" | "https_tunnel";
  /** True: the edge follows the config stream on the transport's endpoint (no api port). */
  readonly streamOnEndpoint: boolean;
}

/**
 * The proof's scenario over one transport: the hub's `transport.<kind>` listener on a free port,
 * the edge's `egress.transport` of that kind to it.
 */
async function remoteModeScenario(transport: TransportCase): Promise<void> {
  const { kind, streamOnEndpoint } = transport;
  const pki = await TestPki.create();
  const upstream = await UpstreamFixture.start();
  const poolDir = await makePoolDir();
  const [endpointPort] = freePorts(1);
  const ranges = freeRanges(2);
  const poolPorts = [ranges.socks, ranges.socks + 1];
  let socket = "";
  let hub: HubProcess | undefined;
  const edges: Gateway[] = [];
  try {
    const shop = {
      host: "shop.test",
      routes: [{
        name: "all",
        match: { prefix: "/" },
        proxy: { backends: [{ url: `http://127.0.0.1:${upstream.port}` }] },
      }],
    };
    hub = await HubProcess.start({
      pki,
      runtime: { "shop.test.yaml": stringify(shop) },
      async edit(config, dir) {
        socket = `${dir}/torpool/run/pool.sock`;
        const endpoint = await pki.issue("hub-endpoint", { altNames: ["127.0.0.1"] });
        await Deno.writeTextFile(
          `${dir}/pool.yaml`,
          stringify({
            role: "torpool",
            tor_binary: poolDir.tor,
            data_dir: "torpool/data",
            api_socket: "torpool/run/pool.sock",
            socks_base_port: ranges.socks,
            control_base_port: ranges.control,
            min_instances: 2,
            max_instances: 2,
            probe_interval_ms: 300,
            dead_refusal_ms: 1000,
          }),
        );
        config.transport = {
          [kind]: {
            listen: { hostname: "127.0.0.1", port: endpointPort },
            cert_file: endpoint.certFile,
            key_file: endpoint.keyFile,
            client_ca_file: "client-ca.pem",
          },
        };
        config.pool = { torpool: "pool.yaml" };
      },
    });
    // The hub runs its pool's Tor binary and nothing else.
    const run = hub.flags.filter((flag) => flag.startsWith("--allow-run"));
    assert.deepEqual(run, [`--allow-run=${poolDir.tor}`]);
    await waitFor("both instances ready", async () => {
      const each = await instances(socket);
      return each.length === 2 && each.every((i) => i.state === "ready");
    }, 20_000);

    const edge = await startRemoteEdge(hub, "edge-1", {
      pki,
      hubUrl: streamOnEndpoint ? `https://127.0.0.1:${endpointPort}` : undefined,
      async egress(dir) {
        const cert = await pki.issue("edge-1", { file: "edge-1-transport" });
        return {
          transport: {
            kind,
            hub: `127.0.0.1:${endpointPort}`,
            ports: poolPorts,
            cert_file: cert.certFile,
            key_file: cert.keyFile,
            ca_file: `${dir}/hub-ca.pem`,
          },
          allow_private: [...TEST_PRIVATE],
        };
      },
    });
    edges.push(edge);

    // Its listeners and the hub's ports (api and endpoint, or the endpoint alone): no upstream,
    // no pool port.
    const net = edge.flags.find((flag) => flag.startsWith("--allow-net="))!;
    const granted = net.slice("--allow-net=".length).split(",").sort();
    const hubPorts = streamOnEndpoint ? [endpointPort] : [hub.apiPort, endpointPort];
    const expected = [edge.ports.public, edge.ports.local_health, ...hubPorts]
      .map((port) => `127.0.0.1:${port}`).sort();
    assert.deepEqual(granted, expected);

    const first = await waitFor("the tenant served through the hub", async () => {
      const response = await getFrom(edge, "shop.test", "/echo?first=1");
      return response.status === 200 ? response : undefined;
    }, 15_000);
    assert.ok(first.body.includes("/echo?first=1"), first.body);
    assert.ok(
      upstream.seen.some((seen) => seen.url === "/echo?first=1"),
      "the upstream saw it",
    );

    // Under the edge's own net grant nothing but the hub is reachable.
    assert.equal(await dialUnder(edge.flags, upstream.port), "NotCapable");
    assert.equal(await dialUnder(edge.flags, ranges.socks), "NotCapable");
    assert.equal(await dialUnder(edge.flags, endpointPort), "connected");

    // Kill instance 0 under load: it comes back on the same port, and no GET fails.
    const statuses: number[] = [];
    let running = true;
    const load = Array.from({ length: 4 }, async (_, worker) => {
      for (let i = 0; running; i++) {
        statuses.push((await getFrom(edge, "shop.test", `/echo?w=${worker}&i=${i}`)).status);
      }
    });
    try {
      await waitFor("traffic flowing", () => statuses.length >= 20, 15_000);
      const victim = (await instances(socket)).find((i) => i.index === 0)!;
      assert.ok(victim.pid !== null);
      Deno.kill(victim.pid!, "SIGKILL");
      const back = await waitFor("instance 0 respawned and ready", async () => {
        const again = (await instances(socket)).find((i) => i.index === 0);
        return again && again.pid !== victim.pid && again.state === "ready" ? again : undefined;
      }, 20_000);
      assert.equal(back.socksPort, victim.socksPort, "respawned on the same port");
      assert.ok(back.life > victim.life);
      const served = statuses.length;
      await waitFor("traffic after the respawn", () => statuses.length >= served + 20, 15_000);
    } finally {
      running = false;
      await Promise.all(load);
    }
    const failed = statuses.filter((status) => status !== 200);
    assert.deepEqual(failed, [], `${failed.length} of ${statuses.length} GETs failed`);
    const live = bodyOf(await unixRequest(socket, "/backends")) as {
      backends: { port: number }[];
    };
    assert.deepEqual(live.backends.map((b) => b.port).sort(), poolPorts);
  } finally {
    await disposeAll(...edges, hub);
    await upstream.stop();
    await pki.dispose();
    await Deno.remove(poolDir.dir, { recursive: true }).catch(() => {});
  }
}

boundedTest(
  "proof 13: an edge under its own flags reaches upstreams only through the hub's relay and Tor pool, which respawns a killed instance on its port under load",
  () => remoteModeScenario({ kind: "socks5_tls", streamOnEndpoint: false }),
  LIMIT_MS,
);

boundedTest(
  "proof 13: over https_tunnel, an edge whose only hub address is the tunnel endpoint follows the config stream and reaches upstreams through it while a killed instance is respawned under load",
  () => remoteModeScenario({ kind: "https_tunnel", streamOnEndpoint: true }),
  LIMIT_MS,
);
