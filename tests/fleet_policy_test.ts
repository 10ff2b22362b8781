/**
 * The policies' side of the fleet store, with a scripted store in place of Redis: the store's
 * answer decides (and sets the headers), a store that is down or late hands the decision to the
 * edge's own table, the pre-check refuses without a round trip, and a check that waits for the
 * store keeps the checks' order — a later check still runs after it, and a dry run still goes on.
 * Then the config rules: a tenant may name only a store the edge lists, and a store needs a salt.
 *
 * @module
 */
import assert from "node:assert/strict";
import { checkPolicies, type PolicyServices } from "../src/policy/checks.ts";
import { compilePolicies } from "../src/policy/policies.ts";
import type {
  FleetPolicies,
  PolicyContext,
  RemoteAnswer,
  RemoteRate,
} from "../src/policy/policy_context.ts";
import { PolicyTables } from "../src/policy/policy_tables.ts";
import { PolicyStats } from "../src/policy/policy_stats.ts";
import type { RateDecision } from "../src/policy/rate_limit.ts";
import { AddressSet } from "../src/request/cidr.ts";
import type { RequestContext } from "../src/request/context.ts";
import type { Reply } from "../src/request/reply.ts";
import { buildRegistry } from "../src/proxy/tenants.ts";
import { formatProblem } from "../src/config/problems.ts";
import { loadConfig } from "../src/config/load.ts";
import { configErrorOf } from "./fixtures/config_files.ts";
import { proofConfig, writeConfig } from "./fixtures/gateway.ts";
import { stringify } from "yaml";
import { planEdge } from "../src/edge/plan.ts";
import { LANES } from "../lanes/mod.ts";

const URL_A = "redis://127.0.0.1:6379";

/** A store whose every answer the test scripts; it records what it was asked. */
class ScriptedStore implements FleetPolicies {
  /** What `take()` gives next: an answer, "late" (a promise of undefined), or "down". */
  next: RemoteAnswer | "late" | "down" = "down";
  /** A pre-check refusal to give, when set. */
  precheckRefusal?: RateDecision;
  asked = 0;

  rate(): RemoteRate {
    return {
      tables: [],
      key: (client) => BigInt(client.length),
      precheck: () => this.precheckRefusal,
      take: () => {
        this.asked++;
        const next = this.next;
        if (next === "down") return undefined;
        return Promise.resolve(next === "late" ? undefined : next);
      },
    };
  }

  blocks() {
    return undefined;
  }
}

/** The services the policy phase needs, counting into `stats`. */
function services(stats = new PolicyStats()): PolicyServices {
  return { clock: () => 1_000_000, trusted: AddressSet.of([]), log: () => {}, policyStats: stats };
}

/** A request from 203.0.113.7 for `path`. */
function requestFor(path = "/"): RequestContext {
  return {
    requestId: "req-1",
    peer: "203.0.113.7",
    request: { rawHeaders: ["Host", "a.example"] },
    headers: { host: "a.example" },
    head: { path, method: "GET", host: "a.example" },
  } as unknown as RequestContext;
}

/** Compiles `policies` for tenant a.example against `store`. */
function compiled(store: ScriptedStore, policies: Record<string, unknown>) {
  const context: PolicyContext = { scope: "a.example", tables: new PolicyTables(), fleet: store };
  return compilePolicies(policies, {}, context);
}

const STORED_LIMIT = {
  mode: "on",
  per_second: 1,
  burst: 2,
  max_clients: 100,
  block_after: 0,
  headers: true,
  store: { redis: { url: URL_A, key_prefix: "p:", timeout_ms: 50 } },
};

/** A blocklist refusing /admin (as the schema completes it). */
const ADMIN_RULE = {
  mode: "on",
  rules: [{ name: "admin", path: "^/admin", action: "404" }],
  block_after: 0,
  window_ms: 60_000,
};

/** Runs the checks and returns the reply (awaited) and the trail's headers. */
async function run(policies: ReturnType<typeof compiled>, path = "/", stats?: PolicyStats) {
  const trail = { headers: [] as string[] };
  const reply = await checkPolicies(requestFor(path), policies, "-", services(stats), trail);
  return { reply: reply as Reply | undefined, headers: trail.headers };
}

/** A header's value in a flat header list. */
function header(headers: string[], name: string): string | undefined {
  const at = headers.indexOf(name);
  return at < 0 ? undefined : headers[at + 1];
}

Deno.test("rate limit on a store: the store's answer decides and sets the headers", async () => {
  const store = new ScriptedStore();
  const policies = compiled(store, { rate_limit: STORED_LIMIT });
  store.next = { allowed: false, aheadMs: 2500, denials: 4 };
  const denied = await run(policies);
  assert.equal(denied.reply?.status, 429);
  assert.equal(denied.reply?.headers?.["retry-after"], "2", "2.5 s ahead + 1 s - 2 s burst");
  assert.equal(header(denied.headers, "ratelimit-remaining"), "0");
  store.next = { allowed: true, aheadMs: 1000, denials: 0 };
  const allowed = await run(policies);
  assert.equal(allowed.reply, undefined);
  assert.equal(header(allowed.headers, "ratelimit-remaining"), "1");
  assert.equal(store.asked, 2);
});

