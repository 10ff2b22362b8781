/**
 * Unit tests for the bootstrap config's `egress` section and `trusted_proxies`: defaults, field
 * errors from `loadConfig()`, and the cross-field checks `planEdge()` adds (breaker window, and a
 * way out for every proxy backend).
 *
 * @module
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { LANES } from "../lanes/mod.ts";
import { loadConfig } from "../src/config/load.ts";
import type { ConfigError, ConfigProblem } from "../src/config/problems.ts";
import { planEdge } from "../src/edge/plan.ts";
import { egressSettings } from "../src/egress/settings.ts";
import { configErrorOf, MINIMAL, writeConfigText } from "./fixtures/config_files.ts";

/** Loads MINIMAL plus `extra` and returns the ConfigError it must raise. */
async function problemsOf(extra: string): Promise<{ file: string; error: ConfigError }> {
  const file = await writeConfigText(MINIMAL + extra);
  const error = await configErrorOf(loadConfig(file), "loadConfig() accepted a bad config");
  return { file, error };
}

/** The problems, reduced to the fields a test compares. */
function brief(problems: readonly ConfigProblem[]) {
  return problems.map((p) => ({ path: p.path.join("/"), message: p.message, value: p.value }));
}

/** A proxy tenant whose second route has the backends given (the first route only responds). */
function proxyTenant(...urls: string[]): string {
  return `host: shop.example
routes:
  - { name: home, match: { path: / }, respond: { body: hi } }
  - name: api
    match: { prefix: /api/ }
    proxy:
      backends:
${urls.map((url) => `        - { url: "${url}" }`).join("\n")}
`;
}

/** Writes MINIMAL plus `extra` and the tenant; returns the config file and the tenant file. */
async function writeSetup(extra: string, tenant: string) {
  const file = await writeConfigText(MINIMAL + extra);
  const tenantFile = join(file, "..", "tenants", "shop.example.yaml");
  await Deno.mkdir(join(file, "..", "tenants"));
  await Deno.writeTextFile(tenantFile, tenant);
  return { file, tenantFile };
}

async function planOf(extra: string, tenant: string) {
  const { file } = await writeSetup(extra, tenant);
  return planEdge(await loadConfig(file), LANES);
}

Deno.test("loadConfig() fills every egress default and trusts no proxy by default", async () => {
  const config = await loadConfig(await writeConfigText(MINIMAL));
  assert.deepEqual(config.trustedProxies, []);
  assert.deepEqual(config.egress, {
    socks: [],
    direct: [],
    allow_private: [],
    connect_timeout_ms: 10_000,
    body_idle_ms: 60_000,
    idle_socket_ms: 30_000,
    owned_reads: true,
    reuse_settle_ms: 10,
    probe_interval_ms: 30_000,
    breaker: { window: 20, min_samples: 10, failure_ratio: 0.5 },
    negative_cache: { failures: 3, ttl_ms: 30_000, when_all_cold: "try" },
    retry: {
      budget_ratio: 0.2,
      budget_min: 10,
      window_ms: 10_000,
      backoff_base_ms: 25,
      backoff_cap_ms: 250,
    },
  });
});

Deno.test("egressSettings() maps the defaults onto the egress's own names", async () => {
  const config = await loadConfig(await writeConfigText(MINIMAL));
  const settings = egressSettings(config.egress);
  assert.equal(settings.connectTimeoutMs, 10_000);
  assert.equal(settings.bodyIdleMs, 60_000);
  assert.equal(settings.idleSocketMs, 30_000);
  assert.deepEqual(settings.breaker, {
    window: 20,
    minSamples: 10,
    failureRatio: 0.5,
    probeIntervalMs: 30_000,
  });
  assert.deepEqual(settings.negativeCache, { failures: 3, ttlMs: 30_000, whenAllCold: "try" });
  assert.deepEqual(settings.retryBudget, { ratio: 0.2, minRetries: 10, windowMs: 10_000 });
  assert.deepEqual(settings.backoff, { baseMs: 25, capMs: 250 });
});

Deno.test("loadConfig() keeps given egress values and defaults the rest of a section", async () => {
  const config = await loadConfig(
    await writeConfigText(
      `${MINIMAL}trusted_proxies: ["10.0.0.0/8", "::1"]\negress:\n` +
        '  socks: [{ hostname: 127.0.0.1, port: 9050 }, { hostname: "::1", port: 9051 }]\n' +
        '  direct: ["10.0.0.5:8080", "[::1]:8081"]\n' +
        "  breaker: { window: 5, min_samples: 5 }\n",
    ),
  );
  assert.deepEqual(config.trustedProxies, ["10.0.0.0/8", "::1"]);
  assert.deepEqual(config.egress.socks, [
    { hostname: "127.0.0.1", port: 9050 },
    { hostname: "::1", port: 9051 },
  ]);
  assert.deepEqual(config.egress.direct, ["10.0.0.5:8080", "[::1]:8081"]);
  assert.deepEqual(config.egress.breaker, { window: 5, min_samples: 5, failure_ratio: 0.5 });
});

