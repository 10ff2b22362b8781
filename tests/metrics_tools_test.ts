/**
 * Metrics that operators' tools accept. One real edge (under its derived flags) with every feature
 * that adds series — TLS certificates, a SOCKS instance (microsocks), policies live and in dry run,
 * a fleet store (redis-server), a tenant salt, two public request workers — takes some traffic;
 * then its `/metrics` page must pass `promtool check metrics` without a word, carry the standard
 * `process_*` series and the end-to-end latency histogram from 100 µs, and name no label
 * `instance` or `job` (Prometheus's own). The shipped alert rules must pass `promtool check rules`,
 * and every metric named by an alert or a panel of the Grafana dashboard must be on that page.
 *
 * Without promtool, microsocks or redis-server the test is ignored (with a line saying so), unless
 * `PORTCULLIS_REQUIRE_PEERS=1`, in which case it fails naming the package.
 *
 * @module
 */
import assert from "node:assert/strict";
import { parse } from "yaml";
import { certEntry, type IssuedCertificate, TestPki, TlsClient } from "./fixtures/certs.ts";
import {
  freePorts,
  Gateway,
  type LanePorts,
  proofConfig,
  writeConfig,
} from "./fixtures/gateway.ts";
import { request } from "./fixtures/http_client.ts";
import { bootEdge, waitFor } from "./fixtures/in_process.ts";
import { startMicrosocks } from "./fixtures/microsocks.ts";
import { RedisServer, writeSalt } from "./fixtures/redis.ts";
import { peer, peersRequired, peerTest } from "./fixtures/require.ts";
import { UpstreamFixture } from "./fixtures/upstream.ts";
import { metricNames } from "./fixtures/promql_names.ts";
import { samples, sumOf, valueOf } from "./fixtures/metrics_page.ts";

const ROOT = new URL("../", import.meta.url).pathname;
const DASHBOARD = `${ROOT}deploy/grafana/portcullis.json`;
const ALERTS = `${ROOT}deploy/prometheus/alerts.yaml`;
const HOST = "demo.test";
const SALT = "metrics-tools-test-salt-01234567\n";
const PEERS = ["promtool", "microsocks", "redis-server"] as const;
/** Requests {@link traffic} sends through the SOCKS instance (the WAF in dry run forwards too). */
const PROXIED = 5;
/** The open-file limit the edge runs under. */
const FILE_LIMIT = 2048;

const missing = PEERS.filter((name) => peer(name) === undefined);
if (missing.length > 0 && !peersRequired()) {
  console.error(
    `metrics_tools_test: ${missing.join(", ")} missing; the promtool checks are ignored ` +
      "(apt-get install prometheus microsocks redis-server)",
  );
}

