/**
 * Proxy dataplane, retries end to end with two SOCKS instances, one of which refuses connections.
 * A fresh pool picks instance 0 first (equal scores, rotation from 0), so the first request of
 * each edge here deterministically meets the refusing instance.
 *
 * @module
 */
import assert from "node:assert/strict";
import { json } from "./fixtures/http_client.ts";
import { balancedLedger } from "./fixtures/in_process.ts";
import {
  apiRoute,
  type Echo,
  failure,
  type ProxySetup,
  type Site,
  withProxyEdge,
} from "./fixtures/proxy_edge.ts";

/** Instance 0 refuses, instance 1 relays; the route's proxy options as given. */
function refusingFirst(proxy: Record<string, unknown> = {}): ProxySetup {
  return {
    socks: [{ mode: "refuse" }, {}],
    routes: (site: Site) => [apiRoute(site, proxy)],
  };
}

Deno.test("proxy retry: every GET succeeds on the healthy instance, and the retry is counted", async () => {
  await withProxyEdge(refusingFirst(), async (p) => {
    for (let i = 0; i < 8; i++) {
      const response = await p.send({ path: `/api/echo?i=${i}` });
      assert.equal(response.status, 200, `request ${i}: ${response.body}`);
      assert.equal(json<Echo>(response).url, `/echo?i=${i}`);
    }
    assert.equal(p.upstream.seen.length, 8);
    const egress = await p.egress();
    assert.ok(egress.retries >= 1, JSON.stringify(egress));
    assert.equal(egress.retry_budget_refusals, 0);
    assert.equal(egress.instances[0].failures, egress.instances[0].requests);
    assert.ok(egress.instances[0].failures >= 1);
    assert.equal(egress.instances[1].failures, 0);
    assert.equal(egress.instances[1].requests, 8);
    await balancedLedger(p.t);
  });
});

Deno.test("proxy retry: a POST that reached no upstream fails over without retry_post, sent once", async () => {
  await withProxyEdge(refusingFirst(), async (p) => {
    // Instance 0 refused the connection: not one byte was written, so going elsewhere cannot
    // deliver the POST twice — and the client must not pay for a dead instance.
    const response = await p.send({ method: "POST", path: "/api/echo", body: "once" });
    assert.equal(response.status, 200, response.body);
    assert.equal(json<Echo>(response).body, "once");
    assert.deepEqual(p.upstream.seen.map((r) => r.body), ["once"]);
    const egress = await p.egress();
    assert.equal(egress.retries, 1);
    assert.equal(egress.instances[0].requests, 1);
    assert.equal(egress.instances[0].state, "open", "a refused connect opens the breaker at once");
    assert.equal(egress.instances[1].requests, 1);
    // The client never saw the failed attempt; the operator's log does, at info.
    const absorbed = p.t.lines.filter((line) => line.includes(": info: request "));
    assert.equal(absorbed.length, 1, p.t.lines.join("\n"));
    assert.match(
      absorbed[0],
      /attempt 1 via .* upstream_unreachable .*nothing was sent; trying again/,
    );
    await balancedLedger(p.t);
  });
});

Deno.test("proxy retry: with retry_post: true a POST is retried on the other instance", async () => {
  await withProxyEdge(refusingFirst({ retry_post: true }), async (p) => {
    // A refused instance saw no byte, so even a large body is safely sent again, exactly once.
    const body = "p".repeat(256 * 1024);
    const response = await p.send({ method: "POST", path: "/api/echo", body });
    assert.equal(response.status, 200);
    const echo = json<Echo>(response);
    assert.equal(echo.method, "POST");
    assert.ok(echo.body === body, "the body changed on the way");
    assert.equal(p.upstream.seen.length, 1);
    const egress = await p.egress();
    assert.equal(egress.retries, 1);
    assert.equal(egress.instances[0].failures, 1);
    assert.equal(egress.instances[1].requests, 1);
    assert.equal(egress.instances[1].failures, 0);
  });
});

Deno.test("proxy retry: attempts: 1 disables retries even for GET", async () => {
  await withProxyEdge(refusingFirst({ attempts: 1 }), async (p) => {
    const response = await p.send({ path: "/api/echo" });
    failure(response, 502, "upstream_unreachable");
    let egress = await p.egress();
    assert.equal(egress.retries, 0);
    assert.equal(egress.instances[1].requests, 0);
    const next = await p.send({ path: "/api/echo" });
    assert.equal(next.status, 200);
    egress = await p.egress();
    assert.equal(egress.retries, 0);
    assert.equal(egress.instances[1].requests, 1);
  });
});

Deno.test("proxy retry: a POST whose body went upstream is never replayed, even with retry_post", async () => {
  // Instance 0 completes the CONNECT, then cuts the tunnel: the body had started to flow, so a
  // replay could duplicate the POST. A GET on the same failure is replayed.
  const setup: ProxySetup = {
    socks: [{ mode: "die_mid_stream", dieAfterBytes: 0 }, {}],
    routes: (site: Site) => [apiRoute(site, { retry_post: true })],
  };
  await withProxyEdge(setup, async (p) => {
    const body = "b".repeat(256 * 1024);
    const response = await p.send({ method: "POST", path: "/api/status/200", body });
    failure(response, 502, "upstream_failed", [p.upstream.port, ...p.socks.map((s) => s.port)]);
    const egress = await p.egress();
    assert.equal(egress.retries, 0);
    assert.equal(egress.instances[1].requests, 0);
  });
  await withProxyEdge({ ...setup }, async (p) => {
    const response = await p.send({ path: "/api/echo" });
    assert.equal(response.status, 200);
    const egress = await p.egress();
    assert.equal(egress.retries, 1);
    assert.equal(egress.instances[0].failures, 1);
  });
});
