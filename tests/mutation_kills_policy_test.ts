/**
 * Kills operator-mutation survivors in src/policy/: each test names the rule it guards. In process
 * (the policies over a request context, as the pipeline calls them): each cap at its limit and one
 * over, what a live and a dry-run refusal leave in the counters and the log, and how the policies'
 * headers land on a reply.
 *
 * @module
 */
import assert from "node:assert/strict";
import * as v from "valibot";
import { type PoliciesDocument, PoliciesSchema } from "../src/config/policy_schema.ts";
import { ClientTable, keyOf } from "../src/policy/client_table.ts";
import { checkPolicies, decorate, type PolicyServices } from "../src/policy/checks.ts";
import { compilePolicies, describePolicies, type TenantPolicies } from "../src/policy/policies.ts";
import { blockReply } from "../src/policy/policy_check.ts";
import { PolicyStats } from "../src/policy/policy_stats.ts";
import { MatchCounter } from "../src/policy/ttl_block.ts";
import { inspect } from "../src/policy/waf.ts";
import { AddressSet } from "../src/request/cidr.ts";
import type { RequestContext } from "../src/request/context.ts";
import type { Reply } from "../src/request/reply.ts";

/** A request's head as the policies read it. */
interface Head {
  readonly fields?: readonly [string, string][];
  readonly path?: string;
  readonly query?: string;
  readonly route?: string;
}

/** Services whose log and counters a test reads. */
function services(): PolicyServices & { lines: string[] } {
  const lines: string[] = [];
  return {
    clock: () => 1_000_000,
    trusted: AddressSet.of([]),
    log: (line) => lines.push(line),
    policyStats: new PolicyStats(),
    lines,
  };
}

/** Runs `policies` over a request from 192.0.2.1; the reply's status (200: let by). */
async function statusOf(
  policies: TenantPolicies,
  head: Head,
  using = services(),
): Promise<number> {
  const fields = head.fields ?? [["Host", "a.example"]];
  const context = {
    requestId: "r1",
    peer: "192.0.2.1",
    request: { rawHeaders: fields.flat() },
    headers: Object.fromEntries(fields.map(([name, value]) => [name.toLowerCase(), value])),
    head: { path: head.path ?? "/", query: head.query ?? "", method: "GET", host: "a.example" },
  } as unknown as RequestContext;
  const reply = await checkPolicies(context, policies, head.route ?? "-", using, { headers: [] });
  return reply?.status ?? 200;
}

const CAPS = {
  mode: "on" as const,
  max_headers: 4,
  max_header_bytes: 300,
  max_url_bytes: 32,
  max_body_bytes: 100,
};

/**
 * `count` header fields of `bytes` bytes as the cap counts them (each name and each value plus 2:
 * ": " and CRLF), Host first.
 */
function fieldsOf(count: number, bytes: number): [string, string][] {
  const fields: [string, string][] = [["Host", "a.example"]];
  let used = "Host".length + "a.example".length + 4;
  for (let i = 1; i < count; i++) {
    const name = `X-F${i}`;
    const value = i === count - 1 ? "v".repeat(bytes - used - name.length - 4) : "v";
    fields.push([name, value]);
    used += name.length + value.length + 4;
  }
  return fields;
}

Deno.test("caps: a head exactly at the header count and the header bytes passes; one over is 431", async () => {
  const policies = compilePolicies({ caps: CAPS }, {});
  const total = (fields: [string, string][]) =>
    fields.reduce((n, [name, value]) => n + name.length + value.length + 4, 0);
  const atBoth = fieldsOf(4, 300);
  assert.equal(atBoth.length, 4);
  assert.equal(total(atBoth), 300);
  assert.equal(await statusOf(policies, { fields: atBoth }), 200, "4 fields, 300 bytes");
  const using = services();
  assert.equal(await statusOf(policies, { fields: fieldsOf(5, 200) }, using), 431);
  assert.match(using.lines[0], /refused \(header count\)/);
  const bytes = services();
  assert.equal(await statusOf(policies, { fields: fieldsOf(4, 301) }, bytes), 431);
  assert.match(bytes.lines[0], /refused \(header bytes\)/);
});

