/**
 * The client key (`src/policy/client_key.ts`): every spelling of one address gives one key (a
 * property over random addresses and random spellings, checked against a reference built on
 * BigInt masks and the WHATWG URL serializer, not on the gateway's parser); both sides of every
 * prefix boundary; the config that sets the prefixes (bounds, resolution tenant → globals →
 * default, and `check`'s file/field/value diagnostics); and the policies counting by it in
 * process, through a trusted proxy.
 *
 * @module
 */
import assert from "node:assert/strict";
import { formatProblem } from "../src/config/problems.ts";
import { checkPolicies, type PolicyServices } from "../src/policy/checks.ts";
import { clientKeyOf, type ClientKeyRule, ClientKeys } from "../src/policy/client_key.ts";
import { compilePolicies, type TenantPolicies } from "../src/policy/policies.ts";
import { PolicyStats } from "../src/policy/policy_stats.ts";
import { AddressSet } from "../src/request/cidr.ts";
import type { RequestContext } from "../src/request/context.ts";
import { loadTenants } from "../src/proxy/tenants.ts";
import { configErrorOf, tenantsDir } from "./fixtures/config_files.ts";
import {
  checkConfig,
  DEMO_TENANT,
  freePorts,
  proofConfig,
  writeConfig,
} from "./fixtures/gateway.ts";
import { below, groupsOf, randomV6, spellV4, spellV6 } from "./fixtures/ip_spellings.ts";
import { mulberry32 } from "./fixtures/random.ts";

const SEED = 0x31_07;
const CASES = 2000;
const DEFAULT: ClientKeyRule = { ipv4Prefix: 32, ipv6Prefix: 64 };

/** The reference key of an IPv6 address: BigInt mask, text by the WHATWG URL serializer. */
function referenceV6(value: bigint, prefix: number): string {
  const mask = prefix === 0 ? 0n : ((1n << 128n) - 1n) ^ ((1n << BigInt(128 - prefix)) - 1n);
  const groups = groupsOf(value & mask).map((group) => group.toString(16));
  const host = new URL(`http://[${groups.join(":")}]/`).hostname.slice(1, -1);
  return prefix === 128 ? host : `${host}/${prefix}`;
}

/** The reference key of an IPv4 address given as a 32-bit number. */
function referenceV4(value: number, prefix: number): string {
  const network = prefix === 0 ? 0 : (value & (0xffffffff << (32 - prefix))) >>> 0;
  const text = [24, 16, 8, 0].map((shift) => (network >>> shift) & 255).join(".");
  return prefix === 32 ? text : `${text}/${prefix}`;
}

Deno.test("clientKeyOf(): every spelling of a random IPv6 address gives its network's one key", () => {
  const random = mulberry32(SEED);
  for (let i = 0; i < CASES; i++) {
    const value = randomV6(random);
    if ((value >> 32n) === 0xffffn) continue; // IPv4-mapped: the next test's
    const prefix = [32, 48, 56, 64, 64, 64, 96, 127, 128][below(random, 9)];
    const rule = { ipv4Prefix: 32, ipv6Prefix: prefix };
    const expected = referenceV6(value, prefix);
    for (let k = 0; k < 4; k++) {
      const spelling = spellV6(random, value);
      assert.equal(clientKeyOf(spelling, rule), expected, `seed ${SEED} case ${i}: ${spelling}`);
    }
  }
});

Deno.test("clientKeyOf(): an IPv4 address, dotted or IPv4-mapped in any spelling, takes the IPv4 prefix", () => {
  const random = mulberry32(SEED + 1);
  for (let i = 0; i < CASES; i++) {
    const value = below(random, 2 ** 32);
    const prefix = [8, 16, 24, 31, 32, 32][below(random, 6)];
    const rule = { ipv4Prefix: prefix, ipv6Prefix: 64 };
    const expected = referenceV4(value, prefix);
    for (let k = 0; k < 4; k++) {
      const spelling = spellV4(random, value);
      assert.equal(
        clientKeyOf(spelling, rule),
        expected,
        `seed ${SEED + 1} case ${i}: ${spelling}`,
      );
    }
  }
  for (
    const spelling of [
      "::ffff:203.0.113.7",
      "::FFFF:203.0.113.7",
      "0:0:0:0:0:ffff:203.0.113.7",
      "0000:0000:0000:0000:0000:FFFF:CB00:7107",
      "[::ffff:cb00:7107]",
      "::ffff:203.0.113.7%eth0",
    ]
  ) {
    assert.equal(clientKeyOf(spelling, DEFAULT), "203.0.113.7", spelling);
    assert.equal(clientKeyOf(spelling, { ipv4Prefix: 24, ipv6Prefix: 64 }), "203.0.113.0/24");
  }
});

