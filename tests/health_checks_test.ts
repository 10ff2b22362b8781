/**
 * Active health checks of proxy backends (src/egress/health_checks.ts): the tenant file's
 * `health` field, compiled with its defaults; one check per backend and settings, rescheduled per
 * generation and stopped cleanly; and end to end, a backend whose health path fails is made cold
 * through the SOCKS way out and receives no client request until its check passes again.
 *
 * @module
 */
import assert from "node:assert/strict";
import http from "node:http";
import type { AddressInfo, Socket } from "node:net";
import * as v from "valibot";
import { EgressSchema } from "../src/config/egress_schema.ts";
import type { Backend, BackendHealth } from "../src/egress/destinations.ts";
import { Egress } from "../src/egress/egress.ts";
import { HealthChecks, type HealthTimers, type ProbeResult } from "../src/egress/health_checks.ts";
import { egressSettings } from "../src/egress/settings.ts";
import { loadTenants } from "../src/proxy/tenants.ts";
import { configErrorOf, tenantsDir } from "./fixtures/config_files.ts";
import { freePorts, Gateway, proofConfig, writeConfig } from "./fixtures/gateway.ts";
import { json, request } from "./fixtures/http_client.ts";
import { waitFor } from "./fixtures/in_process.ts";
import { UpstreamFixture } from "./fixtures/upstream.ts";
import { egressWhen, values, withProxyEdge } from "./fixtures/proxy_edge.ts";

/** A backend whose `/healthz` answers `healthStatus` (settable); other paths answer 200. */
class FlakyBackend {
  healthStatus = 503;
  /** Targets of client requests (not `/healthz`), in order. */
  readonly requests: string[] = [];
  /** Raw headers of every `/healthz` request. */
  readonly probes: string[][] = [];
  readonly #server: http.Server;
  readonly #sockets = new Set<Socket>();
  port = 0;

