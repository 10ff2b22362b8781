/**
 * Streams have a maximum lifetime (issue 31, "open streams end with their node"): the hub closes a
 * relay or tunnel stream that has been open `transport.max_stream_seconds`, so nothing a check
 * missed outlives that bound — and the edge must not fail a request for it. Against a real hub and
 * a real remote-mode edge, each under its derived flags, once per transport: requests leave a
 * pooled stream open (the edge and the upstream would keep it a minute); the hub closes it at its
 * lifetime (the upstream sees its connection end); the edge's next request succeeds through a
 * fresh stream.
 */
import assert from "node:assert/strict";
import { stringify } from "yaml";
import { ConfigError } from "../src/config/problems.ts";
import { parseYaml } from "../src/config/yaml_file.ts";
import { resolveHubConfig } from "../src/hub/config.ts";
import { boundedTest } from "./fixtures/bounded_test.ts";
import {
  freePorts,
  Gateway,
  type LanePorts,
  proofConfig,
  TEST_PRIVATE,
} from "./fixtures/gateway.ts";
import { getFrom } from "./fixtures/hub.ts";
import { waitFor } from "./fixtures/in_process.ts";
import {
  KeptUpstream,
  type NodeFiles,
  TransportFleet,
  type TransportKind,
} from "./fixtures/transport_fleet.ts";

const LIFETIME_SECONDS = 2;

/** A tenant proxying everything to `port`. */
function shop(port: number): string {
  return stringify({
    host: "shop.test",
    routes: [{
      name: "all",
      match: { prefix: "/" },
      proxy: { backends: [{ url: `http://127.0.0.1:${port}` }] },
    }],
  });
}

/** A remote-mode edge following the fleet's hub as `node`, its egress over `kind`. */
async function startEdge(
  fleet: TransportFleet,
  node: NodeFiles,
  kind: TransportKind,
): Promise<Gateway> {
  const dir = await Deno.makeTempDir({ prefix: "portcullis-edge-" });
  const [publicPort, localPort] = freePorts(2);
  const ports: LanePorts = { public: publicPort, local_health: localPort, provider_health: 0 };
  const config = proofConfig(ports, {
    node_id: node.nodeId,
    mode: "remote",
    hub: {
      url: fleet.hub.url,
      ca_file: fleet.rootFile,
      cert_file: node.certFile,
      key_file: node.keyFile,
      backoff_initial_ms: 100,
      backoff_max_ms: 1000,
    },
    cache_dir: "cache",
    // Idle pooled streams are kept a minute by the edge: only the hub ends one here.
    egress: {
      transport: fleet.egress(kind, node),
      allow_private: [...TEST_PRIVATE],
      idle_socket_ms: 60_000,
    },
  });
  delete config.tenants_dir;
  await Deno.writeTextFile(`${dir}/config.yaml`, stringify(config));
  try {
    return await Gateway.start({ dir, config: `${dir}/config.yaml` }, ports);
  } catch (error) {
    await Deno.remove(dir, { recursive: true }).catch(() => {});
    throw error;
  }
}

/** The lifetime scenario over one transport. */
async function lifetimeScenario(kind: TransportKind): Promise<void> {
  const upstream = await KeptUpstream.start();
  const fleet = await TransportFleet.start({
    maxStreamSeconds: LIFETIME_SECONDS,
    runtime: { "shop.test.yaml": shop(upstream.port) },
  });
  let edge: Gateway | undefined;
  try {
    const node = await fleet.enrol("edge-1");
    edge = await startEdge(fleet, node, kind);
    const served = edge;
    await waitFor(() => getFrom(served, "shop.test", "/first"), (r) => r.status === 200, 15_000);
    const again = await getFrom(edge, "shop.test", "/first-again");
    assert.equal(again.status, 200);
    const before = upstream.connections; // one pooled stream (per request worker)
    assert.ok(before >= 1 && upstream.open === before, "the streams are held open");

    // The hub ends the stream at its lifetime; the upstream would have kept it for a minute.
    await waitFor(() => upstream.open, (open) => open === 0, LIFETIME_SECONDS * 1000 + 8000);
    const after = await getFrom(edge, "shop.test", "/after-lifetime");
    assert.equal(after.status, 200, after.body);
    assert.equal(after.body, "/after-lifetime\n");
    assert.equal(upstream.connections, before + 1, "the edge dialled a fresh stream");
  } finally {
    await edge?.dispose();
    await fleet.dispose();
    await upstream.stop();
  }
}

for (const kind of ["socks5_tls", "https_tunnel"] as const) {
  boundedTest(
    `transports: ${kind} closes a stream at transport.max_stream_seconds, and the edge's next request succeeds through a fresh one`,
    () => lifetimeScenario(kind),
    90_000,
  );
}

/** A hub config with `transport` as given, resolved (or its ConfigError). */
function resolveWith(transport: Record<string, unknown> | undefined) {
  const config = {
    role: "hub",
    node_id: "hub-1",
    runtime_dir: "runtime",
    api: { listen: [{ hostname: "127.0.0.1", port: 9443 }], tokens_dir: "tokens" },
    ...(transport ? { transport } : {}),
  };
  const parsed = parseYaml("/etc/portcullis/hub.yaml", stringify(config));
  if (Array.isArray(parsed)) throw new Error("unparsable");
  try {
    return resolveHubConfig(parsed);
  } catch (error) {
    if (error instanceof ConfigError) return error;
    throw error;
  }
}

Deno.test("hub config: transport.max_stream_seconds is a whole number of seconds from 1 to a week, an hour by default", () => {
  for (
    const [written, ms] of [[undefined, 3_600_000], [1, 1000], [604_800, 604_800_000]] as const
  ) {
    const config = resolveWith(written === undefined ? undefined : { max_stream_seconds: written });
    assert.ok(!(config instanceof ConfigError), String(config));
    assert.equal(config.maxStreamMs, ms);
  }
  assert.equal((resolveWith({}) as { maxStreamMs: number }).maxStreamMs, 3_600_000);
  for (const value of [0, 1.5, 604_801, -1, "1h"]) {
    const error = resolveWith({ max_stream_seconds: value });
    assert.ok(error instanceof ConfigError, `${JSON.stringify(value)} accepted`);
    const [problem] = error.problems;
    assert.equal(problem.file, "/etc/portcullis/hub.yaml");
    assert.deepEqual(problem.path, ["transport", "max_stream_seconds"]);
    assert.equal(problem.value, value);
  }
});