Deno.test("clientKeyOf(): addresses apart above the prefix get apart keys, below it one key", () => {
  const random = mulberry32(SEED + 2);
  for (let i = 0; i < CASES; i++) {
    const value = randomV6(random);
    if ((value >> 32n) === 0xffffn) continue;
    const prefix = 32 + below(random, 97);
    const rule = { ipv4Prefix: 32, ipv6Prefix: prefix };
    const bit = BigInt(below(random, 128));
    const other = value ^ (1n << bit);
    if ((other >> 32n) === 0xffffn) continue;
    const same = bit < BigInt(128 - prefix);
    const [a, b] = [
      clientKeyOf(spellV6(random, value), rule),
      clientKeyOf(spellV6(random, other), rule),
    ];
    assert.equal(a === b, same, `/${prefix}, bit ${bit}: ${a} vs ${b}`);
  }
});

Deno.test("clientKeyOf(): both sides of every prefix boundary (first, last, next, previous)", () => {
  const random = mulberry32(SEED + 3);
  for (const prefix of [32, 48, 56, 63, 64, 65, 96, 112, 127, 128]) {
    const rule = { ipv4Prefix: 32, ipv6Prefix: prefix };
    const host = (1n << BigInt(128 - prefix)) - 1n;
    for (let i = 0; i < 50; i++) {
      const first = (0x2001_0db8n << 96n | randomV6(random) >> 32n) & ~host;
      const last = first | host;
      const key = clientKeyOf(spellV6(random, first), rule);
      assert.equal(key, referenceV6(first, prefix));
      assert.equal(clientKeyOf(spellV6(random, last), rule), key, `/${prefix}: last of ${key}`);
      assert.notEqual(clientKeyOf(spellV6(random, last + 1n), rule), key, `/${prefix}: next`);
      assert.notEqual(clientKeyOf(spellV6(random, first - 1n), rule), key, `/${prefix}: previous`);
    }
  }
  for (const prefix of [8, 16, 24, 31, 32]) {
    const rule = { ipv4Prefix: prefix, ipv6Prefix: 64 };
    const size = 2 ** (32 - prefix);
    for (let i = 0; i < 50; i++) {
      const first = (Math.floor(below(random, 2 ** 32 - 2 * size) / size) + 1) * size;
      const key = clientKeyOf(spellV4(random, first), rule);
      assert.equal(key, referenceV4(first, prefix));
      assert.equal(clientKeyOf(spellV4(random, first + size - 1), rule), key, `/${prefix}: last`);
      assert.notEqual(clientKeyOf(spellV4(random, first + size), rule), key, `/${prefix}: next`);
      assert.notEqual(clientKeyOf(spellV4(random, first - 1), rule), key, `/${prefix}: previous`);
    }
  }
  // The literal /64 of issue 31, and the key format the store hashes.
  assert.equal(clientKeyOf("2001:db8:1:2::", DEFAULT), "2001:db8:1:2::/64");
  assert.equal(clientKeyOf("2001:db8:1:2:ffff:ffff:ffff:ffff", DEFAULT), "2001:db8:1:2::/64");
  assert.equal(clientKeyOf("2001:db8:1:3::", DEFAULT), "2001:db8:1:3::/64");
  assert.equal(clientKeyOf("2001:db8:1:1:ffff:ffff:ffff:ffff", DEFAULT), "2001:db8:1:1::/64");
});

Deno.test("clientKeyOf(): a full-length prefix keys by the bare address; a key is its own key", () => {
  const per = { ipv4Prefix: 32, ipv6Prefix: 128 };
  assert.equal(clientKeyOf("2001:DB8::0:1", per), "2001:db8::1");
  assert.equal(clientKeyOf("198.51.100.7", per), "198.51.100.7");
  const random = mulberry32(SEED + 4);
  for (let i = 0; i < 500; i++) {
    const rule = { ipv4Prefix: 8 + below(random, 25), ipv6Prefix: 32 + below(random, 97) };
    const address = random() < 0.5
      ? spellV6(random, randomV6(random))
      : spellV4(random, below(random, 2 ** 32));
    const key = clientKeyOf(address, rule);
    assert.equal(clientKeyOf(key, rule), key, `${address} under ${JSON.stringify(rule)}`);
  }
  assert.equal(clientKeyOf("", DEFAULT), "", "a Unix-socket peer is its own key");
  assert.equal(clientKeyOf("not an address", DEFAULT), "not an address");
});