Deno.test("loadConfig() refuses a SOCKS instance named by host name: IP literals only", async () => {
  const { file, error } = await problemsOf(
    "egress:\n  socks: [{ hostname: localhost, port: 9050 }]\n",
  );
  assert.deepEqual(brief(error.problems), [{
    path: "egress/socks/0/hostname",
    message:
      "Expected an IP address literal such as 127.0.0.1 or ::1 (a name like localhost is ambiguous)",
    value: "localhost",
  }]);
  assert.equal(error.problems[0].file, file);
  assert.equal(
    error.message,
    `${file}:10:23: egress.socks[0].hostname: Expected an IP address literal such as 127.0.0.1 ` +
      'or ::1 (a name like localhost is ambiguous) (got "localhost")',
  );
});

Deno.test("loadConfig() refuses direct entries that are not host:port, one problem each", async () => {
  const { file, error } = await problemsOf(
    'egress:\n  direct: ["10.0.0.5", "host:99999", "http://x:1", "ok.example:80"]\n',
  );
  assert.deepEqual(brief(error.problems), [
    {
      path: "egress/direct/0",
      message: "Expected host:port, e.g. 10.0.0.5:8080 or [::1]:8080",
      value: "10.0.0.5",
    },
    { path: "egress/direct/1", message: "Port must be from 1 to 65535", value: "host:99999" },
    {
      path: "egress/direct/2",
      message: "Expected host:port, e.g. 10.0.0.5:8080 or [::1]:8080",
      value: "http://x:1",
    },
  ]);
  const lines = error.message.split("\n");
  assert.equal(lines.length, 3);
  assert.match(
    lines[0],
    /:10:12: egress\.direct\[0\]: Expected host:port.* \(got "10\.0\.0\.5"\)$/,
  );
  assert.match(lines[1], /: egress\.direct\[1\]: Port must be .* \(got "host:99999"\)$/);
  assert.match(lines[2], /: egress\.direct\[2\]: Expected host:port.* \(got "http:\/\/x:1"\)$/);
  for (const line of lines) assert.ok(line.startsWith(`${file}:10:`), line);
});

Deno.test("loadConfig() refuses a bad CIDR in trusted_proxies, naming its index", async () => {
  const { file, error } = await problemsOf('trusted_proxies: ["10.0.0.0/8", "10.0.0.0/33"]\n');
  assert.deepEqual(brief(error.problems), [
    {
      path: "trusted_proxies/1",
      message: "Expected a CIDR such as 10.0.0.0/8",
      value: "10.0.0.0/33",
    },
  ]);
  assert.equal(
    error.message,
    `${file}:9:33: trusted_proxies[1]: Expected a CIDR such as 10.0.0.0/8 (got "10.0.0.0/33")`,
  );
});

Deno.test("loadConfig() refuses a breaker failure_ratio above 1", async () => {
  const { file, error } = await problemsOf("egress:\n  breaker: { failure_ratio: 1.5 }\n");
  assert.deepEqual(brief(error.problems), [
    { path: "egress/breaker/failure_ratio", message: "Expected 0 to 1", value: 1.5 },
  ]);
  assert.equal(
    error.message,
    `${file}:10:29: egress.breaker.failure_ratio: Expected 0 to 1 (got 1.5)`,
  );
});

Deno.test("planEdge() refuses breaker.min_samples above breaker.window", async () => {
  const { file } = await writeSetup(
    "egress:\n  breaker: { window: 5, min_samples: 6 }\n",
    "host: shop.example\n",
  );
  const error = await configErrorOf(
    planEdge(await loadConfig(file), LANES),
    "planEdge() accepted a breaker that could never open",
  );
  assert.deepEqual(brief(error.problems), [{
    path: "egress/breaker/min_samples",
    message: "A breaker that needs more samples than its window (5) could never open",
    value: 6,
  }]);
  assert.equal(error.problems[0].file, file);
  assert.match(error.message, /config\.yaml:10:\d+: egress\.breaker\.min_samples: A breaker/);
});

