/**
 * Proxy dataplane, the SOCKS pool's breakers end to end: an instance that dies under load is
 * retried around and its breaker opens; once it is back, the first request after the probe
 * interval is its half-open trial and closes the breaker; with every breaker open the pool still
 * sends, round-robin.
 *
 * @module
 */
import assert from "node:assert/strict";
import { balancedLedger } from "./fixtures/in_process.ts";
import {
  apiRoute,
  egressWhen,
  failure,
  type ProxyEdge,
  type Site,
  withProxyEdge,
} from "./fixtures/proxy_edge.ts";

/** Sends GETs from `workers` concurrent clients until stopped; collects every status. */
function load(p: ProxyEdge, workers: number) {
  const statuses: number[] = [];
  let running = true;
  const tasks = Array.from({ length: workers }, async (_, worker) => {
    for (let i = 0; running; i++) {
      const response = await p.send({ path: `/api/echo?w=${worker}&i=${i}` });
      statuses.push(response.status);
    }
  });
  return {
    statuses,
    async stop(): Promise<number[]> {
      running = false;
      await Promise.all(tasks);
      return statuses;
    },
  };
}

Deno.test("proxy breaker: an instance killed under load opens its breaker while every GET succeeds", async () => {
  const setup = {
    socks: [{}, {}],
    egress: () => ({ probe_interval_ms: 300, breaker: { window: 10, min_samples: 10 } }),
  };
  await withProxyEdge(setup, async (p) => {
    const traffic = load(p, 8);
    try {
      // Both instances serve before the kill.
      await egressWhen(p, (e) => e.instances.every((i) => i.requests >= 5));
      p.socks[0].kill();
      const open = await egressWhen(p, (e) => e.instances[0].state === "open");
      assert.ok(open.instances[0].opens >= 1);
      assert.ok(open.instances[0].failures >= 5, JSON.stringify(open.instances[0]));
      assert.equal(open.instances[1].state, "closed");
    } finally {
      const statuses = await traffic.stop();
      const failed = statuses.filter((status) => status !== 200);
      assert.deepEqual(failed, [], `${failed.length} of ${statuses.length} requests failed`);
    }
    const egress = await p.egress();
    assert.ok(egress.retries >= 1);
    assert.equal(egress.instances[1].failures, 0);

    // Back again: after the probe interval the next request is the half-open trial.
    await p.socks[0].restart();
    const due = await egressWhen(p, (e) => e.instances[0].state === "half_open", 2000);
    const accepted = p.socks[0].accepted;
    const response = await p.send({ path: "/api/echo?trial=1" });
    assert.equal(response.status, 200);
    assert.equal(p.socks[0].accepted, accepted + 1, "the trial did not go to the revived instance");
    const closed = await egressWhen(p, (e) => e.instances[0].state === "closed");
    assert.equal(closed.instances[0].requests, due.instances[0].requests + 1);
    assert.equal(closed.instances[0].opens, due.instances[0].opens);
    assert.equal(closed.instances[0].failures, due.instances[0].failures);
    await balancedLedger(p.t);
  });
});

Deno.test("proxy breaker: with every breaker open the pool still sends, round-robin", async () => {
  const setup = {
    socks: [{ mode: "reset" as const }, { mode: "reset" as const }],
    egress: () => ({ probe_interval_ms: 60_000, breaker: { window: 2, min_samples: 2 } }),
    routes: (site: Site) => [apiRoute(site, { attempts: 1 })],
  };
  await withProxyEdge(setup, async (p) => {
    for (let i = 0; i < 8; i++) {
      const egress = await p.egress();
      if (egress.instances.every((instance) => instance.state === "open")) break;
      failure(await p.send({ path: "/api/echo" }), 502, "upstream_unreachable");
    }
    const before = await p.egress();
    assert.deepEqual(before.instances.map((i) => i.state), ["open", "open"]);
    const accepted = p.socks.map((s) => s.accepted);
    for (let i = 0; i < 4; i++) {
      failure(await p.send({ path: "/api/echo" }), 502, "upstream_unreachable");
    }
    assert.deepEqual(p.socks.map((s, i) => s.accepted - accepted[i]), [2, 2]);
    const after = await p.egress();
    assert.deepEqual(after.instances.map((i) => i.state), ["open", "open"]);
    // Fallback attempts do not count as breaker samples: the breakers did not reopen.
    assert.deepEqual(after.instances.map((i) => i.opens), before.instances.map((i) => i.opens));
    assert.deepEqual(
      after.instances.map((i) =>
        i.requests - before.instances[after.instances.indexOf(i)].requests
      ),
      [2, 2],
    );
  });
});