Deno.test("caps: a tenant that takes no body still serves a request that declares none", async () => {
  const policies = compilePolicies({ caps: { ...CAPS, max_body_bytes: 0 } }, {});
  assert.equal(await statusOf(policies, {}), 200, "no Content-Length");
  assert.equal(await statusOf(policies, { fields: [["Host", "a"], ["Content-Length", "0"]] }), 200);
  const using = services();
  const one = await statusOf(policies, { fields: [["Host", "a"], ["Content-Length", "1"]] }, using);
  assert.equal(one, 413);
  assert.match(using.lines[0], /refused \(declared body\)/);
});

Deno.test("a live refusal is counted by phase and logged; a dry-run one is counted by route, logged as JSON and let by", async () => {
  const over = { fields: fieldsOf(5, 200), route: "api" };
  const live = services();
  assert.equal(await statusOf(compilePolicies({ caps: CAPS }, {}), over, live), 431);
  assert.deepEqual(live.policyStats.deniedCounts(), [["caps", 1]]);
  assert.deepEqual(live.policyStats.dryRunCounts(), []);
  assert.deepEqual(live.lines, ["portcullis: policy caps: request r1 refused (header count)"]);

  const dry = services();
  const policies = compilePolicies({ caps: { ...CAPS, mode: "dry_run" } }, {});
  assert.equal(await statusOf(policies, over, dry), 200, "dry run lets the request by");
  assert.equal(await statusOf(policies, over, dry), 200);
  assert.deepEqual(dry.policyStats.deniedCounts(), []);
  assert.deepEqual(dry.policyStats.dryRunCounts(), [["caps", "api", 2]]);
  assert.equal(dry.lines.length, 2);
  assert.deepEqual(JSON.parse(dry.lines[0]), {
    event: "policy_dry_run",
    phase: "caps",
    would: 431,
    reason: "header count",
    route: "api",
    request_id: "r1",
  });
});

Deno.test("PolicyStats adds every worker's latest counts to its own", () => {
  const stats = new PolicyStats();
  stats.denied("caps");
  stats.dryRun("waf", "api");
  stats.absorb(1, { denied: [["caps", 2], ["waf", 1]], dryRun: [["waf\napi", 3]] });
  stats.absorb(2, { denied: [["caps", 4]], dryRun: [] });
  stats.absorb(1, { denied: [["caps", 5], ["waf", 1]], dryRun: [["waf\napi", 3]] }); // replaces
  assert.deepEqual(stats.deniedCounts(), [["caps", 10], ["waf", 1]]);
  assert.deepEqual(stats.dryRunCounts(), [["waf", "api", 4]]);
});

Deno.test("blockReply(): action 429 answers 429 rate_limited, 404 answers 404 no_route", () => {
  const limited = blockReply("429", "r1");
  assert.equal(limited.status, 429);
  assert.equal(limited.failure, "rate_limited");
  const hidden = blockReply("404", "r1");
  assert.equal(hidden.status, 404);
  assert.equal(hidden.failure, "no_route");
});

Deno.test("decorate(): raw headers lose every removed name (any case) and gain the trail's, in order", () => {
  const reply: Reply = {
    status: 200,
    rawHeaders: [
      "Server",
      "nginx",
      "Content-Type",
      "text/plain",
      "X-Powered-By",
      "php",
      "ETag",
      "1",
    ],
  };
  const removeOne = decorate(reply, { headers: [] }, new Set(["x-powered-by"]));
  assert.deepEqual(removeOne.rawHeaders, [
    "Server",
    "nginx",
    "Content-Type",
    "text/plain",
    "ETag",
    "1",
  ]);
  const both = decorate(
    reply,
    { headers: ["x-frame-options", "DENY", "x-content-type-options", "nosniff"] },
    new Set(["server", "etag"]),
  );
  assert.deepEqual(both.rawHeaders, [
    "Content-Type",
    "text/plain",
    "X-Powered-By",
    "php",
    "x-frame-options",
    "DENY",
    "x-content-type-options",
    "nosniff",
  ]);
  const added = decorate(reply, { headers: ["x-frame-options", "DENY"] }, new Set());
  assert.deepEqual(added.rawHeaders, [...reply.rawHeaders!, "x-frame-options", "DENY"]);
});

