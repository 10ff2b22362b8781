/**
 * Proxy dataplane, failure classification end to end: what the client gets (status and error
 * envelope, with no upstream detail) when the SOCKS instance refuses, hangs or cannot reach the
 * destination, when the upstream is slower than the lane deadline, and when the upstream itself
 * answers with an error.
 *
 * @module
 */
import assert from "node:assert/strict";
import { balancedLedger, waitFor } from "./fixtures/in_process.ts";
import {
  apiRoute,
  closeQuietly,
  failure,
  type ProxyEdge,
  withProxyEdge,
} from "./fixtures/proxy_edge.ts";

/** Every port of the test's servers: none may appear in an error body. */
function ports(p: ProxyEdge): number[] {
  return [p.upstream.port, ...p.socks.map((s) => s.port)];
}

Deno.test("proxy failure: a SOCKS instance refusing connections is 502 upstream_unreachable", async () => {
  await withProxyEdge({ socks: [{ mode: "refuse" }] }, async (p) => {
    const response = await p.send({ path: "/api/echo" });
    const error = failure(response, 502, "upstream_unreachable", ports(p));
    assert.equal(error.request_id, response.headers["x-request-id"]);
    assert.equal(p.upstream.seen.length, 0);
    const egress = await p.egress();
    assert.ok(egress.instances[0].failures >= 1);
    // The destination was never reached: the backend is not blamed.
    assert.deepEqual(egress.cold_backends, []);
    await balancedLedger(p.t);
  });
});

Deno.test("proxy failure: a SOCKS instance that never answers is 504 upstream_timeout", async () => {
  const setup = {
    socks: [{ mode: "hang" as const }],
    egress: () => ({ connect_timeout_ms: 300 }),
    routes: (site: Parameters<typeof apiRoute>[0]) => [apiRoute(site, { attempts: 1 })],
  };
  await withProxyEdge(setup, async (p) => {
    const started = Date.now();
    const response = await p.send({ path: "/api/echo" });
    const elapsed = Date.now() - started;
    failure(response, 504, "upstream_timeout", ports(p));
    assert.ok(elapsed >= 250 && elapsed < 2000, `answered after ${elapsed} ms, want ~300`);
    assert.equal(p.socks[0].accepted, 1);
    await balancedLedger(p.t);
  });
});

Deno.test("proxy failure: SOCKS reply 0x04 is 502 and the backend goes cold after N failures", async () => {
  const setup = {
    socks: [{ mode: "reply" as const, replyCode: 0x04 }],
    egress: () => ({ negative_cache: { failures: 3, ttl_ms: 60_000, when_all_cold: "refuse" } }),
    routes: (site: Parameters<typeof apiRoute>[0]) => [apiRoute(site, { attempts: 1 })],
  };
  await withProxyEdge(setup, async (p) => {
    const key = `http://127.0.0.1:${p.upstream.port}`;
    for (let i = 1; i <= 2; i++) {
      failure(await p.send({ path: "/api/echo" }), 502, "upstream_unreachable", ports(p));
      const egress = await p.egress();
      assert.deepEqual(egress.cold_backends, [
        { backend: key, state: "healthy", consecutive_failures: i, cold_for_ms: 0 },
      ]);
    }
    failure(await p.send({ path: "/api/echo" }), 502, "upstream_unreachable", ports(p));
    const egress = await p.egress();
    assert.equal(egress.cold_backends.length, 1);
    assert.equal(egress.cold_backends[0].backend, key);
    assert.ok(egress.cold_backends[0].cold_for_ms > 0, JSON.stringify(egress.cold_backends));
    // The instance did its job each time: the destination failed, not the SOCKS hop.
    assert.equal(egress.instances[0].failures, 0);
    assert.equal(egress.instances[0].requests, 3);
    assert.equal(p.socks[0].connects.length, 3);
    // Its only backend cold and when_all_cold: refuse, the route's circuit is open: 503 at once,
    // nothing dialled (the default, try, fails open and dials it anyway).
    const open = await p.send({ path: "/api/echo" });
    failure(open, 503, "upstream_circuit_open", ports(p));
    const wait = Number(open.headers["retry-after"]);
    assert.ok(wait >= 59 && wait <= 60, `Retry-After until the backend is tried again: ${wait}`);
    assert.equal(p.socks[0].connects.length, 3, "no attempt was made");
  });
});

