/**
 * Unit tests for the tenant registry: `loadTenants()` on temp folders and `TenantRegistry` lookup.
 *
 * @module
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { loadTenants } from "../src/proxy/tenants.ts";
import { configErrorOf, tenantsDir } from "./fixtures/config_files.ts";

/** Loads the folder and returns the ConfigError it must raise, with the folder. */
async function refusal(files: Record<string, string>) {
  const dir = await tenantsDir(files);
  const error = await configErrorOf(loadTenants(dir), "loadTenants() accepted a bad tenant set");
  return { dir, error, problems: error.problems };
}

/** One tenant file for `host` with the given routes (YAML list items, already indented). */
function tenant(host: string, routes = "", extra = ""): string {
  return `host: ${host}\n${extra}routes:\n${routes || "  []\n"}`;
}

const HOME = "  - name: home\n    match: { path: / }\n    respond: { body: home }\n";

Deno.test("TenantRegistry.get() finds a tenant by its host and by each alias", async () => {
  const dir = await tenantsDir({
    "demo.example.yaml": tenant("demo.example", HOME, "aliases: [www.demo.example, demo.onion]\n"),
    "other.example.yaml": tenant("other.example"),
  });
  const registry = await loadTenants(dir);
  assert.deepEqual(registry.tenants.map((t) => t.host), ["demo.example", "other.example"]);
  const demo = registry.get("demo.example");
  assert.equal(demo?.file, join(dir, "demo.example.yaml"));
  assert.deepEqual(demo?.names, ["demo.example", "www.demo.example", "demo.onion"]);
  assert.equal(demo?.routeCount, 1);
  assert.equal(registry.get("www.demo.example"), demo);
  assert.equal(registry.get("demo.onion"), demo);
  assert.equal(registry.get("other.example")?.host, "other.example");
  assert.equal(registry.get("unknown.example"), undefined);
  assert.equal(registry.get("DEMO.example"), undefined);
});

Deno.test("loadTenants() fills tenant defaults: enabled, block 404, no aliases", async () => {
  const registry = await loadTenants(await tenantsDir({ "a.example.yaml": "host: a.example\n" }));
  const [t] = registry.tenants;
  assert.deepEqual([t.enabled, t.block, t.names, t.routeCount], [true, 404, ["a.example"], 0]);
});

Deno.test("loadTenants() requires a tenant file to be named <host>.yaml", async () => {
  const { dir, problems } = await refusal({ "demo.yaml": tenant("demo.example") });
  assert.deepEqual(problems, [{
    file: join(dir, "demo.yaml"),
    path: ["host"],
    value: "demo.example",
    message: "A tenant file is named after its host: expected demo.example.yaml",
    at: "1:7",
  }]);
});

Deno.test("loadTenants() accepts the .yml extension", async () => {
  const registry = await loadTenants(await tenantsDir({ "b.example.yml": "host: b.example\n" }));
  assert.equal(registry.get("b.example")?.host, "b.example");
});

Deno.test("loadTenants() refuses a host served by two files, naming both", async () => {
  const { dir, problems, error } = await refusal({
    "a.example.yaml": tenant("a.example", "", "aliases: [shared.example]\n"),
    "b.example.yaml": tenant("b.example", "", "aliases: [shared.example]\n"),
  });
  assert.deepEqual(problems, [{
    file: join(dir, "b.example.yaml"),
    path: ["aliases", 0],
    value: "shared.example",
    message: `Host is already served by ${join(dir, "a.example.yaml")}`,
    at: "2:11",
  }]);
  assert.match(
    error.message,
    /b\.example\.yaml:2:11: aliases\[0\]: Host is already served by .*a\.example\.yaml/,
  );
});

Deno.test("loadTenants() refuses a host that is another file's alias", async () => {
  const { dir, problems } = await refusal({
    "a.example.yaml": tenant("a.example", "", "aliases: [b.example]\n"),
    "b.example.yaml": tenant("b.example"),
  });
  assert.deepEqual(problems.map((p) => [p.file, p.path, p.message]), [[
    join(dir, "b.example.yaml"),
    ["host"],
    `Host is already served by ${join(dir, "a.example.yaml")}`,
  ]]);
});

Deno.test("loadTenants() refuses a host name with a port or capitals", async () => {
  const { problems } = await refusal({ "x.yaml": "host: Demo.Example:80\n" });
  assert.deepEqual(problems.map((p) => [p.path, p.value, p.message]), [[
    ["host"],
    "Demo.Example:80",
    "Expected a lower-case host name without port (e.g. demo.example)",
  ]]);
});

Deno.test("loadTenants() requires exactly one of match.path and match.prefix", async () => {
  const { problems } = await refusal({
    "a.example.yaml": tenant(
      "a.example",
      "  - match: { path: /a, prefix: /a/ }\n    respond: {}\n" +
        "  - match: { methods: [GET] }\n    respond: {}\n",
    ),
  });
  assert.deepEqual(problems.map((p) => [p.path, p.message, p.at]), [
    [["routes", 0, "match"], "Give exactly one of match.path and match.prefix", "3:12"],
    [["routes", 1, "match"], "Give exactly one of match.path and match.prefix", "5:12"],
  ]);
});