Deno.test("decorate(): header records lose the removed names and take each trail name with its own value", () => {
  const reply: Reply = { status: 200, headers: { Server: "nginx", "Content-Type": "text/plain" } };
  const removed = decorate(reply, { headers: [] }, new Set(["server"]));
  assert.deepEqual(removed.headers, { "Content-Type": "text/plain" });
  const set = decorate(
    reply,
    { headers: ["x-frame-options", "DENY", "x-content-type-options", "nosniff"] },
    new Set(),
  );
  assert.deepEqual(set.headers, {
    Server: "nginx",
    "Content-Type": "text/plain",
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
  });
  const untouched = decorate(reply, { headers: [] }, new Set());
  assert.equal(untouched, reply, "nothing to change: the same reply");
});

/** A policies block as a tenant file would give it, defaults filled in by the schema. */
function policiesOf(document: unknown): PoliciesDocument {
  return v.parse(PoliciesSchema, document);
}

Deno.test("blocklist: a rule with a path refuses that path only; a header-only rule any path", async () => {
  const policies = compilePolicies(
    policiesOf({
      blocklist: {
        mode: "on",
        rules: [
          { name: "admin", path: "^/admin", action: "404" },
          { name: "bot", header: { name: "User-Agent", pattern: "evilbot" }, action: "429" },
        ],
      },
    }),
    {},
  );
  assert.equal(await statusOf(policies, { path: "/admin/users" }), 404);
  assert.equal(await statusOf(policies, { path: "/public" }), 200, "another path passes");
  const bot: [string, string][] = [["Host", "a.example"], ["User-Agent", "evilbot/1"]];
  assert.equal(await statusOf(policies, { path: "/public", fields: bot }), 429);
});

Deno.test("any single policy, alone, makes the tenant's policy phase run", () => {
  const each = {
    ttl_block: { mode: "on" },
    caps: { mode: "on" },
    rate_limit: { mode: "on", per_second: 1, burst: 1 },
    blocklist: { mode: "on", rules: [] },
    waf: { mode: "dry_run" },
    security_headers: { mode: "on" },
  };
  for (const [name, policy] of Object.entries(each)) {
    assert.equal(compilePolicies(policiesOf({ [name]: policy }), {}).any, true, name);
    assert.equal(
      compilePolicies(policiesOf({ [name]: { ...policy, mode: "off" } }), {}).any,
      false,
    );
  }
  assert.equal(compilePolicies(undefined, {}).any, false, "none at all");
});

Deno.test("security headers: HSTS and the others are set, and the upstream's own values removed", () => {
  const policies = compilePolicies(
    policiesOf({ security_headers: { mode: "on", hsts: "max-age=60", add: { "X-Extra": "1" } } }),
    {},
  );
  const headers = policies.securityHeaders!;
  assert.deepEqual(headers.add, [
    "strict-transport-security",
    "max-age=60",
    "x-content-type-options",
    "nosniff",
    "x-frame-options",
    "DENY",
    "referrer-policy",
    "no-referrer",
    "x-extra",
    "1",
  ]);
  for (const name of ["strict-transport-security", "x-frame-options", "x-extra"]) {
    assert.ok(policies.strip.has(name), name);
  }
  const off = compilePolicies(policiesOf({ security_headers: { mode: "on", hsts: false } }), {});
  assert.ok(
    !off.securityHeaders!.add.includes("strict-transport-security"),
    "hsts: false sets none",
  );
});

Deno.test("describePolicies() marks each policy in dry run, and only those", () => {
  const policies = compilePolicies(
    policiesOf({
      caps: { mode: "on" },
      waf: { mode: "dry_run" },
      rate_limit: { mode: "dry_run", per_second: 1, burst: 1 },
    }),
    {},
  );
  assert.deepEqual(describePolicies(policies), ["caps", "waf (dry run)", "rate_limit (dry run)"]);
});

