/**
 * Proxy dataplane, the SOCKS pool's breakers end to end: an instance that dies under load is
 * retried around and its breaker opens at its first refused connect; once it is back, the
 * gateway's own probe — a SOCKS greeting, sent when the probe interval ends whether or not
 * requests arrive — closes the breaker; with every breaker open the pool still sends, round-robin.
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
      assert.equal(open.instances[0].opens, 1);
      assert.ok(open.instances[0].failures >= 1, JSON.stringify(open.instances[0]));
      assert.equal(open.instances[1].state, "healthy");
    } finally {
      const statuses = await traffic.stop();
      const failed = statuses.filter((status) => status !== 200);
      assert.deepEqual(failed, [], `${failed.length} of ${statuses.length} requests failed`);
    }
    const egress = await p.egress();
    assert.ok(egress.retries >= 1);
    assert.equal(egress.instances[1].failures, 0);

    // Back again, with no traffic at all: the gateway's own probe (proactive, once per probe
    // interval) closes the breaker within about one interval of the restart.
    const down = await p.egress();
    assert.equal(down.instances[0].state === "healthy", false, JSON.stringify(down.instances[0]));
    const connects = p.socks.map((s) => s.connects.length);
    const accepted = p.socks[0].accepted;
    await p.socks[0].restart();
    const closed = await egressWhen(p, (e) => e.instances[0].state === "healthy", 2000);
    assert.equal(p.socks[0].accepted, accepted + 1, "one probe connection");
    assert.equal(p.socks[0].connects.length, connects[0], "the probe asked for no destination");
    assert.ok(closed.probes > down.probes, JSON.stringify(closed));
    assert.equal(closed.instances[0].requests, down.instances[0].requests, "no client request");
    const response = await p.send({ method: "POST", path: "/api/echo?back=1", body: "x" });
    assert.equal(response.status, 200);
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

Deno.test("proxy breaker: the first refused connect opens the breaker, so later requests go to live instances", async () => {
  const setup = {
    socks: [{}, {}, {}],
    // A window this wide would need 20 failures before opening on the failure ratio.
    egress: () => ({ probe_interval_ms: 60_000, breaker: { window: 20, min_samples: 20 } }),
    routes: (site: Site) => [apiRoute(site, { attempts: 1 })],
  };
  await withProxyEdge(setup, async (p) => {
    // Instance 0 is dead before the first request; a fresh pool's first pick is instance 0.
    p.socks[0].kill();
    const statuses: number[] = [];
    for (let i = 0; i < 3; i++) {
      const response = await p.send({ method: "POST", path: `/api/echo?i=${i}`, body: "b" });
      statuses.push(response.status);
    }
    // attempts: 1 — the POST that met the dead instance was not sent anywhere else; the refused
    // connect opened the breaker at once, with a window of 20, so the next POSTs went elsewhere.
    assert.deepEqual(statuses, [502, 200, 200]);
    const egress = await p.egress();
    assert.equal(egress.instances[0].state, "open", JSON.stringify(egress.instances[0]));
    assert.equal(egress.instances[0].opens, 1);
    assert.equal(egress.instances[0].failures, 1);
    const requests = egress.instances[0].requests;
    for (let i = 0; i < 10; i++) {
      const response = await p.send({ method: "POST", path: `/api/echo?after=${i}`, body: "b" });
      assert.equal(response.status, 200, "a POST after the trip went to a live instance");
    }
    assert.equal((await p.egress()).instances[0].requests, requests);
    await balancedLedger(p.t);
  });
});
