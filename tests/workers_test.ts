/**
 * Request workers: `workers: 2` runs the real gateway as two isolates on the same sockets. Both
 * serve every lane, they count in one ledger and one set of response counters, a new generation
 * reaches both, a reload or drain asked of either is done once for all, and the egress outcomes of
 * one worker reach the other's breakers and negative cache.
 *
 * @module
 */
import assert from "node:assert/strict";
import { stringify } from "yaml";
import { compareWorkers } from "../src/edge/workers.ts";
import { Egress } from "../src/egress/egress.ts";
import { egressSettings } from "../src/egress/settings.ts";
import { shareEgress } from "../src/egress/share.ts";
import { EgressSchema } from "../src/config/egress_schema.ts";
import * as v from "valibot";
import {
  DEMO_TENANT,
  freePorts,
  Gateway,
  type LanePorts,
  proofConfig,
  writeConfig,
} from "./fixtures/gateway.ts";
import { json, request } from "./fixtures/http_client.ts";
import { waitFor } from "./fixtures/in_process.ts";

async function twoWorkers(edit: (config: Record<string, unknown>) => void = () => {}) {
  const [p, l, h] = freePorts(3);
  const ports: LanePorts = { public: p, local_health: l, provider_health: h };
  const config = proofConfig(ports, { workers: 2 });
  config.tenants_dir = "tenants";
  (config as Record<string, unknown>).runtime = { watch: true, debounce_ms: 50 };
  edit(config);
  const dir = await writeConfig(config, [DEMO_TENANT]);
  return await Gateway.start(dir, ports);
}

/** `GET path` on local_health over a fresh connection, as JSON. */
async function local<T>(gateway: Gateway, path: string, method = "GET"): Promise<T> {
  const response = await request(gateway.ports.local_health, { path, method });
  return json<T>(response);
}

/** Which workers answer `path` on fresh connections (at most `tries` requests). */
async function workersSeen(gateway: Gateway, path: string, tries = 60): Promise<Set<number>> {
  const seen = new Set<number>();
  for (let i = 0; i < tries && seen.size < 2; i++) {
    seen.add((await local<{ served_by_worker: number }>(gateway, path)).served_by_worker);
  }
  return seen;
}

Deno.test("workers: two isolates serve every lane over one ledger, under derived flags", async () => {
  const gateway = await twoWorkers();
  try {
    assert.ok(
      gateway.flags.some((flag) => flag.startsWith("--allow-read=") && flag.includes("/src")),
      "the flags grant the worker code folders",
    );
    assert.ok(gateway.stderr.includes("2 request workers share one ledger"), gateway.stderr);
    assert.deepEqual([...await workersSeen(gateway, "/v1/health")].sort(), [0, 1]);
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
    // Every reading, from either worker, counts every request of both.
    for (let i = 0; i < 6; i++) {
      const after = await local<{ lanes: { public: { admitted: number; in_use: number } } }>(
        gateway,
        "/v1/ledger",
      );
      assert.equal(after.lanes.public.admitted - before.lanes.public.admitted, requests);
      assert.equal(after.lanes.public.in_use, 0);
    }
    const metrics = (await request(gateway.ports.local_health, { path: "/metrics" })).body;
    const twoxx = /portcullis_responses_total\{lane="public",class="2xx"\} (\d+)/.exec(metrics);
    assert.equal(Number(twoxx?.[1]), requests, metrics.slice(0, 2000));
  } finally {
    await gateway.dispose();
  }
});

Deno.test("workers: a changed tenants folder reaches every worker; a rejection shows on every worker", async () => {
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
    type View = { generation: number; served_by_worker: number; last_rejected: unknown };
    const views = new Map<number, View>();
    await waitFor(
      async () => {
        const view = await local<View>(gateway, "/v1/config");
        if (view.last_rejected) views.set(view.served_by_worker, view);
        return views.size;
      },
      (size) => size === 2,
      5000,
    );
    const [a, b] = [...views.values()];
    assert.equal(a.generation, b.generation);
    assert.deepEqual(a.last_rejected, b.last_rejected);
  } finally {
    await gateway.dispose();
  }
});

Deno.test("workers: a reload asked of either worker is done once, by the owner", async () => {
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
    type Reload = { outcome: string; generation: number; served_by_worker: number };
    const answers: Reload[] = [];
    for (let i = 0; i < 40 && new Set(answers.map((a) => a.served_by_worker)).size < 2; i++) {
      answers.push(await local<Reload>(gateway, "/v1/config/reload", "POST"));
    }
    assert.equal(new Set(answers.map((a) => a.served_by_worker)).size, 2, "both workers asked");
    assert.equal(answers.filter((a) => a.outcome === "loaded").length, 1);
    assert.ok(answers.every((a) => a.generation === 2), JSON.stringify(answers));
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

Deno.test("workers: SIGTERM drains both workers and exits 0", async () => {
  const gateway = await twoWorkers();
  try {
    await workersSeen(gateway, "/v1/health");
    const status = await gateway.stop("SIGTERM");
    assert.equal(status.code, 0, gateway.stderr);
    assert.match(gateway.stderr, /portcullis: worker 1: drained/);
  } finally {
    await gateway.dispose();
  }
});

Deno.test("workers: listener sets that differ between workers refuse the boot", () => {
  const tcp = (port: number) => ({ kind: "tcp" as const, hostname: "127.0.0.1", port });
  const same = [{ lane: "public" as const, index: 0, address: tcp(8080) }];
  assert.deepEqual(compareWorkers(new Map([[0, same], [1, same]])), []);
  const moved = [{ lane: "public" as const, index: 0, address: tcp(8081) }];
  assert.deepEqual(compareWorkers(new Map([[0, same], [1, moved]])), [
    'Worker 1 bound lane "public" listener 0 on 127.0.0.1:8081; worker 0 did not',
    'Worker 1 did not bind lane "public" listener 0 on 127.0.0.1:8080',
  ]);
  const unix = [...same, {
    lane: "local_health" as const,
    index: 0,
    address: { kind: "unix" as const, path: "/run/p.sock" },
  }];
  assert.deepEqual(compareWorkers(new Map([[0, unix], [1, same]])), [], "only worker 0 binds unix");
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