Deno.test("rate limit: a denial run of block_after puts the client on the TTL list when on, never in dry run", async () => {
  const ttl = { mode: "on", ttl_ms: 600_000, action: "404" };
  const rate = { per_second: 0.001, burst: 1, block_after: 2 };
  const live = compilePolicies(
    policiesOf({ ttl_block: ttl, rate_limit: { mode: "on", ...rate } }),
    {},
  );
  const statuses = [];
  for (let i = 0; i < 5; i++) statuses.push(await statusOf(live, {}));
  assert.deepEqual(statuses, [200, 429, 429, 404, 404], "two denials in a row, then the TTL block");
  const dry = compilePolicies(
    policiesOf({ ttl_block: ttl, rate_limit: { mode: "dry_run", ...rate } }),
    {},
  );
  const dryStatuses = [];
  for (let i = 0; i < 5; i++) dryStatuses.push(await statusOf(dry, {}));
  assert.deepEqual(dryStatuses, [200, 200, 200, 200, 200], "a dry run blocks nobody");
  const first = compilePolicies(
    policiesOf({ ttl_block: ttl, rate_limit: { mode: "on", ...rate, block_after: 1 } }),
    {},
  );
  const firstStatuses = [];
  for (let i = 0; i < 3; i++) firstStatuses.push(await statusOf(first, {}));
  assert.deepEqual(firstStatuses, [200, 429, 404], "block_after 1: the first denial blocks");
});

Deno.test("ClientTable: a key just blocked is found blocked, however full its probe window", () => {
  // 16 slots, 200 clients: every window fills and evicts. A block lands in the slot lookups scan.
  const table = new ClientTable(ClientTable.allocate(16));
  for (let i = 1; i <= 200; i++) {
    const key = keyOf(`t|client-${i}`);
    table.block(key, 1e9, i);
    assert.equal(table.blockedUntil(key, i), 1e9, `client ${i}`);
  }
  assert.ok(table.stats().evictions > 100);
});

Deno.test("ClientTable: a client never seen is not blocked, and asking changes no count", () => {
  const table = new ClientTable(ClientTable.allocate(1));
  const rate = { intervalMs: 1000, toleranceMs: 1000 };
  table.take(keyOf("t|a"), 0, rate);
  table.take(keyOf("t|b"), 0, rate); // evicts a
  assert.deepEqual(table.stats(), { capacity: 1, used: 1, evictions: 1 });
  assert.equal(table.blockedUntil(keyOf("t|c"), 0), undefined);
  assert.equal(table.blockedUntil(keyOf("t|a"), 0), undefined, "the evicted client is gone");
  assert.deepEqual(table.stats(), { capacity: 1, used: 1, evictions: 1 });
});

Deno.test("ClientTable: a block is found past the slot of key 1 (the stored form of hashes 0 and 1)", () => {
  // In a 2-slot table every window covers both slots; for about half the keys the home slot is
  // key 1's, so the lookup passes key 1 first.
  for (let other = 2n; other < 40n; other++) {
    const table = new ClientTable(ClientTable.allocate(2));
    table.block(1n, 5000, 0);
    table.block(other, 5000, 0);
    assert.equal(table.blockedUntil(other, 1), 5000, `key ${other}`);
    assert.equal(table.blockedUntil(0n, 1), 5000, "hash 0 is key 1");
  }
});

Deno.test("ClientTable: a blocked client that keeps coming is not the one evicted", () => {
  const table = new ClientTable(ClientTable.allocate(2));
  const rate = { intervalMs: 1000, toleranceMs: 1000 };
  const blocked = keyOf("t|blocked");
  table.block(blocked, 1e9, 0);
  table.take(keyOf("t|quiet"), 1, rate);
  assert.equal(table.blockedUntil(blocked, 2), 1e9, "it came back at 2: seen later than quiet");
  table.take(keyOf("t|newcomer"), 3, rate); // the window is full: the least recently seen goes
  assert.equal(table.blockedUntil(blocked, 4), 1e9, "still blocked: quiet was evicted");
});

Deno.test("ClientTable: a newcomer that takes over an evicted slot gets its whole burst, even in the same microsecond", () => {
  const table = new ClientTable(ClientTable.allocate(1));
  const rate = { intervalMs: 1000, toleranceMs: 1000 };
  assert.equal(table.take(keyOf("t|first"), 0, rate).allowed, true);
  assert.equal(table.take(keyOf("t|first"), 0, rate).allowed, false);
  const newcomer = table.take(keyOf("t|second"), 0, rate);
  assert.equal(newcomer.allowed, true, "a fresh bucket");
  assert.equal(newcomer.tatMs, 1000);
});

Deno.test("ClientTable: a rate of a million a second refills one token every microsecond", () => {
  const table = new ClientTable(ClientTable.allocate(4));
  const rate = { intervalMs: 0.001, toleranceMs: 0.001 };
  const key = keyOf("t|fast");
  assert.equal(table.take(key, 5, rate).allowed, true);
  assert.equal(table.take(key, 5, rate).allowed, false);
  assert.equal(table.take(key, 5.001, rate).allowed, true, "one microsecond later");
});

