/**
 * Request workers: `workers: 2` runs the real gateway as three isolates — two public request workers
 * on the same public sockets, and worker 0 serving the protected lanes. They count in one ledger
 * and one set of response counters, a new generation reaches every worker at once, a reload or a
 * drain is done once for all, and the egress outcomes of one worker reach the other's breakers and
 * negative cache.
 *
 * @module
 */
import assert from "node:assert/strict";
import { stringify } from "yaml";
import type { LaneListener } from "../src/boot/distinct.ts";
import { compareWorkers } from "../src/edge/arm_gate.ts";
import { Egress } from "../src/egress/egress.ts";
import { egressSettings } from "../src/egress/settings.ts";
import { shareEgress } from "../src/egress/share.ts";
import { EgressSchema } from "../src/config/egress_schema.ts";
import * as v from "valibot";
import {
  ADMIN_AUTH,
  DEMO_TENANT,
  freePorts,
  Gateway,
  type LanePorts,
  proofConfig,
  writeConfig,
} from "./fixtures/gateway.ts";
import { json, request } from "./fixtures/http_client.ts";
import { waitFor } from "./fixtures/in_process.ts";
import { diagLines } from "./fixtures/diag_lines.ts";

async function twoWorkers(
  edit: (config: Record<string, unknown>) => void = () => {},
  tenants: Record<string, unknown>[] = [DEMO_TENANT],
) {
  const [p, l, h] = freePorts(3);
  const ports: LanePorts = { public: p, local_health: l, provider_health: h };
  const config = proofConfig(ports, { workers: 2 });
  config.tenants_dir = "tenants";
  (config as Record<string, unknown>).runtime = { watch: true, debounce_ms: 50 };
  edit(config);
  const dir = await writeConfig(config, tenants);
  return await Gateway.start(dir, ports);
}

/** `GET path` on local_health over a fresh connection, as JSON. */
async function local<T>(gateway: Gateway, path: string, method = "GET"): Promise<T> {
  const headers = method === "GET" ? [] : [ADMIN_AUTH];
  const response = await request(gateway.ports.local_health, { path, method, headers });
  return json<T>(response);
}

/** Requests admitted by each worker, from `/v1/health`. */
async function admittedByWorker(gateway: Gateway): Promise<number[]> {
  return (await local<{ workers: { admitted: number[] } }>(gateway, "/v1/health")).workers.admitted;
}

Deno.test("workers: two public workers and worker 0 count in one ledger, under derived flags", async () => {
  const gateway = await twoWorkers();
  try {
    const reads = gateway.flags.find((flag) => flag.startsWith("--allow-read="))!.split(",");
    assert.ok(
      reads.some((path) => path.endsWith("src")) && reads.some((path) => path.endsWith("lanes")),
      "the flags grant the worker code folders",
    );
    assert.match(gateway.stderr, /2 public request workers and this isolate/);
    const before = await local<{ lanes: { public: { admitted: number } } }>(gateway, "/v1/ledger");
    const requests = 40;
    for (let i = 0; i < requests; i++) {
      const response = await request(gateway.ports.public, {
        path: "/",
        headers: [["Host", "demo.test"]],
      });
      assert.equal(response.status, 200);
    }
    const provider = await request(gateway.ports.provider_health, { path: "/healthz" });
    assert.equal(provider.status, 200);
    const byWorker = await admittedByWorker(gateway);
    assert.equal(byWorker.length, 3);
    assert.equal(byWorker[1] + byWorker[2], requests, `public requests: ${byWorker}`);
    assert.ok(byWorker[1] > 0 && byWorker[2] > 0, `both public workers served: ${byWorker}`);
    assert.ok(byWorker[0] >= 2, "worker 0 served the protected lanes");
    // Every reading, from either worker, counts every request of both.
    for (let i = 0; i < 6; i++) {
      const after = await local<{ lanes: { public: { admitted: number; in_use: number } } }>(
        gateway,
        "/v1/ledger",
      );
      assert.equal(after.lanes.public.admitted - before.lanes.public.admitted, requests);
      assert.equal(after.lanes.public.in_use, 0);
    }
    // The request counter of both public workers, which report to worker 0 twice a second.
    const twoxx = (page: string) =>
      Number(/^portcullis_requests_total\{lane="public",class="2xx"\} (\d+)$/m.exec(page)?.[1]);
    const metrics = await waitFor(
      async () => (await request(gateway.ports.local_health, { path: "/metrics" })).body,
      (page) => twoxx(page) >= requests,
      5000,
    );
    assert.equal(twoxx(metrics), requests, metrics.slice(0, 2000));
  } finally {
    await gateway.dispose();
  }
});