Deno.test("ClientKeys.of() gives each address its own key when addresses alternate", () => {
  const keys = new ClientKeys();
  const a = "2001:db8:1:2::1", b = "2001:db8:9:9::1";
  for (let i = 0; i < 3; i++) {
    assert.equal(keys.of(a), "2001:db8:1:2::/64");
    assert.equal(keys.of(b), "2001:db8:9:9::/64");
    assert.equal(keys.of(""), "");
  }
});

const HOME = "routes:\n  - name: home\n    match: { path: / }\n    respond: { body: home }\n";

/** The formatted problems loading `files` is refused with (paths relative to the folder). */
async function refused(files: Record<string, string>): Promise<string[]> {
  const dir = await tenantsDir(files);
  const error = await configErrorOf(loadTenants(dir), "loadTenants() accepted a bad client_key");
  return error.problems.map((p) => formatProblem(p).replace(dir + "/", ""));
}

Deno.test("policies.client_key is bounded (IPv4 8–32, IPv6 32–128, whole) naming file, field and value", async () => {
  const cases: [string, string, string][] = [
    ["ipv4_prefix: 7", "ipv4_prefix", "7"],
    ["ipv4_prefix: 33", "ipv4_prefix", "33"],
    ["ipv6_prefix: 31", "ipv6_prefix", "31"],
    ["ipv6_prefix: 129", "ipv6_prefix", "129"],
    ["ipv6_prefix: 64.5", "ipv6_prefix", "64.5"],
    ['ipv6_prefix: "64"', "ipv6_prefix", '"64"'],
  ];
  for (const [field, name, value] of cases) {
    for (const file of ["globals.yaml", "a.example.yaml"]) {
      const block = `policies:\n  client_key: { ${field} }\n`;
      const problems = await refused({
        "globals.yaml": file === "globals.yaml" ? block : "policies: {}\n",
        "a.example.yaml": `host: a.example\n${file === "a.example.yaml" ? block : ""}${HOME}`,
      });
      assert.equal(problems.length, 1, problems.join("\n"));
      assert.match(
        problems[0],
        new RegExp(`^${file.replace(".", "\\.")}:\\d+:\\d+: policies\\.client_key\\.${name}: .*`),
      );
      assert.ok(problems[0].includes(`(got ${value})`), problems[0]);
    }
  }
  const unknown = await refused({
    "a.example.yaml": `host: a.example\npolicies:\n  client_key: { ipv6: 48 }\n${HOME}`,
  });
  assert.equal(unknown.length, 1);
  assert.match(unknown[0], /policies\.client_key\.ipv6: /);
  // One prefix set, the other keeps its default.
  for (const [field, rule] of [["ipv4_prefix: 24", [24, 64]], ["ipv6_prefix: 48", [32, 48]]]) {
    const dir = await tenantsDir({
      "a.example.yaml": `host: a.example\npolicies:\n  client_key: { ${field} }\n` +
        `  rate_limit: { per_second: 1, burst: 1 }\n${HOME}`,
    });
    const policies = (await loadTenants(dir)).get("a.example")!.policies;
    const [ipv4Prefix, ipv6Prefix] = rule as number[];
    assert.deepEqual(policies.rateLimit?.keys.rule, { ipv4Prefix, ipv6Prefix }, String(field));
  }
  // Both ends of both ranges are accepted.
  for (const [v4, v6] of [[8, 32], [32, 128]]) {
    const dir = await tenantsDir({
      "a.example.yaml": `host: a.example\npolicies:\n  client_key: { ipv4_prefix: ${v4}, ` +
        `ipv6_prefix: ${v6} }\n  rate_limit: { per_second: 1, burst: 1 }\n${HOME}`,
    });
    const policies = (await loadTenants(dir)).get("a.example")!.policies;
    assert.deepEqual(policies.rateLimit?.keys.rule, { ipv4Prefix: v4, ipv6Prefix: v6 });
  }
});

