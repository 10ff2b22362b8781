/**
 * The tenant policy layer end to end, on an in-process edge with a recording upstream: rate limit
 * (429, `Retry-After`, both spellings of the rate headers, unrouted traffic counted), dry run
 * (traffic served, counter moving, live deny winning), caps, WAF, blocklist rules and the TTL
 * blocklist, security headers, globals fallback, maintenance and priority shedding.
 *
 * @module
 */
import assert from "node:assert/strict";
import { exchange, request } from "./fixtures/http_client.ts";
import {
  apiRoute,
  failure,
  type ProxyEdge,
  rawConnection,
  SHOP,
  withProxyEdge,
} from "./fixtures/proxy_edge.ts";
import type { Site } from "./fixtures/proxy_edge.ts";
import { readResponse } from "./fixtures/in_process.ts";

/** The `/metrics` sample value of `name{labels}`, or undefined when absent. */
async function metric(p: ProxyEdge, series: string): Promise<number | undefined> {
  const response = await request(p.t.ports.local_health, { path: "/metrics" });
  const line = response.body.split("\n").find((l) => l.startsWith(series + " "));
  return line === undefined ? undefined : Number(line.slice(series.length + 1));
}

/** A respond route that sets response headers, beside the default proxy route. */
function withPage(site: Site, headers: Record<string, string> = {}) {
  return [
    apiRoute(site),
    { name: "page", match: { path: "/page" }, respond: { status: 200, headers, body: "page" } },
  ];
}

Deno.test("rate limit: a 429 carries Retry-After and both spellings of the rate headers", async () => {
  await withProxyEdge({
    policies: { rate_limit: { per_second: 0.5, burst: 2, headers: true } },
  }, async (p) => {
    const first = await p.send({ path: "/api/echo" });
    assert.equal(first.status, 200);
    assert.equal(first.headers["ratelimit-limit"], "2");
    assert.equal(first.headers["ratelimit-remaining"], "1");
    assert.equal(first.headers["x-ratelimit-limit"], "2");
    assert.equal(first.headers["x-ratelimit-remaining"], "1");
    const second = await p.send({ path: "/api/echo" });
    assert.equal(second.status, 200);
    assert.equal(second.headers["ratelimit-remaining"], "0");

    const denied = await p.send({ path: "/api/echo" });
    failure(denied, 429, "rate_limited");
    // Two seconds per token: the wait is whole seconds and at least one.
    assert.equal(denied.headers["retry-after"], "2");
    assert.equal(denied.headers["ratelimit-limit"], "2");
    assert.equal(denied.headers["ratelimit-remaining"], "0");
    assert.ok(Number(denied.headers["ratelimit-reset"]) >= 1);
    const epoch = Number(denied.headers["x-ratelimit-reset"]);
    assert.ok(Math.abs(epoch - Date.now() / 1000) < 10, `x-ratelimit-reset ${epoch} is an epoch`);
    assert.equal(p.upstream.seen.length, 2, "the denied request never reached the upstream");
    assert.equal(await metric(p, 'portcullis_policy_denied_total{phase="rate_limit"}'), 1);
  });
});

Deno.test("rate limit: the gateway replaces rate headers set by the route", async () => {
  await withProxyEdge({
    policies: { rate_limit: { per_second: 10, burst: 5, headers: true } },
    routes: (site) => withPage(site, { "RateLimit-Limit": "999", "X-RateLimit-Remaining": "999" }),
  }, async (p) => {
    const response = await p.send({ path: "/page" });
    assert.equal(response.status, 200);
    // Repeated headers would read "999, 5": exactly one value each, the gateway's.
    assert.equal(response.headers["ratelimit-limit"], "5");
    assert.equal(response.headers["x-ratelimit-remaining"], "4");
  });
});