Deno.test("loadTenants() locates template syntax errors in match.path", async () => {
  const { problems } = await refusal({
    "a.example.yaml": tenant(
      "a.example",
      '  - match: { path: "/users/{id" }\n    respond: {}\n' +
        '  - match: { path: "/users/x{id}" }\n    respond: {}\n' +
        '  - match: { path: "/a/{id}/b/{id}" }\n    respond: {}\n',
    ),
  });
  assert.deepEqual(problems.map((p) => [p.path.join("."), p.value, p.message]), [
    [
      "routes.0.match.path",
      "/users/{id",
      "A parameter must be a whole segment such as /users/{id}",
    ],
    [
      "routes.1.match.path",
      "/users/x{id}",
      "A parameter must be a whole segment such as /users/{id}",
    ],
    ["routes.2.match.path", "/a/{id}/b/{id}", 'Parameter "{id}" appears twice'],
  ]);
  assert.equal(problems[0].at, "3:20");
});

Deno.test("loadTenants() requires a route's host to be the tenant's host or alias", async () => {
  const route = "  - match: { path: /, host: other.example }\n    respond: {}\n";
  const { problems } = await refusal({
    "a.example.yaml": tenant("a.example", route, "aliases: [www.a.example]\n"),
  });
  assert.deepEqual(problems.map((p) => [p.path.join("."), p.value, p.message]), [[
    "routes.0.match.host",
    "other.example",
    "Route host must be the tenant's host or an alias",
  ]]);
  const ok = await loadTenants(
    await tenantsDir({
      "a.example.yaml": tenant(
        "a.example",
        route.replace("other", "www.a"),
        "aliases: [www.a.example]\n",
      ),
    }),
  );
  assert.equal(
    ok.get("a.example")?.routes.match("GET", "/", "www.a.example")?.route.name,
    "route-0",
  );
  assert.equal(ok.get("a.example")?.routes.match("GET", "/", "a.example"), undefined);
});

Deno.test("loadTenants() requires redirect placeholders to be path parameters", async () => {
  const { problems } = await refusal({
    "a.example.yaml": tenant(
      "a.example",
      '  - match: { path: "/u/{id}" }\n    redirect: { location: "/p/{id}/{tab}" }\n' +
        '  - match: { prefix: "/old/" }\n    redirect: { location: "https://new.example/{id}" }\n',
    ),
  });
  assert.deepEqual(problems.map((p) => [p.path.join("."), p.value, p.message]), [
    ["routes.0.redirect.location", "/p/{id}/{tab}", "Placeholder {tab} is not a path parameter"],
    [
      "routes.1.redirect.location",
      "https://new.example/{id}",
      "Placeholder {id} is not a path parameter",
    ],
  ]);
});

Deno.test("loadTenants() names every problem of a proxy action", async () => {
  const { problems } = await refusal({
    "a.example.yaml": tenant(
      "a.example",
      "  - match: { prefix: / }\n    proxy: { pool: tor }\n" +
        "  - match: { prefix: /b }\n    proxy: { backends: [{ url: 'ftp://x.onion' }] }\n" +
        "  - match: { prefix: /c }\n    proxy: { backends: [{ url: 'http://x.onion/base' }] }\n" +
        "  - match: { prefix: /d }\n    proxy:\n      backends: [{ url: 'http://x.onion' }]\n" +
        "      rewrite: { strip_prefix: /d, replace: /e }\n" +
        "  - match: { prefix: /f }\n    proxy:\n      backends: [{ url: 'http://x.onion' }]\n" +
        "      rewrite: { regex: '^/f/(.*)$', to: '/$2' }\n",
    ),
  });
  const backendUrl = "Expected http(s)://host[:port] with no path (use rewrite to change paths)";
  assert.deepEqual(problems.map((p) => [p.path.join("."), p.message]), [
    ["routes.0.proxy.backends", "Required field is missing"],
    ["routes.0.proxy.pool", "Unknown field (a typo? unknown fields are refused, never ignored)"],
    ["routes.1.proxy.backends.0.url", backendUrl],
    ["routes.2.proxy.backends.0.url", backendUrl],
  ]);
  const second = await refusal({
    "a.example.yaml": tenant(
      "a.example",
      "  - match: { prefix: /d }\n    proxy:\n      backends: [{ url: 'http://x.onion' }]\n" +
        "      rewrite: { strip_prefix: /d, replace: /e }\n" +
        "  - match: { prefix: /f }\n    proxy:\n      backends: [{ url: 'http://x.onion' }]\n" +
        "      rewrite: { regex: '^/f/(.*)$', to: '/$2' }\n",
    ),
  });
  assert.deepEqual(second.problems.map((p) => [p.path.join("."), p.message]), [
    ["routes.0.proxy.rewrite", "Give exactly one of strip_prefix, replace and regex"],
    ["routes.1.proxy.rewrite", "Group $2 is not in the regex"],
  ]);
});

Deno.test("loadTenants() requires exactly one action per route", async () => {
  const { problems } = await refusal({
    "a.example.yaml": tenant(
      "a.example",
      "  - match: { path: /none }\n" +
        "  - match: { path: /both }\n    respond: {}\n    redirect: { location: /x }\n",
    ),
  });
  assert.deepEqual(problems.map((p) => [p.path.join("."), p.message]), [
    ["routes.0", "Give exactly one action: respond, redirect or proxy"],
    ["routes.1", "Give exactly one action: respond, redirect or proxy"],
  ]);
});