Deno.test("planEdge() refuses a proxy backend with no way out, naming the tenant file", async () => {
  const { file, tenantFile } = await writeSetup(
    'egress:\n  direct: ["10.0.0.5:8080"]\n  allow_private: ["10.0.0.5:8080"]\n',
    proxyTenant("http://10.0.0.5:8080", "http://backend.example:8080"),
  );
  const error = await configErrorOf(
    planEdge(await loadConfig(file), LANES),
    "planEdge() accepted a backend it cannot reach",
  );
  assert.equal(error.problems.length, 1);
  const [problem] = error.problems;
  assert.equal(problem.file, tenantFile);
  assert.deepEqual(problem.path, ["routes", 1, "proxy", "backends", 1, "url"]);
  assert.equal(problem.value, "http://backend.example:8080");
  assert.equal(
    error.message,
    `${tenantFile}: routes[1].proxy.backends[1].url: No way out to backend.example:8080: ` +
      `list it in egress.direct of ${file}, or configure egress.socks ` +
      '(got "http://backend.example:8080")',
  );
});

Deno.test("planEdge() refuses a private backend listed in direct but not in allow_private", async () => {
  for (
    const [allow, refused] of [["", true], ["  allow_private: [10.0.0.4/31]\n", false]] as const
  ) {
    const { file, tenantFile } = await writeSetup(
      `egress:\n  direct: ["10.0.0.5:8080"]\n${allow}`,
      proxyTenant("http://10.0.0.5:8080"),
    );
    const planned = planEdge(await loadConfig(file), LANES);
    if (!refused) {
      await planned;
      continue;
    }
    const error = await configErrorOf(planned, "planEdge() let a private backend through");
    assert.deepEqual(error.problems.map((p) => [p.file, p.path.join("/")]), [
      [tenantFile, "routes/1/proxy/backends/0/url"],
    ]);
    assert.match(
      error.message,
      /Destination 10\.0\.0\.5:8080 is a private address, not in egress\.allow_private of /,
    );
  }
});

Deno.test("planEdge() counts a backend without a port as port 80 when checking reach", async () => {
  const { file, tenantFile } = await writeSetup(
    'egress:\n  direct: ["backend.example:8080"]\n',
    proxyTenant("http://backend.example"),
  );
  const error = await configErrorOf(
    planEdge(await loadConfig(file), LANES),
    "planEdge() let port 80 through a port 8080 entry",
  );
  assert.deepEqual(error.problems.map((p) => [p.file, p.path.join("/"), p.value]), [
    [tenantFile, "routes/1/proxy/backends/0/url", "http://backend.example"],
  ]);
  assert.match(error.message, /No way out to backend\.example:80: /);
});

Deno.test("planEdge() accepts a backend listed in direct, case-insensitively", async () => {
  const plan = await planOf(
    'egress:\n  direct: ["Backend.EXAMPLE:8080", "10.0.0.5:8080"]\n  allow_private: ["10.0.0.0/8"]\n',
    proxyTenant("http://10.0.0.5:8080", "http://backend.Example:8080"),
  );
  const [tenant] = plan.tenants.tenants;
  const action = tenant.routeList[1].action;
  assert.equal(action.kind, "proxy");
  assert.deepEqual(
    action.kind === "proxy" ? action.backends.map((b) => b.target) : [],
    ["10.0.0.5:8080", "backend.example:8080"],
  );
  assert.deepEqual(plan.grants.filter((g) => g.purpose === "direct upstream").map((g) => g.value), [
    "Backend.EXAMPLE:8080",
    "10.0.0.5:8080",
  ]);
});

Deno.test("planEdge() accepts any backend once a SOCKS pool exists", async () => {
  const plan = await planOf(
    "egress:\n  socks: [{ hostname: 127.0.0.1, port: 9050 }]\n",
    proxyTenant("http://abcdefghijklmnop.onion", "http://backend.example:8080"),
  );
  assert.equal(plan.tenants.tenants[0].routeCount, 2);
  assert.deepEqual(plan.grants.filter((g) => g.purpose === "SOCKS instance").map((g) => g.value), [
    "127.0.0.1:9050",
  ]);
});

Deno.test("egress.reuse_settle_ms: 0 turns the rule off, and the settle time is bounded", async () => {
  const off = await loadConfig(await writeConfigText(`${MINIMAL}egress:\n  reuse_settle_ms: 0\n`));
  assert.equal(egressSettings(off.egress).reuseSettleMs, 0);
  const { error } = await problemsOf("egress:\n  reuse_settle_ms: 1001\n");
  assert.deepEqual(brief(error.problems).map((p) => [p.path, p.value]), [
    ["egress/reuse_settle_ms", 1001],
  ]);
});