Deno.test("rate limit: unrouted requests (404 and 421) spend the same budget", async () => {
  await withProxyEdge({
    policies: { rate_limit: { per_second: 0.2, burst: 2 } },
    files: { "globals.yaml": "policies:\n  rate_limit: { per_second: 0.2, burst: 1 }\n" },
  }, async (p) => {
    failure(await p.send({ path: "/nowhere" }), 404, "no_route");
    failure(await p.send({ path: "/nowhere" }), 404, "no_route");
    const denied = await p.send({ path: "/api/echo" });
    failure(denied, 429, "rate_limited");
    assert.equal(denied.headers["retry-after"], "5");
    assert.equal(p.upstream.seen.length, 0);

    // Unknown hosts are limited by the globals' policy.
    const stranger = [["Host", "unknown.test"]] as [string, string][];
    failure(await p.send({ path: "/", headers: stranger }), 421, "misdirected_request");
    failure(await p.send({ path: "/", headers: stranger }), 429, "rate_limited");
  });
});

Deno.test("dry run: the tenant's traffic is served while the counter moves", async () => {
  await withProxyEdge({
    policies: { rate_limit: { mode: "dry_run", per_second: 0.1, burst: 1, headers: true } },
  }, async (p) => {
    for (let i = 0; i < 4; i++) {
      const response = await p.send({ path: "/api/echo" });
      assert.equal(response.status, 200);
      assert.equal(response.headers["ratelimit-limit"], undefined, "dry run changes no header");
    }
    assert.equal(p.upstream.seen.length, 4);
    assert.equal(
      await metric(p, 'portcullis_policy_dry_run_total{phase="rate_limit",route="api"}'),
      3,
    );
    const lines = p.t.lines.filter((l) => l.includes('"policy_dry_run"')).map((l) => JSON.parse(l));
    assert.equal(lines.length, 3);
    assert.deepEqual(
      { phase: lines[0].phase, would: lines[0].would, route: lines[0].route },
      { phase: "rate_limit", would: 429, route: "api" },
    );
  });
});

Deno.test("dry run: a WAF in dry run forwards the attack it names in the log", async () => {
  await withProxyEdge({ policies: { waf: { mode: "dry_run" } } }, async (p) => {
    const response = await p.send({ path: "/api/items?id=1%20UNION%20SELECT%20pw%20FROM%20users" });
    assert.equal(response.status, 200);
    assert.equal(p.upstream.seen.length, 1);
    assert.equal(await metric(p, 'portcullis_policy_dry_run_total{phase="waf",route="api"}'), 1);
    const line = p.t.lines.find((l) => l.includes('"policy_dry_run"'));
    assert.equal(JSON.parse(line ?? "{}").reason, "sql_injection in query (sqli.union_select)");
  });
});

Deno.test("dry run: a live deny wins over a dry one", async () => {
  await withProxyEdge({
    policies: {
      rate_limit: { mode: "dry_run", per_second: 0.1, burst: 1 },
      blocklist: { rules: [{ name: "no-admin", path: "^/api/admin", action: "404" }] },
    },
  }, async (p) => {
    failure(await p.send({ path: "/api/admin" }), 404, "no_route");
    // The rate limit would refuse this one (dry), and the blocklist does (live): 404, not 429.
    const response = await p.send({ path: "/api/admin" });
    failure(response, 404, "no_route");
    assert.equal(response.headers["retry-after"], undefined);
    assert.equal(p.upstream.heads.length, 0);
    assert.equal(
      await metric(p, 'portcullis_policy_dry_run_total{phase="rate_limit",route="api"}'),
      1,
    );
    assert.equal(await metric(p, 'portcullis_policy_denied_total{phase="blocklist"}'), 2);
  });
});

Deno.test("caps: header count, header bytes, URL length and declared body", async () => {
  await withProxyEdge({
    policies: {
      caps: { max_headers: 10, max_header_bytes: 600, max_url_bytes: 64, max_body_bytes: 16 },
    },
  }, async (p) => {
    const many = Array.from({ length: 12 }, (_, i) => [`X-H${i}`, "v"] as [string, string]);
    failure(await p.send({ path: "/api/echo", headers: many }), 431, "header_fields_too_large");
    const big = [["X-Big", "b".repeat(700)]] as [string, string][];
    failure(await p.send({ path: "/api/echo", headers: big }), 431, "header_fields_too_large");
    failure(await p.send({ path: `/api/${"u".repeat(80)}` }), 414, "uri_too_long");
    const body = "0123456789abcdefXYZ";
    failure(await p.send({ method: "POST", path: "/api/echo", body }), 413, "payload_too_large");
    assert.equal(p.upstream.heads.length, 0, "nothing refused reached the upstream");

    const fine = await p.send({ method: "POST", path: "/api/echo", body: "0123456789" });
    assert.equal(fine.status, 200);
    assert.equal(p.upstream.seen[0].body, "0123456789");
  });
});

