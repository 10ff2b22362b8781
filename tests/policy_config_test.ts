/**
 * Policy configuration at load: resolution tenant → `globals.yaml` → off, and refusals that name
 * the file, the field and the value.
 *
 * @module
 */
import assert from "node:assert/strict";
import { formatProblem } from "../src/config/problems.ts";
import { compilePolicies } from "../src/policy/policies.ts";
import { loadTenants } from "../src/proxy/tenants.ts";
import { configErrorOf, tenantsDir } from "./fixtures/config_files.ts";

const HOME = "routes:\n  - name: home\n    match: { path: / }\n    respond: { body: home }\n";

/** The formatted problems loading `files` must be refused with. */
async function refused(files: Record<string, string>): Promise<string[]> {
  const dir = await tenantsDir(files);
  const error = await configErrorOf(loadTenants(dir), "loadTenants() accepted bad policies");
  return error.problems.map((p) => formatProblem(p).replace(dir + "/", ""));
}

Deno.test("policies resolve per policy: the tenant's, else the globals', else off", async () => {
  const dir = await tenantsDir({
    "globals.yaml":
      "policies:\n  rate_limit: { per_second: 1, burst: 9 }\n  waf: { mode: dry_run }\n",
    "a.example.yaml": `host: a.example\npolicies:\n  waf: { mode: "off" }\n${HOME}`,
    "b.example.yaml": `host: b.example\n${HOME}`,
  });
  const registry = await loadTenants(dir);
  const a = registry.get("a.example")!.policies;
  const b = registry.get("b.example")!.policies;
  assert.equal(a.rateLimit?.limiter.take("k", 0).limit, 9, "from the globals");
  assert.equal(a.waf, undefined, "the tenant turned the globals' WAF off");
  assert.equal(b.waf?.mode, "dry_run");
  assert.equal(b.caps, undefined, "nobody configured caps: off");
  assert.equal(registry.globalPolicies.rateLimit?.mode, "on");
  assert.deepEqual(registry.tenants.map((t) => t.host), ["a.example", "b.example"]);
});

Deno.test("compilePolicies() with nothing configured is free: no phase runs", () => {
  const policies = compilePolicies(undefined, {});
  assert.equal(policies.any, false);
  assert.equal(policies.strip.size, 0);
});

Deno.test("a bad globals.yaml is refused naming the file, field and value", async () => {
  const problems = await refused({
    "globals.yaml": "policies:\n  rate_limit: { mode: maybe, per_second: 1, burst: 1 }\n",
    "a.example.yaml": `host: a.example\n${HOME}`,
  });
  assert.equal(problems.length, 1);
  assert.match(problems[0], /^globals\.yaml:\d+:\d+: policies\.rate_limit\.mode: .*"maybe"/);
});

Deno.test("tenant policies are validated field by field", async () => {
  const problems = await refused({
    "a.example.yaml": `host: a.example
policies:
  rate_limit: { per_second: 0, burst: 5 }
  caps: { max_headers: 0 }
  blocklist:
    rules:
      - { name: bad, path: "([a-z" }
      - { name: everything }
      - { name: x, path: "^/", action: explode }
  security_headers: { frame_options: ALLOWALL }
  surprise: {}
${HOME}`,
  });
  const fields = problems.map((p) => p.split(": ")[1]);
  assert.deepEqual(
    fields.sort(),
    [
      "policies.blocklist.rules[0].path",
      "policies.blocklist.rules[1]",
      "policies.blocklist.rules[2].action",
      "policies.caps.max_headers",
      "policies.rate_limit.per_second",
      "policies.security_headers.frame_options",
      "policies.surprise",
    ].sort(),
    problems.join("\n"),
  );
  assert.ok(problems.every((p) => p.startsWith("a.example.yaml:")), problems.join("\n"));
  assert.ok(problems.some((p) => p.includes("Not a valid regular expression")));
  assert.ok(problems.some((p) => p.includes("would match every request")));
});

Deno.test("route priority and maintenance are validated", async () => {
  const problems = await refused({
    "a.example.yaml": `host: a.example
routes:
  - name: home
    match: { path: / }
    priority: 11
    maintenance: { retry_after_s: 0 }
    respond: { body: home }
`,
  });
  const fields = problems.map((p) => p.split(": ")[1]).sort();
  assert.deepEqual(fields, ["routes[0].maintenance.retry_after_s", "routes[0].priority"]);
});

Deno.test("globals.yaml is never read as a tenant", async () => {
  const dir = await tenantsDir({ "globals.yaml": "policies:\n  caps: {}\n" });
  const registry = await loadTenants(dir);
  assert.deepEqual(registry.tenants, []);
  assert.equal(registry.globalPolicies.caps?.maxHeaders, 100);
});

Deno.test("compilePolicies() lists the checks on or in dry run, cheapest first, and no others", () => {
  const rules = [{ name: "admin", path: "^/admin", action: "404" as const }];
  const every = compilePolicies({
    waf: { mode: "dry_run", sqli: true, xss: true, traversal: true, headers: [] },
    blocklist: { mode: "on", rules, block_after: 0, window_ms: 60_000 },
    rate_limit: {
      mode: "on",
      per_second: 1,
      burst: 1,
      max_clients: 10,
      block_after: 0,
      headers: false,
    },
    caps: {
      mode: "dry_run",
      max_headers: 10,
      max_header_bytes: 1024,
      max_url_bytes: 1024,
      max_body_bytes: 1024,
    },
    ttl_block: { mode: "on", ttl_ms: 1000, action: "429", max_entries: 10 },
  }, {});
  assert.deepEqual(
    every.checks.map((check) => `${check.phase} ${check.mode}`),
    ["ttl_block on", "caps dry_run", "rate_limit on", "blocklist on", "waf dry_run"],
  );
  const some = compilePolicies({
    waf: { mode: "off", sqli: true, xss: true, traversal: true, headers: [] },
    blocklist: { mode: "on", rules, block_after: 0, window_ms: 60_000 },
  }, {});
  assert.deepEqual(some.checks.map((check) => check.phase), ["blocklist"]);
  assert.deepEqual(compilePolicies(undefined, {}).checks, []);
});
