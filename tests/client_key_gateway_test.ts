/**
 * Client keys by prefix against a real gateway (a subprocess under the flags `main.ts flags`
 * derives, `PORTCULLIS_TEST_WORKERS` request workers): the attack of issue 31 finding 7 — forty
 * addresses of one IPv6 /64, each forwarded by a trusted proxy in its own spelling — gets no more
 * than the burst past the rate limit, earns one TTL block for the whole /64 (from the rate limit's
 * and from the blocklist's `block_after`), while the next /64 and the previous one are counted
 * apart; `ipv6_prefix: 128` gives every address its own bucket again; `ipv4_prefix: 24` counts an
 * IPv4 /24, dotted or IPv4-mapped, as one client.
 *
 * @module
 */
import assert from "node:assert/strict";
import {
  freePorts,
  Gateway,
  type LanePorts,
  proofConfig,
  TEST_WORKERS,
  writeConfig,
} from "./fixtures/gateway.ts";
import { request } from "./fixtures/http_client.ts";
import { spellV6 } from "./fixtures/ip_spellings.ts";
import { mulberry32 } from "./fixtures/random.ts";

/** The /64 the attacker rotates through (2001:db8:31:64::/64). */
const NET = 0x2001_0db8_0031_0064n << 64n;
const HOST = (1n << 64n) - 1n;
const BURST = 3;
/** One token per 1,000 s: nothing refills while a test runs. */
const SLOW = { per_second: 0.001, burst: BURST };

/**
 * Forty addresses of {@link NET}: its first and last, and 38 random ones, each in a random
 * spelling (case, leading zeros, "::", a dotted tail, a zone id, brackets).
 */
function rotation(seed: number, net = NET): string[] {
  const random = mulberry32(seed);
  const values = [net, net | HOST];
  while (values.length < 40) {
    values.push(net | BigInt(Math.floor(random() * 2 ** 32)) << 32n | BigInt(seed + values.length));
  }
  return values.map((value) => spellV6(random, value));
}

/** A tenant answering `GET /` and `GET /admin` with 200, under `policies`. */
function tenant(host: string, policies: Record<string, unknown>) {
  return {
    host,
    routes: [
      { name: "home", match: { path: "/" }, respond: { status: 200, body: "home" } },
      { name: "admin", match: { path: "/admin" }, respond: { status: 200, body: "admin" } },
    ],
    policies,
  };
}

/** One request for `host` forwarded by the trusted proxy (127.0.0.1) for `client`. */
async function hit(edge: Gateway, host: string, client: string, path = "/"): Promise<number> {
  const headers: [string, string][] = [["Host", host], ["X-Forwarded-For", client]];
  return (await request(edge.ports.public, { path, headers })).status;
}

/** The statuses of one request from each of `clients` in turn. */
async function each(edge: Gateway, host: string, clients: string[], path = "/") {
  const statuses: number[] = [];
  for (const client of clients) statuses.push(await hit(edge, host, client, path));
  return statuses;
}

