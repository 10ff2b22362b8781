/**
 * The rate limit's reply fields are the operator's to send: by default no reply carries
 * `RateLimit-*` or `X-RateLimit-*` (the pair, with its epoch reset, marks the software, and with a
 * fleet store `remaining` links the edges that share it) while a denial still carries
 * `Retry-After`; `rate_limit.headers: true` sends both spellings, and `security_headers.remove`
 * drops any it lists. The 421 of an unknown host runs the globals' policies only: it never carries
 * a tenant's headers.
 *
 * @module
 */
import assert from "node:assert/strict";
import { failure, withProxyEdge } from "./fixtures/proxy_edge.ts";

const RATE_FIELDS = [
  "ratelimit-limit",
  "ratelimit-remaining",
  "ratelimit-reset",
  "x-ratelimit-limit",
  "x-ratelimit-remaining",
  "x-ratelimit-reset",
];

/** The rate fields a reply carries (header names are lower-cased by the parser). */
function rateFields(headers: Record<string, string>): string[] {
  return RATE_FIELDS.filter((name) => headers[name] !== undefined);
}

const STRANGER: [string, string][] = [["Host", "unknown.test"]];

Deno.test("rate headers: off by default on a 200, a 404, an unknown host's 421 and the 429, which keeps Retry-After", async () => {
  await withProxyEdge({
    policies: { rate_limit: { per_second: 0.2, burst: 2 } },
    files: { "globals.yaml": "policies:\n  rate_limit: { per_second: 0.2, burst: 1 }\n" },
  }, async (p) => {
    const served = await p.send({ path: "/api/echo" });
    assert.equal(served.status, 200);
    assert.deepEqual(rateFields(served.headers), []);
    const unrouted = await p.send({ path: "/nowhere" });
    failure(unrouted, 404, "no_route");
    assert.deepEqual(rateFields(unrouted.headers), []);
    const denied = await p.send({ path: "/api/echo" });
    failure(denied, 429, "rate_limited");
    assert.deepEqual(rateFields(denied.headers), []);
    assert.equal(denied.headers["retry-after"], "5", "a denial still says when to retry");
    const misdirected = await p.send({ path: "/", headers: STRANGER });
    failure(misdirected, 421, "misdirected_request");
    assert.deepEqual(rateFields(misdirected.headers), []);
    const strangerDenied = await p.send({ path: "/", headers: STRANGER });
    failure(strangerDenied, 429, "rate_limited");
    assert.deepEqual(rateFields(strangerDenied.headers), []);
  });
});

Deno.test("rate headers: headers: true sends both spellings, less what security_headers.remove lists", async () => {
  await withProxyEdge({
    policies: {
      rate_limit: { per_second: 1, burst: 5, headers: true },
      security_headers: { remove: ["RateLimit-Remaining", "x-ratelimit-remaining"] },
    },
    files: {
      "globals.yaml": "policies:\n  rate_limit: { per_second: 1, burst: 3, headers: true }\n",
    },
  }, async (p) => {
    const served = await p.send({ path: "/api/echo" });
    assert.equal(served.status, 200);
    assert.deepEqual(rateFields(served.headers), [
      "ratelimit-limit",
      "ratelimit-reset",
      "x-ratelimit-limit",
      "x-ratelimit-reset",
    ]);
    assert.equal(served.headers["ratelimit-limit"], "5");
    // The globals send them all; the tenant's removal is the tenant's alone.
    const misdirected = await p.send({ path: "/", headers: STRANGER });
    failure(misdirected, 421, "misdirected_request");
    assert.deepEqual(rateFields(misdirected.headers), RATE_FIELDS);
    assert.equal(
      misdirected.headers["ratelimit-limit"],
      "3",
      "the globals' limit, not the tenant's",
    );
    assert.equal(misdirected.headers["ratelimit-remaining"], "2");
  });
});

Deno.test("rate headers: an unknown host's 421 carries none of a tenant's policy headers", async () => {
  await withProxyEdge({
    policies: {
      rate_limit: { per_second: 1, burst: 5, headers: true },
      security_headers: { add: { "x-tenant-mark": "shop" } },
    },
  }, async (p) => {
    const served = await p.send({ path: "/api/echo" });
    assert.equal(served.headers["x-tenant-mark"], "shop");
    assert.equal(served.headers["x-frame-options"], "DENY");
    assert.equal(served.headers["ratelimit-limit"], "5");
    const misdirected = await p.send({ path: "/", headers: STRANGER });
    failure(misdirected, 421, "misdirected_request");
    for (const name of ["x-tenant-mark", "x-frame-options", "x-content-type-options"]) {
      assert.equal(misdirected.headers[name], undefined, name);
    }
    assert.deepEqual(rateFields(misdirected.headers), []);
  });
});