  private constructor() {
    this.#server = http.createServer((request, response) => {
      request.resume();
      request.once("end", () => {
        const health = request.url === "/healthz";
        if (health) this.probes.push(request.rawHeaders);
        else this.requests.push(request.url ?? "");
        const status = health ? this.healthStatus : 200;
        response.writeHead(status, { "content-length": "5" }).end("flaky");
      });
    });
    this.#server.on("connection", (socket: Socket) => {
      this.#sockets.add(socket);
      socket.once("close", () => this.#sockets.delete(socket));
    });
  }

  static async start(): Promise<FlakyBackend> {
    const backend = new FlakyBackend();
    await new Promise<void>((resolve) => backend.#server.listen(0, "127.0.0.1", resolve));
    backend.port = (backend.#server.address() as AddressInfo).port;
    return backend;
  }

  async stop(): Promise<void> {
    for (const socket of this.#sockets) socket.destroy();
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
  }
}

Deno.test("HealthChecks: a backend whose health path fails is cold and gets no client request until its check passes", async () => {
  const flaky = await FlakyBackend.start();
  const key = `http://127.0.0.1:${flaky.port}`;
  try {
    await withProxyEdge({
      routes: (site) => [{
        name: "api",
        match: { prefix: "/api/" },
        proxy: {
          backends: [
            { url: key, health: { path: "/healthz", interval_ms: 500, timeout_ms: 400 } },
            { url: site.backend },
          ],
          rewrite: { strip_prefix: "/api" },
        },
      }],
    }, async (p) => {
      // Before any client request: the check alone makes it cold (two failed probes).
      const cold = await egressWhen(
        p,
        (e) => e.cold_backends.some((b) => b.backend === key && b.state === "cold"),
        4000,
      );
      assert.equal(p.upstream.seen.length, 0, "no client request yet");
      assert.ok(cold.cold_backends.every((b) => b.backend === key), "only the flaky one");
      assert.ok(flaky.probes.length >= 2, `${flaky.probes.length} probes`);
      for (const raw of flaky.probes) {
        assert.deepEqual(values(raw, "host"), [`127.0.0.1:${flaky.port}`]);
        // No User-Agent unless forwarding.health_user_agent names one (blind_marks_test.ts).
        assert.deepEqual(values(raw, "user-agent"), []);
      }
      const tunnels = p.socks[0].connects.filter((c) => c.port === flaky.port);
      assert.ok(tunnels.length >= 1, "the probes went through the SOCKS instance");

      for (let i = 0; i < 20; i++) {
        const response = await p.send({ path: `/api/echo/${i}` });
        assert.equal(response.status, 200, response.body);
      }
      assert.deepEqual(flaky.requests, [], "every client request went to the healthy backend");
      assert.equal(p.upstream.seen.length, 20);

      // More failed probes renew the cold period but say nothing new.
      const probed = flaky.probes.length;
      await waitFor(() => flaky.probes.length, (n) => n >= probed + 2, 3000);
      const checkLines = () =>
        p.t.lines.filter((l) => l.includes(`health check of backend ${key}`));
      assert.deepEqual(checkLines(), [
        `portcullis: warning: egress: health check of backend ${key} (GET /healthz) healthy -> ` +
        `failing: 2 failed probes in a row, last: status 503 (expected 200); passed over while ` +
        `another backend is left`,
      ]);
      assert.deepEqual(flaky.requests, []);

      // It recovers: the next probe passes, and clients reach it again.
      flaky.healthStatus = 200;
      await egressWhen(p, (e) => !e.cold_backends.some((b) => b.backend === key), 3000);
      await waitFor(
        async () => {
          const response = await p.send({ path: "/api/echo/again" });
          assert.equal(response.status, 200, response.body);
          return flaky.requests.length;
        },
        (n) => n > 0,
        3000,
      );
      assert.equal(checkLines().length, 2, checkLines().join("\n"));
      assert.match(
        checkLines()[1],
        /^portcullis: egress: health check of backend .* failing -> healthy: status 200 after \d+ failed probes$/,
      );
    });
  } finally {
    await flaky.stop();
  }
});

Deno.test("HealthChecks: with request workers, worker 0 alone probes and every public worker passes the failing backend over", async () => {
  const flaky = await FlakyBackend.start();
  const steady = await UpstreamFixture.start();
  const [p, l, h] = freePorts(3);
  const config = proofConfig({ public: p, local_health: l, provider_health: h }, { workers: 2 });
  config.tenants_dir = "tenants";
  config.egress = { direct: [`127.0.0.1:${flaky.port}`, `127.0.0.1:${steady.port}`] };
  const key = `http://127.0.0.1:${flaky.port}`;
  const dir = await writeConfig(config, [{
    host: "shop.test",
    routes: [{
      match: { prefix: "/" },
      proxy: {
        backends: [
          { url: key, health: { path: "/healthz", interval_ms: 500 } },
          { url: `http://127.0.0.1:${steady.port}` },
        ],
      },
    }],
  }]);
  const gateway = await Gateway.start(dir, { public: p, local_health: l, provider_health: h });
  try {
    const failing = "healthy -> failing";
    await waitFor(() => gateway.stderr, (text) => text.includes(failing), 5000);
    const atLine = flaky.probes.length;
    const since = performance.now();
    // Three more probes take two intervals or more from one prober; three isolates would be faster.
    await waitFor(() => flaky.probes.length, (n) => n >= atLine + 3, 5000);
    const tookMs = performance.now() - since;
    assert.ok(
      tookMs >= 2 * 500 - 100,
      `3 probes in ${Math.round(tookMs)} ms: more than one prober`,
    );

    const answers: number[] = [];
    for (let i = 0; i < 30; i++) {
      const response = await request(p, { path: `/echo/${i}`, headers: [["Host", "shop.test"]] });
      answers.push(response.status);
    }
    assert.deepEqual(answers, Array(30).fill(200));
    assert.deepEqual(flaky.requests, [], "no public worker sent it a client request");
    assert.equal(steady.seen.length, 30);
    const workers = (await local(l, "/v1/health")).workers.admitted;
    // Both public workers served some (the kernel spreads new connections over their sockets).
    assert.ok(workers[1] > 0 && workers[2] > 0, `admitted by worker: ${JSON.stringify(workers)}`);
    assert.equal(gateway.stderr.split(failing).length - 1, 1, "one line, from worker 0");
  } finally {
    await gateway.dispose();
    await steady.stop();
    await flaky.stop();
  }
});

/** `GET path` on local_health, as JSON. */
async function local(port: number, path: string): Promise<{ workers: { admitted: number[] } }> {
  return json(await request(port, { path }));
}

/** One-shot timers run by hand on a settable clock. */
class ManualTimers implements HealthTimers {
  now = 0;
  #next = 1;
  readonly #due = new Map<number, { at: number; run: () => void }>();

  set(run: () => void, ms: number): number {
    const id = this.#next++;
    this.#due.set(id, { at: this.now + ms, run });
    return id;
  }

  clear(id: number): void {
    this.#due.delete(id);
  }

  get pending(): number {
    return this.#due.size;
  }

  /** Moves the clock to `at`, running every timer due by then, and lets the probes settle. */
  async advance(at: number): Promise<void> {
    this.now = at;
    for (const [id, timer] of [...this.#due].sort((a, b) => a[1].at - b[1].at)) {
      if (timer.at > at) continue;
      this.#due.delete(id);
      timer.run();
    }
    for (let i = 0; i < 5; i++) await Promise.resolve();
  }
}

const HEALTH: BackendHealth = {
  path: "/healthz",
  intervalMs: 500,
  timeoutMs: 100,
  expectStatus: [200],
  failures: 2,
};

function backend(host: string, health?: BackendHealth): Backend {
  return {
    key: `http://${host}`,
    hostname: host,
    port: 80,
    authority: host,
    target: `${host}:80`,
    weight: 1,
    ...(health ? { health } : {}),
  };
}

Deno.test("HealthChecks probes each backend and settings once, keeps unchanged checks across generations and stops cleanly", async () => {
  const timers = new ManualTimers();
  const settings = egressSettings(v.parse(EgressSchema, {
    direct: ["a.test:80", "b.test:80"],
    negative_cache: { failures: 3, ttl_ms: 60_000 },
  }));
  const lines: string[] = [];
  const egress = new Egress(settings, () => timers.now, { log: (line) => lines.push(line) });
  const probed: string[] = [];
  const answers = new Map<string, ProbeResult["verdict"]>();
  const checks = new HealthChecks({
    egress,
    clock: () => timers.now,
    log: (line) => lines.push(line),
    timers,
    probe(target) {
      probed.push(`${target.key}${target.health!.path}`);
      const verdict = answers.get(target.key) ?? "pass";
      return Promise.resolve({ verdict, detail: verdict === "pass" ? "status 200" : "status 500" });
    },
  });
  const a = backend("a.test", HEALTH);
  const other = { ...HEALTH, path: "/other" };
  try {
    // Two routes name a.test with the same check, a third with another path; b.test has none.
    checks.update([a, backend("b.test"), { ...a, weight: 5 }, backend("a.test", other)]);
    assert.equal(checks.size, 2);
    await timers.advance(0);
    assert.deepEqual(probed, ["http://a.test/healthz", "http://a.test/other"]);
    await timers.advance(499);
    assert.equal(probed.length, 2, "not before the interval");
    await timers.advance(500);
    assert.equal(probed.length, 4);

    // The next generation drops /other and keeps /healthz on its schedule (no probe at once).
    checks.update([a, backend("b.test")]);
    assert.equal(checks.size, 1);
    await timers.advance(500);
    assert.equal(probed.length, 4);
    assert.equal(timers.pending, 1);

    // Failing: cold after two probes, in the egress's cache, one line however many probes.
    answers.set(a.key, "fail");
    await timers.advance(1000);
    assert.deepEqual(egress.snapshot().cold_backends, []);
    await timers.advance(1500);
    assert.equal(egress.snapshot().cold_backends[0]?.state, "cold");
    assert.equal(egress.chooseBackend([a, backend("b.test")])?.key, "http://b.test");
    await timers.advance(2000);
    const checkLines = () => lines.filter((line) => line.includes("health check"));
    assert.equal(checkLines().length, 1, checkLines().join("\n"));

    // A generation that changes the check's settings: the new check starts failing, so its first
    // pass warms the backend.
    answers.set(a.key, "pass");
    const changed = backend("a.test", { ...HEALTH, timeoutMs: 200 });
    checks.update([changed]);
    await timers.advance(2000);
    assert.deepEqual(egress.snapshot().cold_backends, []);
    assert.match(checkLines()[1], /failing -> healthy: status 200 after 3 failed probes$/);

    // No backend with a check: nothing is scheduled; stop leaves no timer.
    checks.update([backend("b.test")]);
    assert.equal(timers.pending, 0);
    checks.update([changed]);
    assert.equal(timers.pending, 1);
    checks.stop();
    assert.equal(timers.pending, 0);
    checks.update([changed]);
    assert.equal(timers.pending, 0, "stopped for good");
  } finally {
    checks.stop();
    egress.close();
  }
});

Deno.test("Tenant files: a backend's health check is compiled with its defaults, and bad fields are refused", async () => {
  const routes = (health: string) =>
    `host: a.example\nroutes:\n  - match: { prefix: / }\n    proxy:\n      backends:\n` +
    `        - url: http://b.example\n          health: ${health}\n        - url: http://c.example\n`;
  const registry = await loadTenants(
    await tenantsDir({ "a.example.yaml": routes("{ path: /healthz }") }),
  );
  const action = registry.tenants[0].routeList[0].action;
  assert.equal(action.kind, "proxy");
  const [b, c] = action.kind === "proxy" ? action.backends : [];
  assert.deepEqual(b.health, {
    path: "/healthz",
    intervalMs: 10_000,
    timeoutMs: 2000,
    expectStatus: [200],
    failures: 2,
  });
  assert.equal(c.health, undefined);

  const listed = await loadTenants(
    await tenantsDir({
      "a.example.yaml": routes("{ path: /up, expect_status: [200, 204, 204], failures: 1 }"),
    }),
  );
  const first = listed.tenants[0].routeList[0].action;
  assert.deepEqual(first.kind === "proxy" && first.backends[0].health?.expectStatus, [200, 204]);

  const refused = await configErrorOf(
    loadTenants(
      await tenantsDir({ "a.example.yaml": routes("{ path: healthz, interval_ms: 100 }") }),
    ),
    "a bad health check was accepted",
  );
  assert.deepEqual(refused.problems.map((problem) => [problem.path.join("."), problem.message]), [
    [
      "routes.0.proxy.backends.0.health.path",
      "A health path starts with '/' and is printable ASCII with no space or '#'",
    ],
    ["routes.0.proxy.backends.0.health.interval_ms", "Expected milliseconds from 500 to 3600000"],
  ]);
});