Deno.test("workers: a changed tenants folder reaches every worker; a rejected one reaches none", async () => {
  const gateway = await twoWorkers();
  try {
    const tenants = `${gateway.dir.dir}/tenants`;
    await Deno.writeTextFile(
      `${tenants}/.new.yaml`,
      stringify({
        host: "new.test",
        routes: [{ match: { path: "/" }, respond: { body: "new\n" } }],
      }),
    );
    await Deno.rename(`${tenants}/.new.yaml`, `${tenants}/new.test.yaml`);
    await waitFor(
      async () => {
        const statuses = [];
        for (let i = 0; i < 12; i++) {
          statuses.push(
            (await request(gateway.ports.public, { path: "/", headers: [["Host", "new.test"]] }))
              .status,
          );
        }
        return statuses;
      },
      (statuses) => statuses.every((s) => s === 200),
      5000,
    );
    await Deno.writeTextFile(`${tenants}/bad.test.yaml`, "host: bad.test\nroutes: 5\n");
    const view = await waitFor(
      () => local<{ generation: number; last_rejected: unknown }>(gateway, "/v1/config"),
      (v) => v.last_rejected !== null,
      5000,
    );
    assert.equal(view.generation, 2, "the rejected set changed nothing");
    for (let i = 0; i < 12; i++) {
      const response = await request(gateway.ports.public, {
        path: "/",
        headers: [["Host", "new.test"]],
      });
      assert.equal(response.status, 200, "every public worker still serves generation 2");
    }
  } finally {
    await gateway.dispose();
  }
});

Deno.test("workers: once a reload answers `loaded`, every public worker serves the new set", async () => {
  const gateway = await twoWorkers((config) => config.runtime = { watch: false, debounce_ms: 50 });
  try {
    const tenants = `${gateway.dir.dir}/tenants`;
    await Deno.writeTextFile(
      `${tenants}/late.test.yaml`,
      stringify({
        host: "late.test",
        routes: [{ match: { path: "/" }, respond: { body: "late" } }],
      }),
    );
    const reload = await local<{ outcome: string; generation: number }>(
      gateway,
      "/v1/config/reload",
      "POST",
    );
    assert.deepEqual([reload.outcome, reload.generation], ["loaded", 2]);
    for (let i = 0; i < 12; i++) {
      const response = await request(gateway.ports.public, {
        path: "/",
        headers: [["Host", "late.test"]],
      });
      assert.equal(response.status, 200);
    }
  } finally {
    await gateway.dispose();
  }
});

Deno.test("workers: SIGTERM drains every worker and exits 0", async () => {
  const gateway = await twoWorkers();
  try {
    const status = await gateway.stop("SIGTERM");
    assert.equal(status.code, 0, gateway.stderr);
    const drained = diagLines(gateway.stderr).filter((line) => line.msg === "drained");
    assert.deepEqual(drained.map((line) => line.worker).sort(), [1, 2, undefined]);
  } finally {
    await gateway.dispose();
  }
});

Deno.test("workers: a listener in the wrong worker, or public sets that differ, refuse the boot", () => {
  const tcp = (port: number) => ({ kind: "tcp" as const, hostname: "127.0.0.1", port });
  const publicAt = (port: number): LaneListener[] => [
    { lane: "public", index: 0, address: tcp(port) },
  ];
  const owner: LaneListener[] = [
    { lane: "local_health" as const, index: 0, address: tcp(9901) },
    { lane: "public" as const, index: 1, address: { kind: "unix" as const, path: "/run/p.sock" } },
  ];
  const good = new Map<number, LaneListener[]>([[0, owner], [1, publicAt(8080)], [
    2,
    publicAt(8080),
  ]]);
  assert.deepEqual(compareWorkers(good), []);
  assert.deepEqual(
    compareWorkers(
      new Map([[0, owner], [1, publicAt(8080)], [2, publicAt(8081)]]) as Map<
        number,
        LaneListener[]
      >,
    ),
    [
      'Worker 2 bound lane "public" listener 0 on 127.0.0.1:8081; worker 1 did not',
      'Worker 2 did not bind lane "public" listener 0 on 127.0.0.1:8080',
    ],
  );
  assert.deepEqual(
    compareWorkers(new Map([[0, publicAt(8080)], [1, owner]]) as Map<number, LaneListener[]>),
    [
      'Worker 0 bound lane "public" listener 0 on 127.0.0.1:8080; the public workers own it',
      'Worker 1 bound lane "local_health" listener 0 on 127.0.0.1:9901; only worker 0 may',
      'Worker 1 bound lane "public" listener 1 on unix:/run/p.sock; only worker 0 may',
    ],
  );
});

