/**
 * Rule 7 of issue 33, for the fleet store's rate decision (src/fleet/gcra_script.ts): on the Redis
 * store, an allowed request ends the client's run of denials, so `rate_limit.block_after` counts
 * denials *in a row*. Were the run kept across an admission, a client that keeps to its rate but
 * is refused now and then would collect denials until it is blocked for `ttl_block.ttl_ms`. A real
 * edge under its derived flags on a real redis-server, the client forwarded by a trusted proxy:
 * what the client gets, request by request, and the run the store holds.
 *
 * @module
 */
import assert from "node:assert/strict";
import {
  DEMO_TENANT,
  freePorts,
  Gateway,
  type LanePorts,
  proofConfig,
  writeConfig,
} from "./fixtures/gateway.ts";
import { request } from "./fixtures/http_client.ts";
import { waitFor } from "./fixtures/in_process.ts";
import { RedisServer, storeOf, writeSalt } from "./fixtures/redis.ts";
import { peerTest } from "./fixtures/require.ts";

const SALT = "gcra-denial-run-test-salt-0123456789\n";
/**
 * One token every 2 s, a bucket of two. Two tokens, so that when one comes back the store still
 * holds the bucket (it expires a bucket only once it is full again): the admission must end the
 * run itself, not the key's expiry.
 */
const PER_SECOND = 0.5;
const BURST = 2;
const INTERVAL_MS = 1000 / PER_SECOND;
const BLOCK_AFTER = 3;
/** What a client on the TTL list gets (so a block is told apart from a rate denial, 429). */
const BLOCKED = 404;

/** An edge keyed with the test's salt, trusting 127.0.0.1 to forward clients, on `url`. */
async function storeEdge(url: string): Promise<Gateway> {
  const [p, l, h] = freePorts(3);
  const ports: LanePorts = { public: p, local_health: l, provider_health: h };
  const config = proofConfig(ports, {
    policy_stores: [url],
    observe: { salt_file: "salt" },
    trusted_proxies: ["127.0.0.1/32"],
  });
  // Far above what a decision takes, so a loaded machine does not make the edge decide alone.
  const store = { redis: { url, timeout_ms: 5000 } };
  const policies = {
    rate_limit: { per_second: PER_SECOND, burst: BURST, block_after: BLOCK_AFTER, store },
    ttl_block: { ttl_ms: 600_000, action: String(BLOCKED), store },
  };
  const dir = await writeConfig(config, [{ ...DEMO_TENANT, policies }]);
  await writeSalt(dir.dir, SALT);
  return await Gateway.start(dir, ports);
}

/** One request for the demo tenant, forwarded by the trusted proxy for `client`. */
async function hit(edge: Gateway, client: string): Promise<number> {
  const headers: [string, string][] = [["Host", "demo.test"], ["X-Forwarded-For", client]];
  return (await request(edge.ports.public, { path: "/", headers })).status;
}

/** The rate buckets the store holds, by key (keys are salted hashes: no client to read in them). */
async function buckets(redis: RedisServer): Promise<Map<string, { t?: string; d?: string }>> {
  const out = new Map<string, { t?: string; d?: string }>();
  for (const [key, { value }] of await redis.dump()) {
    if (key.startsWith("portcullis:r:")) out.set(key, JSON.parse(value));
  }
  return out;
}

peerTest(
  "rule 7: on the Redis store an allowed request resets the denial run that leads to block_after",
  ["redis-server"],
  async (peers) => {
    const redis = await RedisServer.start(peers["redis-server"]);
    let edge: Gateway | undefined;
    try {
      edge = await storeEdge(redis.url);
      // Both isolates linked (the main one and the public worker), not just one: a decision in an
      // isolate not yet linked falls back.
      await waitFor(
        () => storeOf(edge!),
        (s) => s?.up === true && s.isolates >= 2 && s.isolates_up === s.isolates,
        10_000,
      );
      // Another client first: the edge's link and the store's script are warm before the timed part.
      assert.equal(await hit(edge, "198.51.100.9"), 200);
      const warm = new Set((await buckets(redis)).keys());
      const client = "203.0.113.41";
      const storedRun = async () => {
        const mine = [...await buckets(redis)].filter(([key]) => !warm.has(key));
        assert.equal(mine.length, 1, `one bucket for the client: ${mine.map(([key]) => key)}`);
        return mine[0][1].d;
      };

      // Two denials, then one token comes back (one of two: the bucket is not full, the store
      // keeps it) and is spent: the run ends there.
      const first = [];
      for (let n = 0; n < BURST + 2; n++) first.push(await hit(edge, client));
      assert.deepEqual(first, [200, 200, 429, 429], JSON.stringify(await storeOf(edge)));
      assert.equal(await storedRun(), "2");
      await new Promise((resolve) => setTimeout(resolve, INTERVAL_MS + 150));
      assert.equal(await hit(edge, client), 200, "a token came back");
      const afterAdmission = await storedRun();

      // Two more denials make a run of two, not four: not blocked.
      const again = [await hit(edge, client), await hit(edge, client)];
      assert.deepEqual(again, [429, 429], "two denials after an admission are not a block");
      assert.equal(afterAdmission, "0", "the store ended the run");
      assert.equal(await storedRun(), "2");
      // The other side: the third in a row reaches block_after; the block follows it.
      assert.equal(await hit(edge, client), 429, "the third denial in a row writes the block");
      assert.equal(await hit(edge, client), BLOCKED, "then the client is blocked");
      const view = await waitFor(() => storeOf(edge!), (s) => s.decisions >= 9, 10_000);
      assert.equal(view.fallbacks, 0, "every decision was the store's");
    } finally {
      await edge?.dispose();
      await redis.stop();
    }
  },
);
