/**
 * The fleet store end to end: real edges (under their derived flags) sharing one real Redis. One
 * rate limit for the fleet; keys that carry no host or address and expire by themselves; a block
 * made on one edge refused by the other; the store killed under load — the edges serve on their
 * own tables (which kept the fleet's state: no fresh burst for a client that spent its budget),
 * count and show the fallback — and back again. The config rules around it: a tenant
 * file may name only a store the edge lists, and a store needs the tenant salt.
 *
 * @module
 */
import assert from "node:assert/strict";
import {
  DEMO_TENANT,
  derivedFlags,
  freePorts,
  Gateway,
  type LanePorts,
  proofConfig,
  writeConfig,
} from "./fixtures/gateway.ts";
import { request } from "./fixtures/http_client.ts";
import { waitFor } from "./fixtures/in_process.ts";
import { metricOf as metric, RedisServer, storeOf, writeSalt } from "./fixtures/redis.ts";
import { peerTest } from "./fixtures/require.ts";

const SALT = "fleet-store-test-salt-0123456789\n";

/** An edge config on free ports, listing `url` as its store and keyed with the shared salt. */
async function fleetEdge(
  url: string,
  policies: Record<string, unknown>,
  workers = 0,
): Promise<Gateway> {
  const [p, l, h] = freePorts(3);
  const ports: LanePorts = { public: p, local_health: l, provider_health: h };
  const config = proofConfig(ports, {
    ...(workers > 0 ? { workers } : {}),
    policy_stores: [url],
    observe: { salt_file: "salt" },
    // The test stands in for other clients with X-Forwarded-For (see `hit`).
    trusted_proxies: ["127.0.0.1/32"],
  });
  const dir = await writeConfig(config, [{ ...DEMO_TENANT, policies }]);
  await writeSalt(dir.dir, SALT);
  return await Gateway.start(dir, ports);
}

/** One request for the demo tenant from `client` (127.0.0.1 itself by default), on a fresh connection. */
async function hit(edge: Gateway, client?: string): Promise<number> {
  const headers: [string, string][] = [["Host", "demo.test"]];
  if (client) headers.push(["X-Forwarded-For", client]);
  const response = await request(edge.ports.public, { path: "/", headers });
  return response.status;
}

/** Waits until every edge's store is up. */
async function storesUp(edges: Gateway[]): Promise<void> {
  for (const edge of edges) await waitFor(() => storeOf(edge), (s) => s?.up === true, 10_000);
}

/** Two edges on one fresh Redis, under `policies` (given the store's URL); `more()` adds one. */
interface Fleet {
  readonly redis: RedisServer;
  readonly edges: Gateway[];
  more(): Promise<Gateway>;
}

/** A test of two edges sharing one Redis, every process stopped after it. */
function fleetTest(
  name: string,
  policiesFor: (url: string) => Record<string, unknown>,
  fn: (fleet: Fleet) => Promise<void>,
): void {
  peerTest(name, ["redis-server"], async (peers) => {
    const redis = await RedisServer.start(peers["redis-server"]);
    const edges: Gateway[] = [];
    const more = async () => {
      const edge = await fleetEdge(redis.url, policiesFor(redis.url));
      edges.push(edge);
      return edge;
    };
    try {
      await more();
      await more();
      await storesUp(edges);
      await fn({ redis, edges, more });
    } finally {
      for (const edge of edges) await edge.dispose();
      await redis.stop();
    }
  });
}

fleetTest(
  "fleet store: two edges admit one burst between them, on keys with no host or address",
  (url) => ({ rate_limit: { per_second: 0.001, burst: 6, store: { redis: { url } } } }),
  async ({ redis, edges }) => {
    const statuses = [await hit(edges[0])];
    // One token spent at one per 1,000 s: the bucket is full again in 1,000 s, and goes then.
    const [[, first]] = await redis.dump();
    assert.ok(first.ttlMs > 990_000 && first.ttlMs <= 1_000_001, `TTL ${first.ttlMs}`);
    for (let i = 1; i < 20; i++) statuses.push(await hit(edges[i % 2]));
    assert.deepEqual(statuses, [...Array(6).fill(200), ...Array(14).fill(429)]);
    // Request workers report their counters to worker 0 twice a second.
    const decided = () => Promise.all(edges.map(storeOf));
    const [a, b] = await waitFor(decided, ([a, b]) => a.decisions + b.decisions === 20);
    assert.equal(a.fallbacks + b.fallbacks, 0);

    const stored = await redis.dump();
    assert.equal(stored.size, 1, `one bucket: ${[...stored.keys()]}`);
    for (const [key, { value, ttlMs }] of stored) {
      assert.match(key, /^portcullis:r:[A-Za-z0-9_-]{11}:[A-Za-z0-9_-]{22}$/);
      for (const plain of ["demo.test", "127.0.0.1"]) {
        assert.ok(!key.includes(plain) && !value.includes(plain), `${plain} in ${key} ${value}`);
      }
      // Six tokens at one per 1,000 s: the bucket is full again in ~6,000 s, and goes then.
      assert.ok(ttlMs > 5_000_000 && ttlMs <= 6_000_001, `expires with its bucket: ${ttlMs}`);
    }
    const flags = await derivedFlags(edges[0].dir.config);
    assert.ok(flags.some((f) => f.startsWith("--allow-net=") && f.includes(`:${redis.port}`)));
    assert.ok(!flags.some((f) => f.startsWith("--allow-env")), "no environment is granted");
  },
);