Deno.test("caps: a chunked body over the limit is cut off mid-stream with a 413", async () => {
  await withProxyEdge({ policies: { caps: { max_body_bytes: 1000 } } }, async (p) => {
    const { conn, close } = await rawConnection(p);
    try {
      const head = `POST /api/echo HTTP/1.1\r\nHost: ${SHOP}\r\nTransfer-Encoding: chunked\r\n\r\n`;
      const chunk = `200\r\n${"c".repeat(512)}\r\n`;
      const encoder = new TextEncoder();
      await conn.write(encoder.encode(head + chunk));
      await new Promise((resolve) => setTimeout(resolve, 100));
      // The second chunk crosses 1000 bytes; the last chunk is never sent.
      await conn.write(encoder.encode(chunk + chunk));
      const response = await readResponse(conn);
      failure(response, 413, "payload_too_large");
      assert.equal(response.headers.connection, "close");
    } finally {
      close();
    }
    assert.equal(p.upstream.seen.length, 0, "the upstream never received a complete body");
  });
});

Deno.test("waf: attacks are refused with the envelope and named in the log; benign passes", async () => {
  await withProxyEdge({ policies: { waf: {} } }, async (p) => {
    const attack = await p.send({
      path: "/api/items?id=1%20UNION%20SELECT%20password%20FROM%20users",
    });
    const error = failure(attack, 403, "blocked");
    const line = p.t.lines.find((l) => l.includes(error.request_id));
    assert.match(line ?? "", /policy waf: .*sql_injection in query \(sqli\.[a-z_]+\)/);
    failure(
      await p.send({ path: "/api/search?q=%3Cscript%3Ealert(1)%3C/script%3E" }),
      403,
      "blocked",
    );
    failure(await p.send({ path: "/api/files/%252e%252e/%252e%252e/etc/passwd" }), 403, "blocked");
    failure(
      await p.send({ path: "/api/x", headers: [["User-Agent", "' OR '1'='1"]] }),
      403,
      "blocked",
    );
    assert.equal(p.upstream.heads.length, 0);

    const benign = await p.send({ path: "/api/search?q=union+station+timetable&sort=-date" });
    assert.equal(benign.status, 200);
    assert.equal(p.upstream.seen.length, 1);
  });
});

Deno.test("blocklist: rule actions 404, 429 and drop", async () => {
  await withProxyEdge({
    policies: {
      blocklist: {
        rules: [
          { name: "admin", path: "^/api/admin", action: "404" },
          {
            name: "scanner",
            header: { name: "User-Agent", pattern: "^[Ss]qlmap/" },
            action: "drop",
          },
          { name: "greedy", path: "^/api/export", action: "429" },
        ],
      },
    },
  }, async (p) => {
    failure(await p.send({ path: "/api/admin/users" }), 404, "no_route");
    failure(await p.send({ path: "/api/export" }), 429, "rate_limited");
    const wire = `GET /api/echo HTTP/1.1\r\nHost: ${SHOP}\r\nUser-Agent: sqlmap/1.7\r\n\r\n`;
    assert.equal(await exchange(p.t.ports.public, wire, 3000), "", "dropped without a response");
    assert.equal(p.upstream.heads.length, 0);
    assert.equal((await p.send({ path: "/api/echo" })).status, 200);
  });
});