Deno.test("proxy failure: upstream headers later than the lane deadline are 504 and cancel the reservation", async () => {
  const setup = {
    edit(config: Record<string, Record<string, Record<string, Record<string, unknown>>>>) {
      config.ledger.lanes.public.deadline_ms = 300;
    },
  };
  await withProxyEdge(setup, async (p) => {
    const before = await p.t.ledger();
    const started = Date.now();
    const response = await p.send({ path: "/api/slow/900" });
    const elapsed = Date.now() - started;
    failure(response, 504, "upstream_timeout", ports(p));
    assert.ok(elapsed >= 250 && elapsed < 800, `answered after ${elapsed} ms, want ~300`);
    const after = await waitFor(() => p.t.ledger(), (l) => l.outstanding === 0);
    assert.equal(after.lanes.public.overload.deadline_exceeded, 1);
    assert.equal(after.cancelled, before.cancelled + 1);
    assert.equal(after.lanes.public.in_use, 0);
    assert.equal(after.completed + after.cancelled, after.admitted);
    // Let the upstream's own timer for /slow run out before the fixtures stop.
    await new Promise((resolve) => setTimeout(resolve, Math.max(0, 950 - elapsed)));
  });
});

Deno.test("proxy failure: an upstream 503 is passed through, not rewritten", async () => {
  await withProxyEdge({}, async (p) => {
    const response = await p.send({ path: "/api/status/503" });
    assert.equal(response.status, 503);
    assert.equal(response.body, "");
    assert.equal(response.headers["content-length"], "0");
    assert.ok(response.headers["x-request-id"]);
    // A 503 is the upstream's answer, delivered: no retry, no failure of the instance.
    assert.equal(p.upstream.seen.length, 1);
    const egress = await p.egress();
    assert.equal(egress.instances[0].failures, 0);
    assert.equal(egress.retries, 0);
    await balancedLedger(p.t);
  });
});

/** Sends GET `path` on a raw connection and closes it after `ms`, without reading an answer. */
async function leaveAfter(p: ProxyEdge, path: string, ms: number): Promise<void> {
  const conn = await Deno.connect({ hostname: "127.0.0.1", port: p.t.ports.public });
  await conn.write(new TextEncoder().encode(`GET ${path} HTTP/1.1\r\nHost: shop.test\r\n\r\n`));
  await new Promise((resolve) => setTimeout(resolve, ms));
  closeQuietly(conn);
}

Deno.test("proxy failure: clients that leave while the upstream thinks charge neither the instance nor the backend", async () => {
  // A breaker that opens at two failures of four, a backend that goes cold at two in a row: before
  // the fix, six clients walking away opened the one and froze the other.
  const egress = () => ({
    breaker: { window: 4, min_samples: 2 },
    negative_cache: { failures: 2, ttl_ms: 60_000 },
  });
  await withProxyEdge({ egress }, async (p) => {
    for (let i = 0; i < 6; i++) await leaveAfter(p, `/api/slow/1500?i=${i}`, 150);
    // Every request reached the upstream before its client left (the upstream's evidence).
    await waitFor(() => Promise.resolve(p.upstream.seen.length), (n) => n >= 6);
    const after = await waitFor(() => p.egress(), (e) => e.instances[0].active === 0);
    assert.equal(after.instances[0].state, "healthy", JSON.stringify(after.instances[0]));
    assert.equal(after.instances[0].failures, 0);
    assert.deepEqual(after.cold_backends, []);
    assert.equal((await p.send({ path: "/api/echo" })).status, 200);
    await new Promise((resolve) => setTimeout(resolve, 1500));
  });
});

Deno.test("proxy failure: requests the deadline gives up on do charge the instance and the backend", async () => {
  const setup = {
    egress: () => ({
      breaker: { window: 4, min_samples: 2 },
      negative_cache: { failures: 2, ttl_ms: 60_000 },
    }),
    edit(config: Record<string, Record<string, Record<string, Record<string, unknown>>>>) {
      config.ledger.lanes.public.deadline_ms = 300;
    },
  };
  await withProxyEdge(setup, async (p) => {
    for (let i = 0; i < 2; i++) {
      failure(await p.send({ path: `/api/slow/900?i=${i}` }), 504, "upstream_timeout", ports(p));
    }
    const after = await waitFor(() => p.egress(), (e) => e.instances[0].failures >= 2);
    assert.equal(after.instances[0].state, "open");
    assert.equal(after.cold_backends.length, 1);
    await new Promise((resolve) => setTimeout(resolve, 900));
  });
});

Deno.test("proxy failure: by default a route whose every backend is cold still tries them (fail open)", async () => {
  const setup = {
    socks: [{ mode: "reply" as const, replyCode: 0x04 }],
    egress: () => ({ negative_cache: { failures: 2, ttl_ms: 60_000 } }),
    routes: (site: Parameters<typeof apiRoute>[0]) => [apiRoute(site, { attempts: 1 })],
  };
  await withProxyEdge(setup, async (p) => {
    for (let i = 0; i < 3; i++) {
      failure(await p.send({ path: "/api/echo" }), 502, "upstream_unreachable", ports(p));
    }
    assert.equal((await p.egress()).cold_backends[0].state, "cold");
    assert.equal(p.socks[0].connects.length, 3, "the cold backend was dialled all the same");
  });
});