Deno.test("rate limit on a store: down or late, the edge's own table decides", async () => {
  for (const trouble of ["down", "late"] as const) {
    const store = new ScriptedStore();
    store.next = trouble;
    const policies = compiled(store, { rate_limit: STORED_LIMIT });
    const statuses = [];
    for (let i = 0; i < 4; i++) statuses.push((await run(policies)).reply?.status ?? 200);
    assert.deepEqual(statuses, [200, 200, 429, 429], `${trouble}: the local burst of 2`);
    assert.equal(store.asked, 4);
  }
});

Deno.test("rate limit on a store: a pre-check refusal costs no round trip", async () => {
  const store = new ScriptedStore();
  const policies = compiled(store, { rate_limit: STORED_LIMIT });
  store.precheckRefusal = {
    allowed: false,
    limit: 1,
    remaining: 0,
    resetS: 3,
    retryAfterS: 3,
    denialsInARow: 1,
  };
  const { reply } = await run(policies);
  assert.equal(reply?.status, 429);
  assert.equal(reply?.headers?.["retry-after"], "3");
  assert.equal(store.asked, 0);
});

Deno.test("a check that waits for the store keeps the order: later checks run after it", async () => {
  const store = new ScriptedStore();
  const policies = compiled(store, {
    rate_limit: STORED_LIMIT,
    blocklist: ADMIN_RULE,
  });
  store.next = { allowed: true, aheadMs: 1000, denials: 0 };
  const stats = new PolicyStats();
  assert.equal((await run(policies, "/admin", stats)).reply?.status, 404, "the blocklist ran");
  store.next = { allowed: false, aheadMs: 2500, denials: 1 };
  assert.equal((await run(policies, "/admin", stats)).reply?.status, 429, "the limit came first");
  assert.deepEqual(stats.deniedCounts(), [["blocklist", 1], ["rate_limit", 1]]);

  const dry = compiled(store, {
    rate_limit: { ...STORED_LIMIT, mode: "dry_run" },
    blocklist: ADMIN_RULE,
  });
  const dryStats = new PolicyStats();
  assert.equal((await run(dry, "/admin", dryStats)).reply?.status, 404, "dry run goes on");
  assert.deepEqual(dryStats.dryRunCounts(), [["rate_limit", "-", 1]]);
});

Deno.test("a tenant naming a store the edge does not list is refused, naming file, field and value", async () => {
  const texts = new Map([
    [
      "a.example.yaml",
      stringify({
        host: "a.example",
        policies: { rate_limit: { per_second: 1, burst: 1, store: { redis: { url: URL_A } } } },
        routes: [{ name: "home", match: { path: "/" }, respond: { body: "home" } }],
      }),
    ],
  ]);
  const built = await buildRegistry("/tenants", texts, undefined, {
    tables: new PolicyTables(),
    stores: ["redis://10.0.0.5:6379"],
  });
  assert.equal(built.registry, undefined);
  assert.deepEqual(built.problems.map(formatProblem), [
    `/tenants/a.example.yaml:8:14: policies.rate_limit.store.redis.url: Store "${URL_A}" is not ` +
    `one of this edge's policy_stores ("redis://10.0.0.5:6379") (got "${URL_A}")`,
  ]);
  const listed = await buildRegistry("/tenants", texts, undefined, {
    tables: new PolicyTables(),
    stores: [URL_A],
  });
  assert.deepEqual(listed.problems, []);
});

Deno.test("policy_stores needs observe.salt_file, and store URLs carry no credentials", async () => {
  const ports = { public: 1, local_health: 2, provider_health: 3 };
  const unsalted = await writeConfig(proofConfig(ports, { policy_stores: [URL_A] }));
  const error = await configErrorOf(loadConfig(unsalted.config), "a store without a salt");
  assert.match(
    formatProblem(error.problems[0]),
    /policy_stores: A fleet store needs observe\.salt_file/,
  );
  for (
    const url of ["redis://user:secret@127.0.0.1:6379", "rediss://127.0.0.1:6379", "redis://h"]
  ) {
    const bad = await writeConfig(proofConfig(ports, { policy_stores: [url] }));
    const refused = await configErrorOf(loadConfig(bad.config), `accepted ${url}`);
    assert.match(
      formatProblem(refused.problems[0]),
      /policy_stores\[0\]: Expected "redis:\/\/host:port"/,
    );
  }
});

Deno.test("planEdge() refuses policy_stores whose salt file cannot be used, naming the field", async () => {
  const ports = { public: 1, local_health: 2, provider_health: 3 };
  const config = proofConfig(ports, {
    policy_stores: [URL_A],
    observe: { salt_file: "/nonexistent/portcullis-salt" },
  });
  const dir = await writeConfig(config);
  const error = await configErrorOf(
    planEdge(await loadConfig(dir.config), LANES),
    "planned stores with no salt",
  );
  assert.match(
    formatProblem(error.problems[0]),
    /observe\.salt_file: Cannot read tenant label salt "\/nonexistent\/portcullis-salt".*: policy_stores key every client with it/,
  );
});