Deno.test("blocklist: repeated matches put the client on the TTL blocklist, until it expires", async () => {
  await withProxyEdge({
    policies: {
      blocklist: {
        rules: [{ name: "probe", path: "^/api/wp-login", action: "404" }],
        block_after: 2,
      },
      ttl_block: { ttl_ms: 400, action: "429" },
    },
  }, async (p) => {
    failure(await p.send({ path: "/api/wp-login.php" }), 404, "no_route");
    failure(await p.send({ path: "/api/wp-login.php" }), 404, "no_route");
    // The client is now blocked everywhere on this tenant.
    failure(await p.send({ path: "/api/echo" }), 429, "rate_limited");
    assert.equal(p.upstream.heads.length, 0);
    await new Promise((resolve) => setTimeout(resolve, 500));
    assert.equal((await p.send({ path: "/api/echo" })).status, 200);
    assert.equal(await metric(p, 'portcullis_policy_denied_total{phase="ttl_block"}'), 1);
  });
});

Deno.test("rate limit exhaustion writes the client into the TTL blocklist", async () => {
  await withProxyEdge({
    policies: {
      rate_limit: { per_second: 100, burst: 1, block_after: 2 },
      ttl_block: { ttl_ms: 60_000, action: "404" },
    },
  }, async (p) => {
    assert.equal((await p.send({ path: "/api/echo" })).status, 200);
    // Back to back: the next two are denied (the bucket refills every 10 ms, so send at once).
    const burst = await Promise.all([1, 2, 3, 4].map(() => p.send({ path: "/api/echo" })));
    const statuses = burst.map((r) => r.status);
    assert.ok(statuses.includes(429), `expected 429s in ${statuses}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
    // Tokens are back, but the address is blocked: the TTL action answers.
    failure(await p.send({ path: "/api/echo" }), 404, "no_route");
  });
});

Deno.test("security headers: set on every reply, replacing and removing route values", async () => {
  await withProxyEdge({
    policies: {
      security_headers: {
        frame_options: "SAMEORIGIN",
        add: { "Permissions-Policy": "camera=()" },
        remove: ["X-Powered-By"],
      },
    },
    routes: (site) =>
      withPage(site, { "X-Frame-Options": "ALLOWALL", "X-Powered-By": "php", "X-Kept": "yes" }),
  }, async (p) => {
    for (const path of ["/page", "/api/echo", "/missing"]) {
      const response = await p.send({ path });
      // Plain HTTP: never Strict-Transport-Security (RFC 6797 §7.2; TLS: tls_termination_test.ts).
      assert.equal(response.headers["strict-transport-security"], undefined);
      assert.equal(response.headers["x-content-type-options"], "nosniff");
      assert.equal(response.headers["x-frame-options"], "SAMEORIGIN", path);
      assert.equal(response.headers["referrer-policy"], "no-referrer");
      assert.equal(response.headers["permissions-policy"], "camera=()");
      assert.equal(response.headers["x-powered-by"], undefined);
    }
    const page = await p.send({ path: "/page" });
    assert.equal(page.headers["x-kept"], "yes");
  });
});

Deno.test("globals.yaml is the default; a tenant's own policy wins; off costs nothing", async () => {
  await withProxyEdge({
    policies: { security_headers: { mode: "off" } },
    files: {
      "globals.yaml":
        "policies:\n  security_headers: {}\n  rate_limit: { per_second: 50, burst: 7, headers: true }\n",
    },
  }, async (p) => {
    const response = await p.send({ path: "/api/echo" });
    assert.equal(response.status, 200);
    assert.equal(response.headers["ratelimit-limit"], "7", "rate limit from the globals");
    assert.equal(response.headers["x-frame-options"], undefined, "the tenant turned headers off");
  });
});

Deno.test("maintenance: 503 with Retry-After and the envelope; health paths unaffected", async () => {
  await withProxyEdge({
    lanes: ["public", "local_health", "provider_health"],
    routes: (site) => [apiRoute(site, {}), {
      name: "checkout",
      match: { prefix: "/checkout" },
      maintenance: { retry_after_s: 300 },
      proxy: { backends: [{ url: site.backend }] },
    }],
  }, async (p) => {
    const response = await p.send({ path: "/checkout/pay" });
    failure(response, 503, "maintenance");
    assert.equal(response.headers["retry-after"], "300");
    assert.equal(p.upstream.heads.length, 0);
    assert.equal((await p.send({ path: "/api/echo" })).status, 200);
    assert.equal((await request(p.t.ports.public, { path: "/healthz" })).status, 200);
    assert.equal((await request(p.t.ports.local_health, { path: "/healthz" })).status, 200);
    assert.equal((await request(p.t.ports.provider_health, { path: "/healthz" })).status, 200);
  });
});

Deno.test("maintenance answers before the policies: it spends no rate budget", async () => {
  await withProxyEdge({
    policies: { rate_limit: { per_second: 0.1, burst: 2, headers: true } },
    routes: (site) => [apiRoute(site, {}), {
      name: "checkout",
      match: { prefix: "/checkout" },
      maintenance: { retry_after_s: 60 },
      proxy: { backends: [{ url: site.backend }] },
    }],
  }, async (p) => {
    // Five maintenance answers: more than the burst, none of them a 429.
    for (let i = 0; i < 5; i++) {
      const response = await p.send({ path: "/checkout/pay" });
      failure(response, 503, "maintenance");
      assert.equal(response.headers["ratelimit-remaining"], undefined, "no rate check ran");
    }
    const served = await p.send({ path: "/api/echo" });
    assert.equal(served.status, 200);
    assert.equal(served.headers["ratelimit-remaining"], "1", "the whole burst was still there");
    assert.equal(await metric(p, 'portcullis_policy_denied_total{phase="rate_limit"}'), undefined);
    assert.equal(p.upstream.seen.length, 1);
  });
});

Deno.test("priority shedding: low priority is shed from the reserved top slots, high is served", async () => {
  await withProxyEdge({
    routes: (site) => [
      apiRoute(site),
      {
        name: "login",
        priority: 9,
        match: { prefix: "/login" },
        proxy: { backends: [{ url: site.backend }], rewrite: { strip_prefix: "/login" } },
      },
    ],
    // Public ceiling 4 (8 slots less local_health's 4), so the default priority reserve is 1.
    edit: (config) => config.ledger.application_slots = 8,
  }, async (p) => {
    const slow = [1, 2, 3].map(() => p.send({ path: "/api/slow/1500" }));
    await new Promise((resolve) => setTimeout(resolve, 300));
    const shed = await p.send({ path: "/api/echo" });
    failure(shed, 503, "priority_shed");
    assert.equal(shed.headers["retry-after"], undefined, "a shed carries no Retry-After");
    const high = await p.send({ path: "/login/echo" });
    assert.equal(high.status, 200);
    for (const response of await Promise.all(slow)) assert.equal(response.status, 200);
    const ledger = await p.t.ledger();
    assert.equal(ledger.lanes.public.priority_reserve, 1);
    assert.equal(ledger.lanes.public.overload.priority_shed, 1);
    assert.deepEqual(p.upstream.heads.filter((h) => h === "GET /echo").length, 1);
  });
});

Deno.test("security and rate headers ride on the deadline's 504 and on upstream failures", async () => {
  await withProxyEdge({
    policies: {
      security_headers: {},
      rate_limit: { per_second: 10, burst: 10, headers: true },
    },
    edit: (config) => config.ledger.lanes.public.deadline_ms = 500,
    routes: (site) => [apiRoute(site), {
      name: "dead",
      match: { prefix: "/dead/" },
      proxy: { backends: [{ url: "http://127.0.0.1:1" }] },
    }],
    egress: () => ({ direct: ["127.0.0.1:1"] }),
  }, async (p) => {
    const slow = await p.send({ path: "/api/slow/2000" });
    failure(slow, 504, "upstream_timeout");
    assert.equal(slow.headers["x-frame-options"], "DENY");
    assert.equal(slow.headers["ratelimit-limit"], "10");
    const dead = await p.send({ path: "/dead/x" });
    failure(dead, 502, "upstream_unreachable");
    assert.equal(dead.headers["x-content-type-options"], "nosniff");
    // Half a second passed since the first request: its token may be back.
    assert.ok(["8", "9"].includes(dead.headers["ratelimit-remaining"]));
  });
});
