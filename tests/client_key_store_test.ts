/**
 * Client keys by prefix on the fleet store: two real edges (under their derived flags) sharing a
 * real Redis, the client forwarded by a trusted proxy. Forty addresses of one IPv6 /64, sent to
 * both edges in turn, spend one bucket and earn one block — one `r:` key and one `b:` key in the
 * store, so both edges name the /64 alike — and the next /64 is another client on both edges.
 * With `ipv6_prefix: 128` every address has its own bucket on the store again. The blocklist's
 * `block_after` counts the /64 on each edge, and the block it writes reaches the other edge.
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
import { waitFor } from "./fixtures/in_process.ts";
import { spellV6 } from "./fixtures/ip_spellings.ts";
import { mulberry32 } from "./fixtures/random.ts";
import { RedisServer, storeOf, writeSalt } from "./fixtures/redis.ts";
import { peerTest } from "./fixtures/require.ts";

const SALT = "client-key-store-test-salt-0123456789\n";
/** The /64 the attacker rotates through (2001:db8:31:64::/64). */
const NET = 0x2001_0db8_0031_0064n << 64n;
const HOST = (1n << 64n) - 1n;

/** Forty addresses of `net` — its first, its last, 38 random — each in a random spelling. */
function rotation(seed: number, net = NET): string[] {
  const random = mulberry32(seed);
  const values = [net, net | HOST];
  while (values.length < 40) {
    values.push(net | BigInt(Math.floor(random() * 2 ** 32)) << 32n | BigInt(seed + values.length));
  }
  return values.map((value) => spellV6(random, value));
}

/** The tenants, each limited or blocked on the store at `url`. */
function tenants(url: string) {
  const store = { redis: { url, timeout_ms: 500 } };
  const slow = { per_second: 0.001, burst: 3, store };
  const ttl = (action: string) => ({ ttl_ms: 600_000, action, store });
  const routes = [
    { name: "home", match: { path: "/" }, respond: { status: 200, body: "home" } },
    { name: "admin", match: { path: "/admin" }, respond: { status: 200, body: "admin" } },
  ];
  return [
    { host: "rate.test", routes, policies: { rate_limit: slow } },
    {
      host: "block.test",
      routes,
      policies: { rate_limit: { ...slow, block_after: 1 }, ttl_block: ttl("404") },
    },
    { host: "per.test", routes, policies: { client_key: { ipv6_prefix: 128 }, rate_limit: slow } },
    {
      host: "list.test",
      routes,
      policies: {
        blocklist: { rules: [{ name: "admin", path: "^/admin", action: "404" }], block_after: 3 },
        ttl_block: ttl("429"),
      },
    },
  ];
}

/** An edge listing `url` as its store, keyed with the shared salt, trusting 127.0.0.1. */
async function storeEdge(url: string): Promise<Gateway> {
  const [p, l, h] = freePorts(3);
  const ports: LanePorts = { public: p, local_health: l, provider_health: h };
  const config = proofConfig(ports, {
    policy_stores: [url],
    observe: { salt_file: "salt" },
    trusted_proxies: ["127.0.0.1/32"],
  });
  const dir = await writeConfig(config, tenants(url));
  await writeSalt(dir.dir, SALT);
  return await Gateway.start(dir, ports);
}

/** One request for `host` on `edge`, forwarded by the trusted proxy for `client`. */
async function hit(edge: Gateway, host: string, client: string, path = "/"): Promise<number> {
  const headers: [string, string][] = [["Host", host], ["X-Forwarded-For", client]];
  return (await request(edge.ports.public, { path, headers })).status;
}

/** One request from each of `clients`, to the edges in turn. */
async function alternate(edges: Gateway[], host: string, clients: string[], path = "/") {
  const statuses: number[] = [];
  for (const [i, client] of clients.entries()) {
    statuses.push(await hit(edges[i % edges.length], host, client, path));
  }
  return statuses;
}

/** The store's keys under `kind` (`r` buckets, `b` blocks). */
async function keys(redis: RedisServer, kind: "r" | "b"): Promise<string[]> {
  return [...(await redis.dump()).keys()].filter((key) => key.startsWith(`portcullis:${kind}:`));
}

