/**
 * Per-attempt limits: `connect_ms` bounds the time to a usable connection (here a SOCKS instance
 * that never answers the CONNECT), `first_byte_ms` the time to the response head (a backend that
 * thinks too long). Either one fails that attempt early enough for the next to finish inside the
 * lane deadline; a request that may not be sent twice is not sent twice. And `max_pending`: a
 * backend holding that many requests is passed over, and with none left the answer is 503 at once.
 *
 * @module
 */
import assert from "node:assert/strict";
import { json } from "./fixtures/http_client.ts";
import { apiRoute, type Echo, failure, withProxyEdge } from "./fixtures/proxy_edge.ts";
import { waitFor } from "./fixtures/in_process.ts";

Deno.test("proxy limits: connect_ms gives up on a silent SOCKS instance and the next one serves", async () => {
  await withProxyEdge({
    socks: [{ mode: "hang" }, {}],
    routes: (site) => [apiRoute(site, { connect_ms: 150, attempts: 2 })],
  }, async (p) => {
    const started = performance.now();
    const response = await p.send({ method: "POST", path: "/api/echo", body: "once" });
    assert.equal(response.status, 200, response.body);
    assert.equal(json<Echo>(response).body, "once", "nothing reached the silent way: POST goes on");
    assert.deepEqual(p.upstream.seen.map((r) => r.body), ["once"]);
    const egress = await p.egress();
    assert.equal(egress.instances[0].failures, 1, "the silent instance is charged");
    // The egress's own connect timeout is 10 s: the route's 150 ms decided, not it.
    assert.ok(performance.now() - started < 5000, "well inside the lane deadline");
  });
});

Deno.test("proxy limits: first_byte_ms gives up on a slow backend; a GET goes to the next, a POST does not", async () => {
  await withProxyEdge({
    routes: (site) => [apiRoute(site, { first_byte_ms: 200, attempts: 2 })],
  }, async (p) => {
    // Both attempts reach the one slow upstream: each is cut at 200 ms, and the GET is retried.
    failure(await p.send({ path: "/api/slow/2000" }), 504, "upstream_timeout");
    assert.equal(p.upstream.seen.length, 2, "a GET may be sent again");
    const line = p.t.lines.find((l) => l.includes("upstream_timeout after 2 attempt"));
    assert.match(line ?? "", /first_byte_ms \(200 ms\)/);
  });
  await withProxyEdge({
    routes: (site) => [apiRoute(site, { first_byte_ms: 200, attempts: 2 })],
  }, async (p) => {
    failure(
      await p.send({ method: "POST", path: "/api/slow/2000", body: "x" }),
      504,
      "upstream_timeout",
    );
    assert.equal(p.upstream.seen.length, 1, "a POST that went out is never sent again");
    // A fast answer is untouched by the limit.
    const fine = await p.send({ path: "/api/echo" });
    assert.equal(fine.status, 200, fine.body);
  });
});

Deno.test("proxy limits: max_pending passes a full backend over, and with none left answers 503 at once", async () => {
  await withProxyEdge({
    routes: (site) => [{
      name: "api",
      match: { prefix: "/api/" },
      proxy: {
        backends: [{ url: site.backend, max_pending: 1 }],
        rewrite: { strip_prefix: "/api" },
      },
    }],
  }, async (p) => {
    const slow = p.send({ path: "/api/slow/1500" });
    await waitFor(() => p.upstream.seen.length, (n) => n === 1);
    const refused = await p.send({ path: "/api/echo" });
    failure(refused, 503, "upstream_saturated");
    assert.equal(refused.headers["retry-after"], "1");
    assert.equal(p.upstream.seen.length, 1, "the refused request never reached the backend");
    assert.ok(
      p.t.lines.some((l) => /upstream_saturated: every backend holds its max_pending/.test(l)),
    );
    assert.equal((await slow).status, 200);
    const after = await p.send({ path: "/api/echo" });
    assert.equal(after.status, 200, "the slot came back when the slow answer ended");
  });
});
