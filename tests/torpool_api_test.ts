/**
 * The pool's JSON API over a pool of Tor doubles: the routes, `POST /scale` validation (each bad
 * body a 400 failure envelope, the limits unchanged), 404 and 405. The handler is mounted on a
 * loopback TCP `Deno.serve` here (the test process holds no Unix socket grant); the socket itself,
 * its mode, its take-over and rebinding and the derived flags are covered by
 * `torpool_cli_test.ts` and `torpool_socket_test.ts`.
 *
 * @module
 */
import assert from "node:assert/strict";
import { apiHandler } from "../src/torpool/api.ts";
import { TorPool } from "../src/torpool/supervisor.ts";
import { makePoolDir, poolConfig, waitFor } from "./fixtures/torpool_harness.ts";
import { boundedTest } from "./fixtures/bounded_test.ts";

async function withApi(fn: (url: string, pool: TorPool, socks: number) => Promise<void>) {
  const where = await makePoolDir();
  const config = poolConfig(where, { minInstances: 1, maxInstances: 3 });
  const pool = TorPool.start(config, { log: () => {} });
  const server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen() {} },
    apiHandler(pool),
  );
  try {
    await fn(`http://127.0.0.1:${server.addr.port}`, pool, config.socksBasePort);
  } finally {
    await server.shutdown();
    await pool.stop();
    await Deno.remove(where.dir, { recursive: true });
  }
}

async function call(url: string, init?: RequestInit) {
  const response = await fetch(url, init);
  return { status: response.status, headers: response.headers, body: await response.json() };
}

boundedTest("pool API: GET /health, /backends and /stats describe the pool", async () => {
  await withApi(async (url, pool, socks) => {
    const early = await call(`${url}/health`, { headers: { "x-request-id": "probe-1" } });
    if (pool.health().live === 0) {
      assert.equal(early.status, 503, "down before any instance is ready");
      assert.equal(early.body.status, "down");
    }
    assert.equal(early.headers.get("x-request-id"), "probe-1");
    assert.equal(early.headers.get("cache-control"), "no-store");
    await waitFor("a live instance", () => pool.backends().length === 1);
    const health = await call(`${url}/health`);
    assert.equal(health.status, 200);
    assert.deepEqual(
      { ...health.body, each: undefined },
      { status: "ok", live: 1, instances: 1, min: 1, max: 3, bootstrap: 100, each: undefined },
    );
    const backends = await call(`${url}/backends`);
    assert.equal(backends.status, 200);
    assert.equal(backends.body.backends.length, 1);
    assert.deepEqual(
      { ...backends.body.backends[0], latencyMs: typeof backends.body.backends[0].latencyMs },
      { index: 0, host: "127.0.0.1", port: socks, latencyMs: "number", errors: 0, active: 0 },
    );
    pool.report(socks, { active: 1, latencyMs: 50, error: true });
    const stats = await call(`${url}/stats`);
    assert.equal(stats.status, 200);
    assert.equal(stats.body.each[0].errors, 1);
    assert.equal(stats.body.each[0].active, 1);
    assert.equal(stats.body.each[0].socksPort, socks);
    assert.equal(stats.body.spawns, 1);
  });
}, 30_000);

boundedTest(
  "pool API: POST /scale sets the limits; bad bodies are 400 and change nothing",
  async () => {
    await withApi(async (url, pool, socks) => {
      const post = (body: string) =>
        call(`${url}/scale`, { method: "POST", body, headers: { "x-request-id": "scale-1" } });
      for (
        const body of [
          "not json",
          '{"min": 3, "max": 1}',
          '{"min": 0}',
          '{"max": 4}',
          '{"min": 1.5}',
          '{"min": "2"}',
          "{}",
          '{"mn": 2}',
          "[2]",
        ]
      ) {
        const reply = await post(body);
        assert.equal(reply.status, 400, body);
        assert.deepEqual(reply.body, {
          error: {
            code: "bad_request",
            message: "The request is malformed",
            request_id: "scale-1",
          },
        }, body);
      }
      assert.deepEqual(pool.limits, { min: 1, max: 3 });
      const huge = await post(JSON.stringify({ min: 2, pad: "x".repeat(5000) }));
      assert.equal(huge.status, 413);
      const ok = await post('{"min": 2}');
      assert.equal(ok.status, 200);
      assert.deepEqual(ok.body, { min: 2, max: 3 });
      await waitFor("two live instances", () => pool.backends().length === 2);
      const backends = await call(`${url}/backends`);
      assert.deepEqual(backends.body.backends.map((b: { port: number }) => b.port), [
        socks,
        socks + 1,
      ]);
    });
  },
  30_000,
);

boundedTest("pool API: unknown paths are 404, known paths with another method 405", async () => {
  await withApi(async (url) => {
    const missing = await call(`${url}/v1/backends`);
    assert.equal(missing.status, 404);
    assert.equal(missing.body.error.code, "route_not_allowed");
    const wrong = await call(`${url}/scale`);
    assert.equal(wrong.status, 405);
    assert.equal(wrong.headers.get("allow"), "POST");
    assert.equal(wrong.body.error.code, "method_not_allowed");
    const posted = await call(`${url}/health`, { method: "POST", body: "{}" });
    assert.equal(posted.status, 405);
  });
}, 30_000);