Deno.test("ClientTable.advance() that loses a race to a smaller write tries again", () => {
  // Another worker's take moves the arrival time between this advance's read and its swap.
  const buffer = ClientTable.allocate(4);
  const table = new ClientTable(buffer);
  const rate = { intervalMs: 1000, toleranceMs: 1000 };
  const key = keyOf("t|raced");
  table.take(key, 0, rate); // arrival time 1000 ms
  const compareExchange = Atomics.compareExchange;
  let raced = false;
  // deno-lint-ignore no-explicit-any
  (Atomics as any).compareExchange = (array: any, index: number, expected: any, value: any) => {
    if (!raced && array.buffer === buffer && expected === 1_000_000n && value === 9_000_000n) {
      raced = true;
      Atomics.store(array, index, 2_000_000n); // the other worker's take: 2000 ms
    }
    return compareExchange(array, index, expected, value);
  };
  try {
    table.advance(key, 9000, 0);
  } finally {
    Atomics.compareExchange = compareExchange;
  }
  assert.ok(raced, "the race happened");
  const after = table.take(key, 0, rate);
  assert.equal(after.allowed, false);
  assert.equal(after.tatMs, 9000, "the fleet's arrival time won");
});

/** FNV-1a 64 over `TextEncoder`'s bytes, in BigInt arithmetic: what keyOf() must equal. */
function fnv1a64(text: string): bigint {
  let hash = 0xcbf29ce484222325n;
  for (const byte of new TextEncoder().encode(text)) {
    hash = BigInt.asUintN(64, (hash ^ BigInt(byte)) * 0x100000001b3n);
  }
  return hash;
}

Deno.test("keyOf() hashes UTF-8 exactly at each width's edges and around every surrogate boundary", () => {
  const texts = [
    "\u007f",
    "\u0080",
    "\u07ff",
    "\u0800",
    "\ud7ff",
    "\ue000",
    "\ud800\udc00",
    "\udbff\udfff",
    "\ud800\udbff", // a high surrogate before another high one: two lone ones
    "\ud800\ue000", // before a character past the low range
    "\udc00\udc00", // two lone low surrogates
    "\udbff\udc00x",
    "x\ud800", // a high surrogate at the end
  ];
  for (const text of texts) assert.equal(keyOf(text), fnv1a64(text), JSON.stringify(text));
});

Deno.test("ClientTable: keys that differ only in the top bit are two clients", () => {
  const table = new ClientTable(ClientTable.allocate(64));
  const rate = { intervalMs: 1000, toleranceMs: 1000 };
  const low = 0x2545f4914f6cdd1dn;
  const high = low | (1n << 63n);
  assert.equal(table.take(low, 0, rate).allowed, true);
  assert.equal(table.take(high, 0, rate).allowed, true, "its own bucket");
  assert.equal(table.take(low, 0, rate).allowed, false);
  assert.equal(table.stats().used, 2);
});

Deno.test("ClientTable.allocate() takes 2^24 entries, the documented most, and refuses one more", () => {
  const table = new ClientTable(ClientTable.allocate(2 ** 24));
  assert.equal(table.stats().capacity, 2 ** 24);
  assert.throws(
    () => ClientTable.allocate(2 ** 24 + 1),
    new RangeError(`Client table capacity "${2 ** 24 + 1}" is outside 1..${2 ** 24}`),
  );
});