/** What one `promtool` run printed, and how it ended. */
async function promtool(
  binary: string,
  args: readonly string[],
  stdin?: string,
): Promise<{ code: number; output: string }> {
  const child = new Deno.Command(binary, {
    args: [...args],
    stdin: stdin === undefined ? "null" : "piped",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  if (stdin !== undefined) {
    const writer = child.stdin.getWriter();
    await writer.write(new TextEncoder().encode(stdin));
    await writer.close();
  }
  const { code, stdout, stderr } = await child.output();
  const decoder = new TextDecoder();
  return { code, output: decoder.decode(stdout) + decoder.decode(stderr) };
}

/**
 * Every PromQL expression of the dashboard: each target's `expr`, wherever it is nested, and the
 * metric of each template variable's `label_values(metric, label)` as an expression of its own.
 */
function dashboardExprs(dashboard: unknown): string[] {
  const found: string[] = [];
  const walk = (node: unknown) => {
    if (Array.isArray(node)) node.forEach(walk);
    else if (node && typeof node === "object") {
      for (const [key, value] of Object.entries(node)) {
        if (key === "expr" && typeof value === "string") found.push(value);
        else if (key === "definition" && typeof value === "string") {
          const labelValues = /^label_values\(\s*([^,]+),\s*\w+\s*\)$/.exec(value);
          assert.ok(labelValues, `a template variable Grafana cannot read here: ${value}`);
          found.push(labelValues[1]);
        } else walk(value);
      }
    }
  };
  walk(dashboard);
  return found;
}

/** Every alert rule's `expr`. */
function alertExprs(rules: { groups: { rules: { alert?: string; expr: string }[] }[] }): string[] {
  return rules.groups.flatMap((group) => group.rules.map((rule) => rule.expr));
}

/** The edge under test: every feature that adds series, on free ports. */
async function fullEdge(
  socksPort: number,
  upstreamPort: number,
  redisUrl: string,
  cert: IssuedCertificate,
): Promise<Gateway> {
  const [p, l, h] = freePorts(3);
  const ports: LanePorts = { public: p, local_health: l, provider_health: h };
  const config = proofConfig(ports, {
    workers: 2,
    egress: { socks: [{ hostname: "127.0.0.1", port: socksPort }] },
    policy_stores: [redisUrl],
    observe: { salt_file: "salt" },
  });
  const lanes = config.lanes as Record<string, Record<string, unknown>>;
  lanes.public.tls = { certificates: [certEntry(cert, true)] };
  const tenant = {
    host: HOST,
    routes: [
      { name: "home", match: { path: "/" }, respond: { body: "home" } },
      {
        name: "api",
        match: { prefix: "/api/" },
        proxy: { backends: [{ url: `http://localhost:${upstreamPort}` }] },
      },
    ],
    policies: {
      rate_limit: { per_second: 0.001, burst: 12, store: { redis: { url: redisUrl } } },
      waf: { mode: "dry_run" },
    },
  };
  const dir = await writeConfig(config, [tenant]);
  await writeSalt(dir.dir, SALT);
  // A limit the boot probe reaches, so it is exact and exported as process_max_fds.
  return await Gateway.start(dir, ports, undefined, { fileLimit: FILE_LIMIT });
}

/** Sends the traffic: proxied, answered, missed, a dry-run WAF hit, and rate-limited requests. */
async function traffic(port: number, ca: string): Promise<number> {
  const client = await TlsClient.open(port, { servername: HOST, ca: [ca] });
  const statuses: number[] = [];
  const send = async (path: string) => {
    const response = await client.request({ path, headers: [["Host", HOST]] });
    statuses.push(response.status);
  };
  try {
    for (let i = 0; i < 4; i++) await send("/api/echo");
    await send("/api/items?id=1%20UNION%20SELECT%20pw%20FROM%20users");
    await send("/");
    await send("/missing");
    while (!statuses.includes(429) && statuses.length < 30) await send("/");
  } finally {
    await client.close();
  }
  assert.deepEqual(statuses.slice(0, 7), [200, 200, 200, 200, 200, 200, 404]);
  assert.equal(statuses.at(-1), 429, `statuses: ${statuses}`);
  return statuses.length;
}

peerTest(
  "metrics: promtool accepts the page of an edge with every feature; alerts and dashboard name only its series",
  PEERS,
  async (peers, t) => {
    const socks = await startMicrosocks(peers.microsocks);
    const upstream = await UpstreamFixture.start();
    const redis = await RedisServer.start(peers["redis-server"]);
    const pki = await TestPki.create();
    let gateway: Gateway | undefined;
    try {
      const cert = await pki.issue(HOST, { lifetimeMs: 30 * 24 * 3600 * 1000 });
      const booted = Date.now() / 1000;
      gateway = await fullEdge(socks.port, upstream.port, redis.url, cert);
      const sent = await traffic(gateway.ports.public, pki.ca.certPem);
      const local = gateway.ports.local_health;
      // The public workers report their requests to worker 0 twice a second, and their egress
      // outcomes in batches.
      const page = await waitFor(
        async () => (await request(local, { path: "/metrics" })).body,
        (text) =>
          sumOf(text, "portcullis_requests_total", { lane: "public" }) === sent &&
          sumOf(text, "portcullis_egress_instance_requests_total") === PROXIED,
        10_000,
      );

      await t.step("promtool check metrics passes the page without a word", async () => {
        const { code, output } = await promtool(peers.promtool, ["check", "metrics"], page);
        assert.equal(output, "", output);
        assert.equal(code, 0);
      });

      await t.step("no label is called instance or job: a SOCKS instance is socks_instance", () => {
        for (const [name, labels] of samples(page)) {
          assert.ok(
            !("instance" in labels) && !("job" in labels),
            `${name} ${Object.keys(labels)}`,
          );
        }
        const instance = { socks_instance: `127.0.0.1:${socks.port}` };
        assert.equal(valueOf(page, "portcullis_egress_instance_open", instance), 0);
        assert.equal(valueOf(page, "portcullis_egress_instance_failure_ratio", instance), 0);
        // Loopback: well under a second (the pool's clock counts whole milliseconds, so maybe 0).
        const latency = valueOf(page, "portcullis_egress_instance_latency_seconds", instance);
        assert.ok(latency >= 0 && latency < 1, `latency ${latency} s`);
      });

      await t.step("one request counter; end-to-end latency from 100 µs", () => {
        assert.ok(!page.includes("portcullis_responses_total"), "responses_total is gone");
        assert.equal(
          valueOf(page, "portcullis_requests_total", { lane: "public", class: "4xx", route: "-" }),
          1,
        );
        const count = valueOf(page, "portcullis_request_duration_seconds_count", {
          lane: "public",
        });
        assert.equal(count, sent);
        const lowest = valueOf(page, "portcullis_request_duration_seconds_bucket", {
          lane: "public",
          le: "0.0001",
        });
        assert.ok(lowest >= 0 && lowest <= count);
        assert.equal(
          valueOf(page, "portcullis_request_duration_seconds_bucket", {
            lane: "public",
            le: "+Inf",
          }),
          sent,
        );
      });

      await t.step(
        "process series: memory, CPU, open-file limit, a start time that stays",
        async () => {
          assert.ok(valueOf(page, "process_resident_memory_bytes") > 10_000_000);
          assert.ok(valueOf(page, "process_cpu_seconds_total") > 0);
          assert.equal(valueOf(page, "process_max_fds"), FILE_LIMIT);
          const start = valueOf(page, "process_start_time_seconds");
          assert.ok(
            start > booted - 60 && start <= booted + 1,
            `started at ${start}, booted ${booted}`,
          );
          const again = (await request(local, { path: "/metrics" })).body;
          assert.equal(valueOf(again, "process_start_time_seconds"), start);
          assert.ok(!/^portcullis_uptime_seconds/m.test(page), "uptime_seconds is gone");
          // Per isolate (0 and the two public workers): memory outside the heap, paced collections.
          const external = samples(page).filter(([n]) =>
            n === "portcullis_isolate_external_memory_bytes"
          );
          assert.deepEqual(external.map(([, l]) => l.isolate), ["0", "1", "2"]);
          assert.ok(external.every(([, , bytes]) => bytes > 0), JSON.stringify(external));
          const paced = samples(page).filter(([n]) => n === "portcullis_relay_collections_total");
          assert.deepEqual(paced.map(([, l]) => l.isolate), ["0", "1", "2"]);
        },
      );

      await t.step("certificate expiry is the certificate's notAfter as a Unix timestamp", () => {
        const [[, , notAfter]] = samples(page).filter(([name]) =>
          name === "portcullis_tls_certificate_not_after_timestamp_seconds"
        );
        assert.equal(notAfter, Math.floor(cert.notAfter.getTime() / 1000));
      });

      const exported = new Set(samples(page).map(([name]) => name));
      await t.step(
        "every metric an alert names is on the page; promtool checks the rules",
        async () => {
          const { code, output } = await promtool(peers.promtool, ["check", "rules", ALERTS]);
          assert.equal(code, 0, output);
          assert.match(output, /SUCCESS/);
          const exprs = alertExprs(parse(await Deno.readTextFile(ALERTS)));
          assert.ok(exprs.length >= 5, `${exprs.length} alerts`);
          for (const expr of exprs) {
            for (const name of metricNames(expr)) {
              assert.ok(exported.has(name), `${name} in ${expr}`);
            }
          }
        },
      );

      await t.step("every metric a dashboard panel names is on the page", async () => {
        const exprs = dashboardExprs(JSON.parse(await Deno.readTextFile(DASHBOARD)));
        assert.ok(exprs.length >= 10, `${exprs.length} queries`);
        const named = new Set<string>();
        for (const expr of exprs) {
          for (const name of metricNames(expr)) {
            assert.ok(exported.has(name), `${name} in ${expr}`);
            named.add(name);
          }
        }
        for (const family of ["lane", "ledger", "egress", "policy", "process"]) {
          assert.ok(
            [...named].some((name) =>
              name.startsWith(`portcullis_${family}`) || name.startsWith(family)
            ),
            `no panel for ${family}`,
          );
        }
      });
    } finally {
      await gateway?.dispose();
      await pki.dispose();
      await redis.stop();
      await upstream.stop();
      await socks.stop();
    }
  },
);

Deno.test("metrics: a rejected tenant set raises config_rejected_pending with its time; a fixed one clears it", async () => {
  const t = await bootEdge({
    lanes: ["public", "local_health"],
    edit: (config) => config.runtime = { watch: true, debounce_ms: 50 },
  });
  const page = async () => (await request(t.ports.local_health, { path: "/metrics" })).body;
  try {
    const first = await page();
    assert.equal(valueOf(first, "portcullis_config_rejected_pending"), 0);
    assert.equal(valueOf(first, "portcullis_config_last_rejection_timestamp_seconds"), 0);
    const loaded = valueOf(first, "portcullis_config_loaded_timestamp_seconds");
    assert.ok(Math.abs(loaded - Date.now() / 1000) < 60, `loaded at ${loaded}`);

    const bad = `${t.dir.dir}/tenants/bad.test.yaml`;
    await Deno.writeTextFile(
      bad,
      "host: bad.test\nroutes:\n  - match: { path: / }\n    respond: { status: 99 }\n",
    );
    const rejected = await waitFor(
      page,
      (text) => valueOf(text, "portcullis_config_rejected_pending") === 1,
      5000,
    );
    const at = valueOf(rejected, "portcullis_config_last_rejection_timestamp_seconds");
    assert.ok(Math.abs(at - Date.now() / 1000) < 60, `rejected at ${at}`);
    assert.equal(valueOf(rejected, "portcullis_config_generation"), 1);

    await Deno.remove(bad);
    const fixed = await waitFor(
      page,
      (text) => valueOf(text, "portcullis_config_rejected_pending") === 0,
      5000,
    );
    assert.equal(valueOf(fixed, "portcullis_config_last_rejection_timestamp_seconds"), at);
  } finally {
    await t.dispose();
  }
});

Deno.test("metrics: the dashboard reads one data source variable, and its panels fit the grid", async () => {
  const dashboard = JSON.parse(await Deno.readTextFile(DASHBOARD));
  const panels: {
    id: number;
    type: string;
    datasource?: { uid: string };
    gridPos: { x: number; w: number };
    targets?: unknown[];
  }[] = dashboard.panels;
  const ids = panels.map((panel) => panel.id);
  assert.equal(new Set(ids).size, ids.length, "panel ids are unique");
  for (const panel of panels.filter((p) => p.type !== "row")) {
    assert.equal(panel.datasource?.uid, "${datasource}", `panel ${panel.id}`);
    assert.ok(panel.gridPos.x + panel.gridPos.w <= 24, `panel ${panel.id} fits`);
    assert.ok((panel.targets ?? []).length > 0, `panel ${panel.id} has a query`);
  }
  const variables = dashboard.templating.list.map((v: { name: string }) => v.name);
  assert.deepEqual(variables, ["datasource", "instance"]);
  assert.deepEqual(
    metricNames(
      'sum by (lane) (rate(portcullis_requests_total{class="5xx",instance=~"$instance"}[$__rate_interval])) / on (lane) group_left portcullis_ledger_in_use > 0.5',
    ),
    ["portcullis_requests_total", "portcullis_ledger_in_use"],
  );
});
