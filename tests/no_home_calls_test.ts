/**
 * No home calls: an edge (local, with a SOCKS pool and an active health check), a remote edge
 * following its hub, a door and a Tor pool, each run under the flags `main.ts flags` derives and
 * exercised (requests, health checks, hub polls, pool probes), hand `connect()`, `sendto()` and
 * `sendmsg()` no address but the ones their config names: the hub, the SOCKS pool, the backends,
 * the pool's Tor ports and API socket, and the listeners the process owns. Watched from outside by
 * strace (tests/fixtures/traced_process.ts), so what the permission model does not gate — the
 * runtime's own exporter, a child's connections — is seen too: the last test shows the observer
 * catching Deno's OTLP exporter, which sends outside `--allow-net` to an address no config names.
 *
 * Names: every config here names hosts by IP literal, so the resolver must reach no nameserver (no
 * DNS, no nscd socket); a config naming a host by name would add /etc/resolv.conf's nameservers.
 *
 * The runtime's own update check: `deno run` (not a compiled binary, which has none) looks up
 * `dl.deno.land` at start whenever its check cache is stale — measured here, at every start: the
 * lookup never succeeds, so the cache never freshens. That is a home call of the runtime, not of
 * the gateway, and `--allow-net` does not gate it; `DENO_NO_UPDATE_CHECK=1` turns it off. The
 * processes here run with it, as an operator running `deno run` must (the deploy guide's compiled
 * binaries need nothing).
 *
 * @module
 */
import assert from "node:assert/strict";
import { stringify } from "yaml";
import { COVER, SAYS, startDoorHub } from "./fixtures/door.ts";
import {
  derivedFlags,
  freePorts,
  type LanePorts,
  proofConfig,
  writeConfig,
} from "./fixtures/gateway.ts";
import { request } from "./fixtures/http_client.ts";
import { HubProcess, tenantText, writeRemoteEdge } from "./fixtures/hub.ts";
import { OtlpCollector } from "./fixtures/otlp_collector.ts";
import { poolGet, writePoolYaml } from "./fixtures/pool_process.ts";
import { optionalPeer, peersRequired } from "./fixtures/require.ts";
import { eventually } from "./fixtures/served_process.ts";
import { SocksFixture } from "./fixtures/socks5.ts";
import { freeRanges, makePoolDir } from "./fixtures/torpool_harness.ts";
import { type Reach, straceRefusal, TracedProcess, unnamed } from "./fixtures/traced_process.ts";
import { UpstreamFixture } from "./fixtures/upstream.ts";

const MAIN = new URL("../main.ts", import.meta.url).pathname;
const HOST = "shop.test";
const STRACE = optionalPeer("strace");
/** Deno's own update check off (see the module doc). */
const NO_UPDATE_CHECK = { DENO_NO_UPDATE_CHECK: "1" };
const REFUSAL = straceRefusal(STRACE);
if (REFUSAL && !peersRequired()) console.warn(`no_home_calls_test: skipped: ${REFUSAL}`);

/** A test that needs a working strace: ignored without one, failing under PORTCULLIS_REQUIRE_PEERS. */
function tracedTest(name: string, fn: (strace: string) => Promise<void>): void {
  Deno.test({
    name,
    ignore: REFUSAL !== undefined && !peersRequired(),
    fn() {
      if (REFUSAL) throw new Error(REFUSAL);
      return fn(STRACE!);
    },
  });
}

/** `main.ts <verb> <config>` under the config's derived flags, traced. */
async function traced(
  strace: string,
  verb: string,
  config: string,
  env: Record<string, string> = {},
): Promise<TracedProcess> {
  const flags = await derivedFlags(config);
  return await TracedProcess.start(strace, Deno.execPath(), [
    "run",
    "--no-prompt",
    ...flags,
    MAIN,
    verb,
    config,
  ], { NO_COLOR: "1", ...NO_UPDATE_CHECK, ...env });
}