fleetTest(
  "fleet store: a client blocked on one edge is refused by the other, which learns it from the store",
  (url) => ({
    // Two requests, then the second denial in a row puts the client on the list for 10 min.
    rate_limit: { per_second: 0.001, burst: 2, block_after: 2, store: { redis: { url } } },
    ttl_block: { ttl_ms: 600_000, action: "404", store: { redis: { url } } },
  }),
  async ({ redis, edges, more }) => {
    const [a, b] = edges;
    assert.deepEqual([await hit(a), await hit(a), await hit(a), await hit(a)], [
      200,
      200,
      429,
      429,
    ]);
    // The block is in the store, under a hashed key, with its TTL.
    const blocks = [...(await redis.dump())].filter(([key]) => key.startsWith("portcullis:b:"));
    assert.equal(blocks.length, 1);
    assert.ok(blocks[0][1].ttlMs > 590_000, `the block keeps its TTL: ${blocks[0][1].ttlMs}`);
    // Edge b never saw this client's denials, yet once the block reached it, refuses it as
    // blocked (404) on the very first request — not 429 from the store's own count.
    await waitFor(() => storeOf(b), (s) => s.blocks_received >= 1);
    assert.equal(await hit(b), 404);
    await waitFor(() => storeOf(a), (s) => s.blocks_published === 1);

    // An edge that starts after the block reads it from the store when it subscribes.
    await more();
    await waitFor(() => storeOf(edges[2]), (s) => s.up && s.blocks_received >= 1, 10_000);
    assert.equal(await hit(edges[2]), 404);
  },
);

fleetTest(
  "fleet store: killed under load, the edges serve on their own tables and say so; back, it decides again",
  (url) => ({ rate_limit: { per_second: 0.001, burst: 3, store: { redis: { url } } } }),
  async ({ redis, edges }) => {
    const load = async (client?: string) => {
      const statuses: number[] = [];
      for (let i = 0; i < 12; i++) statuses.push(await hit(edges[i % 2], client));
      return statuses;
    };
    assert.deepEqual(await load(), [200, 200, 200, ...Array(9).fill(429)], "one fleet bucket");

    await redis.stop();
    // Each edge now decides alone. Its table went on from the store's answers, so the client
    // that spent the fleet's bucket gets no fresh one; a new client gets each edge's own burst.
    const spent = await load();
    assert.deepEqual(spent, Array(12).fill(429), `no fresh burst for a spent client: ${spent}`);
    const fresh = await load("198.51.100.7");
    assert.equal(fresh.filter((s) => s === 200).length, 6, `local limits: ${fresh}`);
    assert.ok(fresh.every((s) => s === 200 || s === 429), `no failure while down: ${fresh}`);
    for (const edge of edges) {
      const view = await waitFor(() => storeOf(edge), (s) => !s.up && s.fallbacks >= 12);
      assert.ok(view.fallbacks_down >= 1, "a fallback while the store is known down");
      assert.equal(await metric(edge, `portcullis_policy_store_up{store="${redis.url}"}`), 0);
      assert.equal(edge.stderr.match(/fleet store .* is down/g)?.length, 2, "once per isolate");
    }

    await redis.resume(); // empty: the fleet bucket starts afresh
    await storesUp(edges);
    const before = await Promise.all(edges.map(storeOf));
    assert.deepEqual(await load(), [200, 200, 200, ...Array(9).fill(429)], "one bucket again");
    const after = await waitFor(
      () => Promise.all(edges.map(storeOf)),
      (views) =>
        views[0].decisions + views[1].decisions ===
          before[0].decisions + before[1].decisions + 12,
    );
    assert.deepEqual(after.map((v) => v.fallbacks), before.map((v) => v.fallbacks));
    for (const edge of edges) {
      assert.equal(edge.stderr.match(/fleet store .* is up/g)?.length, 4, "up at boot and again");
    }
  },
);