Deno.test("waf: each spelling a rule names is caught by that rule (prefix and separator classes)", () => {
  const options = { sqli: true, xss: true, traversal: true, headers: [] };
  const cases: [path: string, query: string, rule: string][] = [
    ["/a", 'f="../app.cfg"', "traversal.dot_segment"], // `..` after a double quote
    ["/...\\./etc", "", "traversal.filter_bypass"], // three dots, a backslash
    ["/..././etc", "", "traversal.filter_bypass"], // three dots, dot, slash
    ["/..../etc", "", "traversal.filter_bypass"], // four dots, a slash
    ["/x/file:/etc/passwd", "", "traversal.sensitive_file"], // after a colon
    ["/x", "u=/proc/self/environ", "traversal.sensitive_file"],
    ["/a\\c:\\windows\\x", "", "traversal.windows_path"], // a drive after a backslash
    ["/c:/windows", "", "traversal.windows_path"], // a drive after a slash
    ["/a", "p=x\\windows\\win.ini", "traversal.windows_path"],
    ["/a", "p=/windows\\win.ini", "traversal.windows_path"],
    ["/a", "q=' or name like '%", "sqli.tautology"], // LIKE then a single quote
    ["/a", "q=1 union select t.c from t", "sqli.union_select"], // a qualified column
    ["/a", 'q=waitfor delay "0:0:5"', "sqli.time_based"], // a double-quoted delay
    ["/a", "u=javascript:top['al'](1)", "xss.script_uri"], // a member then `[`
    ["/a", "x=1'+(select+1)", "sqli.subquery"], // `+` as written, not read as a space
  ];
  for (const [path, query, rule] of cases) {
    const finding = inspect({ path, query, header: () => undefined }, options);
    assert.equal(finding?.rule, rule, `${path} ${query}`);
  }
});

Deno.test("ClientTable: one view used with two rates spends each key at its own rate", () => {
  // Two tenants' limits over one view: the same tolerance, another interval.
  const table = new ClientTable(ClientTable.allocate(8));
  const slow = { intervalMs: 1000, toleranceMs: 1000 }; // 1/s, burst 1
  const fast = { intervalMs: 500, toleranceMs: 1000 }; // 2/s, burst 2
  assert.equal(table.take(keyOf("t|slow"), 0, slow).allowed, true);
  assert.equal(table.take(keyOf("t|slow"), 0, slow).allowed, false);
  const fastKey = keyOf("t|fast");
  assert.deepEqual(
    [1, 2, 3].map(() => table.take(fastKey, 0, fast).allowed),
    [true, true, false],
  );
  assert.equal(table.take(keyOf("t|slow2"), 0, slow).tatMs, 1000, "and back to the first rate");
});

Deno.test("ClientTable: a rate faster than one token a microsecond is still a limit, not none", () => {
  // 10 million a second, burst 20: the interval rounds up to 1 µs, the tolerance is 2 µs.
  const table = new ClientTable(ClientTable.allocate(4));
  const rate = { intervalMs: 0.0001, toleranceMs: 0.002 };
  const key = keyOf("t|flood");
  assert.deepEqual([1, 2, 3].map(() => table.take(key, 5, rate).allowed), [true, true, false]);
});

Deno.test("MatchCounter keeps at most maxEntries clients: the third forgets the least recently counted", () => {
  const matches = new MatchCounter({ windowMs: 1_000_000, maxEntries: 2 });
  assert.equal(matches.count("a", 0), 1);
  assert.equal(matches.count("b", 1), 1);
  assert.equal(matches.count("c", 2), 1); // a is forgotten: two entries at most
  assert.equal(matches.count("a", 3), 1, "a starts over");
  assert.equal(matches.count("c", 4), 2, "c was kept");
});

const ENCODED_ATTACK = "x=%22%20" + "%C4%B0".repeat(40) + "%20onmouseover%3Dalert%281%29%20x%3D%22";

Deno.test("waf: characters that grow when lowered (İ) do not carry an attack past a rule's bounded gap", () => {
  const options = { sqli: true, xss: true, traversal: true, headers: [] };
  const attack = 'x="' + "İ".repeat(40) + " onmouseover=alert(1)";
  for (
    const [where, request] of [
      ["query", { path: "/a", query: attack, header: () => undefined }],
      ["path", { path: `/${attack}`, query: "", header: () => undefined }],
      // The outside attack's bytes: percent-encoded İ (%C4%B0) where 40 ASCII letters are caught.
      ["encoded query", { path: "/q", query: ENCODED_ATTACK, header: () => undefined }],
      ["encoded path", { path: `/q/${ENCODED_ATTACK}`, query: "", header: () => undefined }],
    ] as const
  ) {
    const finding = inspect(request, options);
    assert.equal(finding?.detection, "xss", `${where}: ${JSON.stringify(finding)}`);
  }
  // The same padding in plain letters was caught already: the bound is the rule's, not the case.
  const plain = inspect({
    path: "/a",
    query: 'x="' + "I".repeat(40) + " onmouseover=alert(1)",
    header: () => undefined,
  }, options);
  assert.equal(plain?.detection, "xss");
});