Deno.test("workers: one worker's egress failures open the other's breaker and make the backend cold", async () => {
  const settings = egressSettings(
    v.parse(EgressSchema, {
      socks: [{ hostname: "127.0.0.1", port: 1 }],
      negative_cache: { failures: 3, ttl_ms: 60_000 },
    }),
  );
  const name = `test-${crypto.randomUUID()}`;
  const clock = () => performance.now();
  const a = new Egress(settings, clock);
  const b = new Egress(settings, clock);
  const stops = [shareEgress(a, name, 10), shareEgress(b, name, 10)];
  try {
    const backend = {
      key: "http://far.test",
      target: "far.test:80",
      authority: "far.test",
      weight: 1,
    };
    for (let i = 0; i < 12; i++) {
      const way = a.way(backend as never)!;
      a.finish(way, backend as never, { instanceOk: false, backendOk: false });
    }
    assert.equal(a.pool.snapshot()[0].state, "open");
    await waitFor(() => b.pool.snapshot()[0].state, (state) => state === "open", 2000);
    assert.ok(b.cache.isCold("http://far.test"), "the backend is cold in the other worker too");
    // Attempts after the breaker opened were fallbacks, which no breaker counts or shares.
    assert.equal(b.pool.snapshot()[0].requests, 10);
  } finally {
    for (const stop of stops) stop();
    a.close();
    b.close();
  }
});

Deno.test("workers: policy counters from the public workers reach /metrics on worker 0", async () => {
  const guarded = {
    ...DEMO_TENANT,
    policies: { blocklist: { mode: "dry_run", rules: [{ name: "admin", path: "^/admin" }] } },
  };
  const gateway = await twoWorkers(() => {}, [guarded]);
  try {
    for (let i = 0; i < 20; i++) {
      const response = await request(gateway.ports.public, {
        path: "/admin",
        headers: [["Host", "demo.test"]],
      });
      assert.equal(response.status, 404, "dry run: the request goes on (and finds no route)");
    }
    const byWorker = await admittedByWorker(gateway);
    assert.ok(byWorker[1] > 0 && byWorker[2] > 0, `both public workers served: ${byWorker}`);
    const total = await waitFor(
      async () => {
        const metrics = (await request(gateway.ports.local_health, { path: "/metrics" })).body;
        return [...metrics.matchAll(/^portcullis_policy_dry_run_total\{[^}]*\} (\d+)$/gm)]
          .reduce((sum, m) => sum + Number(m[1]), 0);
      },
      (n) => n === 20,
      3000,
    );
    assert.equal(total, 20);
  } finally {
    await gateway.dispose();
  }
});

Deno.test("workers: two public workers spend one rate limit and refuse one blocked client", async () => {
  const limited = {
    ...DEMO_TENANT,
    policies: {
      // Five requests, then none for 1,000 s; the second denial in a row blocks the client.
      rate_limit: { per_second: 0.001, burst: 5, block_after: 2 },
      ttl_block: { ttl_ms: 600_000, action: "404" },
    },
  };
  const gateway = await twoWorkers(() => {}, [limited]);
  try {
    const statuses: number[] = [];
    for (let i = 0; i < 30; i++) {
      const response = await request(gateway.ports.public, {
        path: "/",
        headers: [["Host", "demo.test"]],
      });
      statuses.push(response.status);
    }
    const byWorker = await admittedByWorker(gateway);
    assert.ok(byWorker[1] > 0 && byWorker[2] > 0, `both public workers served: ${byWorker}`);
    // One bucket: 5 admitted, 2 denied (429), then the block (404) — in whichever worker.
    assert.deepEqual(statuses, [...Array(5).fill(200), 429, 429, ...Array(23).fill(404)]);
  } finally {
    await gateway.dispose();
  }
});
