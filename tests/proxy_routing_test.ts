/**
 * Proxy dataplane, routing end to end: path rewrites as the upstream receives them, and route
 * criteria on headers, query and cookies.
 *
 * @module
 */
import assert from "node:assert/strict";
import { json } from "./fixtures/http_client.ts";
import { envelope } from "./fixtures/in_process.ts";
import { type Echo, single, type Site, withProxyEdge } from "./fixtures/proxy_edge.ts";
import { withLegacyHeaders } from "./fixtures/named_headers.ts";

function rewriteRoutes(site: Site): Record<string, unknown>[] {
  const backends = [{ url: site.backend }];
  return [
    {
      name: "strip",
      match: { prefix: "/api/" },
      proxy: { backends, rewrite: { strip_prefix: "/api" } },
    },
    {
      name: "people",
      match: { path: "/users/{id}/profile" },
      proxy: { backends, rewrite: { replace: "/v2/people/{id}" } },
    },
    {
      name: "legacy",
      match: { prefix: "/legacy/" },
      proxy: {
        backends,
        rewrite: { regex: "^/legacy/(\\d+)/(?<rest>.*)$", to: "/new/$1/${rest}" },
      },
    },
    { name: "as-is", match: { prefix: "/plain/" }, proxy: { backends } },
  ];
}

Deno.test("proxy rewrite: strip_prefix, replace with {param} and regex with $1/${name} keep the query", async () => {
  await withProxyEdge({ routes: rewriteRoutes, edit: withLegacyHeaders }, async (p) => {
    const cases: [string, string, string][] = [
      ["/api/echo?q=1", "/echo?q=1", "strip"],
      ["/api/", "/", "strip"],
      ["/users/42/profile?full=yes", "/v2/people/42?full=yes", "people"],
      ["/users/a%20b/profile", "/v2/people/a%20b", "people"],
      ["/legacy/7/docs/index.html?x=%2F", "/new/7/docs/index.html?x=%2F", "legacy"],
      ["/plain/echo?z", "/plain/echo?z", "as-is"],
    ];
    for (const [path, upstreamUrl, route] of cases) {
      const response = await p.send({ path });
      assert.equal(response.status, 200, path);
      const echo = json<Echo>(response);
      assert.equal(echo.url, upstreamUrl, path);
      assert.equal(single(echo.headers, "x-portcullis-route"), route, path);
    }
  });
});

function criteriaRoutes(site: Site): Record<string, unknown>[] {
  const proxy = { backends: [{ url: site.backend }], rewrite: { strip_prefix: "/m" } };
  return [
    {
      name: "beta",
      match: {
        prefix: "/m/",
        headers: { "X-Beta": "on" },
        query: { v: "2" },
        cookies: { session: true },
      },
      proxy,
    },
    { name: "flagged", match: { prefix: "/m/", headers: { "x-flag": true } }, proxy },
  ];
}

Deno.test("proxy route criteria: header, query and cookie conditions are AND-ed", async () => {
  await withProxyEdge({ routes: criteriaRoutes, edit: withLegacyHeaders }, async (p) => {
    const routeOf = async (path: string, headers: [string, string][]) => {
      const response = await p.send({ path, headers });
      if (response.status !== 200) return `${response.status} ${envelope(response).code}`;
      return single(json<Echo>(response).headers, "x-portcullis-route");
    };
    const cookie: [string, string] = ["Cookie", "theme=dark; session=abc"];
    assert.equal(await routeOf("/m/echo?v=2", [["X-Beta", "on"], cookie]), "beta");
    // Header names match in any case; presence (`true`) accepts any value, even an empty one.
    assert.equal(
      await routeOf("/m/echo?a=1&v=2", [["x-beta", "on"], ["Cookie", "session="]]),
      "beta",
    );
    // One condition off and the route is skipped.
    assert.equal(await routeOf("/m/echo?v=2", [["X-Beta", "on"]]), "404 no_route");
    assert.equal(await routeOf("/m/echo?v=2", [["X-Beta", "ON"], cookie]), "404 no_route");
    assert.equal(await routeOf("/m/echo?v=3", [["X-Beta", "on"], cookie]), "404 no_route");
    assert.equal(await routeOf("/m/echo", [["X-Beta", "on"], cookie]), "404 no_route");
    assert.equal(
      await routeOf("/m/echo?v=2", [["X-Beta", "on"], ["Cookie", "sessionx=1"]]),
      "404 no_route",
    );
    // The next candidate with the same prefix is tried when the first one's criteria fail.
    assert.equal(await routeOf("/m/echo?v=3", [["X-Flag", ""], cookie]), "flagged");
    assert.equal(await routeOf("/m/echo", [["X-Flag", "1"]]), "flagged");
  });
});

Deno.test("proxy route criteria: a miss is a 404 no_route envelope that never reaches the upstream", async () => {
  await withProxyEdge({ routes: criteriaRoutes, edit: withLegacyHeaders }, async (p) => {
    const response = await p.send({ path: "/m/echo?v=2", headers: [["X-Beta", "on"]] });
    assert.equal(response.status, 404);
    const error = envelope(response);
    assert.equal(error.code, "no_route");
    assert.equal(error.request_id, response.headers["x-request-id"]);
    assert.equal(p.upstream.seen.length, 0);
    assert.equal(p.socks[0].connects.length, 0);
    const ledger = await p.t.ledger();
    assert.equal(ledger.lanes.public.denied_route, 1);
  });
});