peerTest(
  "client keys on the fleet store: a /64 is one bucket and one block on every edge",
  ["redis-server"],
  async (peers, t) => {
    const redis = await RedisServer.start(peers["redis-server"]);
    const edges: Gateway[] = [];
    try {
      edges.push(await storeEdge(redis.url), await storeEdge(redis.url));
      for (const edge of edges) await waitFor(() => storeOf(edge), (s) => s?.up === true, 10_000);

      await t.step("forty addresses of one /64 spend one bucket", async () => {
        const statuses = await alternate(edges, "rate.test", rotation(1));
        assert.deepEqual(statuses, [200, 200, 200, ...Array(37).fill(429)]);
        assert.equal((await keys(redis, "r")).length, 1, "one bucket for the /64");
        const next = await alternate(edges, "rate.test", rotation(2, NET + (1n << 64n)));
        assert.deepEqual(next.slice(0, 4), [200, 200, 200, 429], "the next /64: its own bucket");
        assert.equal(await hit(edges[1], "rate.test", "2001:db8:31:63:ffff:ffff:ffff:ffff"), 200);
        assert.equal(await hit(edges[0], "rate.test", "2001:db8:31:64:ffff::"), 429);
        assert.equal((await keys(redis, "r")).length, 3, "the /64, the next, the previous");
        // The store made every one of those 82 decisions (workers report twice a second).
        const views = await waitFor(
          () => Promise.all(edges.map(storeOf)),
          (views) => views.reduce((sum, v) => sum + v.decisions + v.fallbacks, 0) === 82,
          10_000,
        );
        assert.deepEqual(views.map((v) => v.fallbacks), [0, 0], "no fallback to a local table");
      });

      await t.step("the block one edge writes covers the /64 on both", async () => {
        const rotated = rotation(3);
        const first = await alternate(edges, "block.test", rotated.slice(0, 5));
        assert.deepEqual(first.slice(0, 4), [200, 200, 200, 429]);
        for (const edge of edges) {
          await waitFor(() => storeOf(edge), (s) => s.blocks_received >= 1, 10_000);
        }
        const rest = await alternate(edges, "block.test", rotated.slice(5));
        assert.deepEqual(rest, Array(35).fill(404), "every address of the /64, on either edge");
        assert.equal((await keys(redis, "b")).length, 1, "one block, under the /64's key");
        assert.deepEqual(
          [
            await hit(edges[0], "block.test", "2001:db8:31:65::"),
            await hit(edges[1], "block.test", "2001:db8:31:63::1"),
          ],
          [200, 200],
          "the neighbouring /64s are not blocked",
        );
      });

      await t.step("ipv6_prefix 128: every address its own bucket on the store", async () => {
        const before = (await keys(redis, "r")).length;
        const clients = rotation(4).slice(0, 10);
        assert.deepEqual(await alternate(edges, "per.test", clients), Array(10).fill(200));
        assert.equal((await keys(redis, "r")).length, before + 10);
        const again = await alternate(edges, "per.test", Array(3).fill(clients[4]));
        assert.deepEqual(again, [200, 200, 429], "one address keeps its own limit");
      });

      await t.step(
        "the blocklist's block_after counts the /64; its block reaches both edges",
        async () => {
          const before = await Promise.all(edges.map(storeOf));
          const statuses = await alternate(edges, "list.test", rotation(5), "/admin");
          // Each isolate counts its own matches. The block is shared at once by the workers of
          // an edge (2 × W + 1 matches at most) and reaches the other edge through the store a
          // moment later, so each edge may count up to its own block first.
          const matched = statuses.indexOf(429);
          const most = edges.length * (TEST_WORKERS * 2 + 1);
          assert.ok(matched >= 3 && matched <= most, `blocked after ${matched}: ${statuses}`);
          for (const [i, edge] of edges.entries()) {
            const seen = before[i].blocks_received;
            await waitFor(() => storeOf(edge), (s) => s.blocks_received > seen, 10_000);
            assert.equal(await hit(edge, "list.test", "2001:db8:31:64:1:2:3:4"), 429);
            assert.equal(await hit(edge, "list.test", "2001:db8:31:65::1"), 200);
          }
        },
      );
    } finally {
      for (const edge of edges) await edge.dispose();
      await redis.stop();
    }
  },
);