Deno.test("main.ts check refuses a client_key out of range, naming file, field and value", async () => {
  const [p, l, h] = freePorts(3);
  const dir = await writeConfig(proofConfig({ public: p, local_health: l, provider_health: h }), [
    { ...DEMO_TENANT, policies: { client_key: { ipv6_prefix: 16 } } },
  ]);
  try {
    const result = await checkConfig(dir.config);
    assert.notEqual(result.code, 0);
    assert.match(
      result.stderr + result.stdout,
      /demo\.test\.yaml:\d+:\d+: policies\.client_key\.ipv6_prefix: Expected a prefix length from 32 to 128 \(got 16\)/,
    );
  } finally {
    await Deno.remove(dir.dir, { recursive: true });
  }
});

/** The services the policy phase needs; the trusted proxy is 10.0.0.1. */
function services(): PolicyServices {
  return {
    clock: () => 1_000_000,
    trusted: AddressSet.of(["10.0.0.1"]),
    log: () => {},
    policyStats: new PolicyStats(),
  };
}

/** The status `policies` answer a request forwarded by the trusted proxy for `client` with. */
async function statusFor(policies: TenantPolicies, client: string): Promise<number> {
  const context = {
    requestId: "r",
    peer: "10.0.0.1",
    request: { rawHeaders: ["Host", "a.example", "X-Forwarded-For", client] },
    headers: { host: "a.example", "x-forwarded-for": client },
    head: { path: "/", method: "GET", host: "a.example" },
  } as unknown as RequestContext;
  const reply = await checkPolicies(context, policies, "-", services(), { headers: [] });
  return reply?.status ?? 200;
}

Deno.test("client_key resolves tenant → globals → default, one rule for every check of a tenant", async () => {
  const dir = await tenantsDir({
    "globals.yaml": "policies:\n  client_key: { ipv6_prefix: 56 }\n" +
      "  rate_limit: { per_second: 0.001, burst: 1 }\n",
    "own.example.yaml": `host: own.example\npolicies:\n  client_key: { ipv6_prefix: 128 }\n${HOME}`,
    "inherits.example.yaml": `host: inherits.example\n${HOME}`,
  });
  const registry = await loadTenants(dir);
  const inherits = registry.get("inherits.example")!.policies;
  // Two /64s of one /56: one bucket under the globals' /56.
  assert.equal(await statusFor(inherits, "2001:db8:1:2300::1"), 200);
  assert.equal(await statusFor(inherits, "2001:db8:1:23ff:ffff::9"), 429);
  assert.equal(await statusFor(inherits, "2001:db8:1:2400::"), 200, "the next /56");
  const own = registry.get("own.example")!.policies;
  assert.equal(await statusFor(own, "2001:db8:1:2300::1"), 200);
  assert.equal(await statusFor(own, "2001:db8:1:2300::2"), 200, "per address: its own rule");
  assert.equal(await statusFor(own, "2001:db8:1:2300::1"), 429);
  const none = compilePolicies({ rate_limit: { ...RATE, burst: 1 } }, {});
  assert.deepEqual(none.rateLimit?.keys.rule, DEFAULT, "nothing configured: IPv4 /32, IPv6 /64");
});

const RATE = {
  mode: "on" as const,
  per_second: 0.001,
  burst: 3,
  max_clients: 1000,
  block_after: 0,
  headers: false,
};

Deno.test("in process: the TTL block and block_after count and block the /64, not the address", async () => {
  const ttl = { mode: "on" as const, ttl_ms: 600_000, action: "404" as const, max_entries: 1000 };
  const rule = { name: "admin", path: "^/", action: "429" as const };
  const blocklist = { mode: "on" as const, rules: [rule], block_after: 3, window_ms: 60_000 };
  const policies = compilePolicies({ ttl_block: ttl, blocklist }, {});
  const statuses = [];
  for (let i = 1; i <= 6; i++) statuses.push(await statusFor(policies, `2001:db8:7:7::${i}`));
  assert.deepEqual(statuses, [429, 429, 429, 404, 404, 404], "three matches, then the block");
  assert.equal(await statusFor(policies, "2001:db8:7:7:ffff:ffff:ffff:ffff"), 404);
  assert.equal(await statusFor(policies, "2001:db8:7:8::"), 429, "the next /64: a match, no block");
});