Deno.test("client keys by prefix: a trusted proxy's forty addresses of one /64 are one client", async (t) => {
  const [p, l, h] = freePorts(3);
  const ports: LanePorts = { public: p, local_health: l, provider_health: h };
  const ttl = (action: string) => ({ ttl_ms: 600_000, action });
  const dir = await writeConfig(proofConfig(ports, { trusted_proxies: ["127.0.0.1/32"] }), [
    tenant("rate.test", { rate_limit: SLOW }),
    tenant("block.test", { rate_limit: { ...SLOW, block_after: 1 }, ttl_block: ttl("404") }),
    tenant("list.test", {
      blocklist: { rules: [{ name: "admin", path: "^/admin", action: "404" }], block_after: 3 },
      ttl_block: ttl("429"),
    }),
    tenant("per.test", {
      client_key: { ipv6_prefix: 128 },
      rate_limit: { ...SLOW, block_after: 1 },
      ttl_block: ttl("404"),
    }),
    tenant("v4.test", { client_key: { ipv4_prefix: 24 }, rate_limit: SLOW }),
  ]);
  const edge = await Gateway.start(dir, ports);
  try {
    await t.step("the rate limit admits the burst, not one per address", async () => {
      const statuses = await each(edge, "rate.test", rotation(1));
      assert.deepEqual(statuses, [...Array(BURST).fill(200), ...Array(40 - BURST).fill(429)]);
      // Both sides of the boundary: the next /64 and the previous one are other clients.
      const next = rotation(2, NET + (1n << 64n)); // its first address comes first
      assert.deepEqual(await each(edge, "rate.test", next.slice(0, 4)), [200, 200, 200, 429]);
      assert.equal(await hit(edge, "rate.test", "2001:db8:31:63:ffff:ffff:ffff:ffff"), 200);
      assert.equal(await hit(edge, "rate.test", "2001:DB8:31:64:FFFF:FFFF:FFFF:FFFF"), 429);
      // IPv4 is still counted by address.
      assert.deepEqual(await each(edge, "rate.test", Array(4).fill("198.51.100.7")), [
        200,
        200,
        200,
        429,
      ]);
      assert.equal(await hit(edge, "rate.test", "198.51.100.8"), 200);
      assert.equal(await hit(edge, "rate.test", "::ffff:198.51.100.7"), 429, "mapped is IPv4");
    });

    await t.step("the TTL block the rate limit writes covers the /64", async () => {
      const statuses = await each(edge, "block.test", rotation(3));
      assert.deepEqual(statuses, [200, 200, 200, 429, ...Array(36).fill(404)]);
      assert.equal(await hit(edge, "block.test", "2001:db8:31:64::dead"), 404);
      assert.equal(await hit(edge, "block.test", "2001:db8:31:65::"), 200, "the next /64");
      assert.equal(await hit(edge, "block.test", "2001:db8:31:63:ffff:ffff:ffff:ffff"), 200);
    });

    await t.step(
      "the blocklist's block_after counts the /64, and its block covers it",
      async () => {
        const statuses = await each(edge, "list.test", rotation(4), "/admin");
        // Each request worker counts its own matches (the block is shared): with one worker the
        // third match blocks; with W workers, at most W × 2 + 1 matches come first.
        const matched = statuses.indexOf(429);
        assert.ok(
          matched >= 3 && matched <= TEST_WORKERS * 2 + 1,
          `blocked after ${matched} matches: ${statuses}`,
        );
        assert.deepEqual(statuses.slice(0, matched), Array(matched).fill(404));
        assert.deepEqual(statuses.slice(matched), Array(40 - matched).fill(429));
        assert.equal(await hit(edge, "list.test", "2001:db8:31:64::beef"), 429, "blocked for /");
        assert.equal(await hit(edge, "list.test", "2001:db8:31:65::"), 200, "the next /64");
      },
    );

    await t.step("ipv6_prefix 128 gives every address its own bucket and block again", async () => {
      const clients = rotation(5);
      assert.deepEqual(await each(edge, "per.test", clients), Array(40).fill(200));
      const one = Array(4).fill(clients[7]);
      assert.deepEqual(await each(edge, "per.test", one), [200, 200, 429, 404], "its own limit");
      // The block it earned is its own too: its /64 neighbours are not blocked.
      assert.equal(await hit(edge, "per.test", clients[8]), 200);
    });

    await t.step("ipv4_prefix 24 counts a /24, dotted or IPv4-mapped, as one client", async () => {
      const clients = ["203.0.113.0", "203.0.113.255", "::ffff:203.0.113.77", "203.0.113.9"];
      assert.deepEqual(await each(edge, "v4.test", clients), [200, 200, 200, 429]);
      assert.equal(await hit(edge, "v4.test", "203.0.114.0"), 200, "the next /24");
      assert.equal(await hit(edge, "v4.test", "203.0.112.255"), 200, "the previous /24");
      assert.equal(await hit(edge, "v4.test", "0:0:0:0:0:FFFF:CB00:71C8"), 429, "203.0.113.200");
      const v6 = [
        "2001:db8:31:64::1",
        "2001:db8:31:64::2",
        "2001:db8:31:64::3",
        "2001:db8:31:64::4",
      ];
      assert.deepEqual(await each(edge, "v4.test", v6), [200, 200, 200, 429], "IPv6: its /64");
    });
  } finally {
    await edge.dispose();
  }
});