/** Stops the process and asserts it reached nothing outside `allowed` (and did reach `expected`). */
async function assertOnlyNamed(
  process: TracedProcess,
  allowed: readonly string[],
  expected: readonly string[],
): Promise<Reach[]> {
  await process.stop();
  const reaches = await process.reaches();
  const stray = unnamed(reaches, new Set(allowed));
  assert.deepEqual(
    stray.map((r) => `${r.call} ${r.target}`),
    [],
    `reached what the config does not name (named: ${allowed.join(", ")}):\n` +
      stray.map((r) => r.line).join("\n"),
  );
  const seen = new Set(reaches.map((r) => r.target));
  for (const target of expected) assert.ok(seen.has(target), `the observer never saw ${target}`);
  return reaches;
}

function lanePorts(publicPort: number, health: number): LanePorts {
  return { public: publicPort, local_health: health, provider_health: 0 };
}

const own = (ports: LanePorts) =>
  Object.values(ports).filter((port) => port > 0).map((port) => `127.0.0.1:${port}`);

tracedTest(
  "no home calls: a local edge reaches its SOCKS pool and its own listeners only",
  async (strace) => {
    const upstream = await UpstreamFixture.start();
    const socks = await SocksFixture.start();
    const ports = lanePorts(...freePorts(2) as [number, number]);
    const backend = `127.0.0.1:${upstream.port}`;
    const dir = await writeConfig(
      proofConfig(ports, { egress: { socks: [{ hostname: "127.0.0.1", port: socks.port }] } }),
      [{
        host: HOST,
        routes: [{
          name: "api",
          match: { prefix: "/api/" },
          proxy: {
            backends: [{ url: `http://${backend}`, health: { path: "/up", interval_ms: 500 } }],
          },
        }],
      }],
    );
    const edge = await traced(strace, "serve", dir.config);
    try {
      await edge.served.line(/"msg":"ready/);
      for (let i = 0; i < 3; i++) {
        const response = await request(ports.public, {
          path: `/api/${i}`,
          headers: [["Host", HOST]],
        });
        assert.equal(response.status, 200, response.body);
      }
      assert.ok(
        await eventually(
          () => Promise.resolve(upstream.seen.filter((s) => s.url === "/up").length >= 2),
          10_000,
        ),
        "two health checks",
      );
      for (const path of ["/readyz", "/metrics"]) {
        assert.equal((await request(ports.local_health, { path })).status, 200, path);
      }
      await assertOnlyNamed(
        edge,
        [`127.0.0.1:${socks.port}`, backend, ...own(ports)],
        [`127.0.0.1:${socks.port}`],
      );
    } finally {
      await edge.dispose();
      await Deno.remove(dir.dir, { recursive: true }).catch(() => {});
      await socks.stop();
      await upstream.stop();
    }
  },
);

tracedTest(
  "no home calls: a remote edge reaches its hub and its own listeners only",
  async (strace) => {
    const hub = await HubProcess.start({
      runtime: { [`${HOST}.yaml`]: tenantText(HOST, "from-hub") },
    });
    const written = await writeRemoteEdge(hub, "edge-a");
    const edge = await traced(strace, "serve", written.dir.config);
    try {
      await edge.served.line(/"msg":"ready/);
      assert.ok(
        await eventually(async () => {
          const response = await request(written.ports.public, { headers: [["Host", HOST]] });
          return response.status === 200 && response.body === "from-hub";
        }, 10_000),
        "the hub's tenant is served",
      );
      assert.equal((await request(written.ports.local_health, { path: "/readyz" })).status, 200);
      const hubAddress = `127.0.0.1:${hub.apiPort}`;
      await assertOnlyNamed(edge, [hubAddress, ...own(written.ports)], [hubAddress]);
    } finally {
      await edge.dispose();
      await Deno.remove(written.dir.dir, { recursive: true }).catch(() => {});
      await hub.dispose();
    }
  },
);

tracedTest("no home calls: a door reaches its hub and its own listeners only", async (strace) => {
  const mirror = "live-a.example";
  const hub = await startDoorHub({
    mirrors: [{ host: mirror, region: "DE" }],
    slugs: [{ slug: "garden-0001", strategy: "first", mirrors: [mirror] }],
  });
  hub.client.set(mirror, SAYS.live);
  await hub.service.probeNow();
  const dir = await Deno.makeTempDir({ prefix: "portcullis-door-" });
  const [port, healthPort] = freePorts(2);
  await Deno.writeTextFile(`${dir}/cover.html`, COVER);
  await Deno.writeTextFile(`${dir}/door.token`, hub.token, { mode: 0o600 });
  await Deno.chmod(`${dir}/door.token`, 0o600);
  await Deno.writeTextFile(
    `${dir}/door.yaml`,
    stringify({
      role: "door",
      node_id: "door-1",
      listen: [{ hostname: "127.0.0.1", port }],
      cover_file: "cover.html",
      health: { listen: [{ hostname: "127.0.0.1", port: healthPort }] },
      hub: { url: hub.url, token_file: "door.token", backoff_initial_ms: 20, backoff_max_ms: 200 },
      cache_dir: "cache",
    }),
  );
  const door = await traced(strace, "serve", `${dir}/door.yaml`);
  try {
    await door.served.line(/"msg":"door ready/);
    assert.equal((await request(port, { headers: [["Host", "door.test"]] })).status, 200);
    assert.ok(
      await eventually(async () => {
        const response = await request(port, {
          path: "/garden-0001",
          headers: [["Host", "door.test"]],
        });
        return response.status === 302 && response.headers.location?.includes(mirror) === true;
      }, 10_000),
      "the slug redirects to the mirror",
    );
    assert.equal((await request(healthPort, { path: "/v1/status" })).status, 200);
    const hubAddress = new URL(hub.url).host;
    await assertOnlyNamed(door, [hubAddress, `127.0.0.1:${port}`, `127.0.0.1:${healthPort}`], [
      hubAddress,
    ]);
  } finally {
    await door.dispose();
    await Deno.remove(dir, { recursive: true }).catch(() => {});
    await hub.dispose();
  }
});

tracedTest(
  "no home calls: a Tor pool reaches its instances' ports only (and Tor nothing else)",
  async (strace) => {
    const where = await makePoolDir();
    const { socks, control } = freeRanges(1);
    const config = await writePoolYaml(where.dir, { tor: where.tor, socks, control });
    const pool = await traced(strace, "torpool", config);
    const socket = `${where.dir}/run/pool.sock`;
    try {
      await pool.served.line(/"msg":"torpool ready/);
      assert.ok(
        await eventually(async () => {
          const answer = await poolGet(socket, "/backends");
          return JSON.stringify(answer?.body ?? {}).includes(String(socks));
        }, 10_000),
        "the pool serves its SOCKS port",
      );
      assert.equal((await poolGet(socket, "/health"))?.status, 200);
      await assertOnlyNamed(
        pool,
        [`127.0.0.1:${socks}`, `127.0.0.1:${control}`, socket],
        [`127.0.0.1:${control}`],
      );
    } finally {
      await pool.dispose();
      await Deno.remove(where.dir, { recursive: true }).catch(() => {});
    }
  },
);

tracedTest(
  "no home calls: the observer sees Deno's OTLP exporter, which --allow-net does not gate",
  async (strace) => {
    const collector = OtlpCollector.start();
    const ports = lanePorts(...freePorts(2) as [number, number]);
    const dir = await writeConfig(proofConfig(ports));
    const edge = await traced(strace, "serve", dir.config, {
      OTEL_DENO: "true",
      OTEL_EXPORTER_OTLP_PROTOCOL: "http/json",
      OTEL_EXPORTER_OTLP_ENDPOINT: collector.endpoint,
      OTEL_TRACES_SAMPLER: "parentbased_always_off",
      OTEL_PROPAGATORS: "none",
      OTEL_METRIC_EXPORT_INTERVAL: "200",
      OTEL_BSP_SCHEDULE_DELAY: "100",
    });
    try {
      await edge.served.line(/"msg":"ready/);
      await request(ports.public, { headers: [["Host", "demo.test"]] });
      assert.ok(await eventually(() => Promise.resolve(collector.exports.length > 0), 10_000));
      await edge.stop();
      const stray = unnamed(await edge.reaches(), new Set(own(ports)));
      const exporter = new URL(collector.endpoint).host;
      assert.ok(stray.some((r) => r.target === exporter), JSON.stringify(stray));
    } finally {
      await edge.dispose();
      await Deno.remove(dir.dir, { recursive: true }).catch(() => {});
      await collector.stop();
    }
  },
);
