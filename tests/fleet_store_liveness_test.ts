/**
 * Truthful store health, end to end: a real edge (two request workers beside worker 0, which
 * makes no decisions, under its derived flags)
 * on a real redis-server that hangs — SIGSTOP keeps its connections open and the kernel still
 * accepts new ones, so the client stays "ready" — and then goes on (SIGCONT). While it hangs,
 * `/v1/health` and `portcullis_policy_store_up` say down, each isolate logs one line saying so,
 * and decisions keep answering at once on the edge's own tables; once it answers again, both say
 * up, each isolate logs one line, and the store decides again. A hang is found with traffic (late
 * decisions) and without (pings).
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
import { metricOf, RedisServer, storeOf, writeSalt } from "./fixtures/redis.ts";
import { peerTest } from "./fixtures/require.ts";

const SALT = "fleet-store-liveness-salt-012345\n";
/** The decision deadline the tenant gives its store (the schema's default). */
const TIMEOUT_MS = 50;
/** How long the edge may take to see a hang or a return (pings every 250 ms, three late answers). */
const NOTICE_MS = 8000;

/** An edge with two request isolates whose demo tenant limits clients on the store at `url`. */
async function storeEdge(url: string): Promise<Gateway> {
  const [p, l, h] = freePorts(3);
  const ports: LanePorts = { public: p, local_health: l, provider_health: h };
  const config = proofConfig(ports, {
    workers: 2,
    policy_stores: [url],
    observe: { salt_file: "salt" },
  });
  const policies = {
    rate_limit: {
      per_second: 1000,
      burst: 1000,
      store: { redis: { url, timeout_ms: TIMEOUT_MS } },
    },
  };
  const dir = await writeConfig(config, [{ ...DEMO_TENANT, policies }]);
  await writeSalt(dir.dir, SALT);
  return await Gateway.start(dir, ports);
}

/** One request for the demo tenant on a fresh connection: its status and how long it took. */
async function timedHit(edge: Gateway): Promise<{ status: number; ms: number }> {
  const started = performance.now();
  const response = await request(edge.ports.public, {
    path: "/",
    headers: [["Host", "demo.test"]],
  });
  return { status: response.status, ms: performance.now() - started };
}

/** How often `pattern` occurs in the edge's stderr. */
function lines(edge: Gateway, pattern: RegExp): number {
  return edge.stderr.match(new RegExp(pattern, "g"))?.length ?? 0;
}

/** The isolates that use the store, as `/v1/health` counts them. */
function isolatesOf(store: unknown): number {
  return (store as { isolates: number }).isolates;
}

/** The store's gauge on /metrics. */
function upGauge(edge: Gateway, url: string): Promise<number | undefined> {
  return metricOf(edge, `portcullis_policy_store_up{store="${url}"}`);
}

/** Waits until health and the gauge both say `up`. */
async function reported(edge: Gateway, url: string, up: boolean): Promise<void> {
  await waitFor(() => storeOf(edge), (store) => store.up === up, NOTICE_MS);
  await waitFor(() => upGauge(edge, url), (value) => value === (up ? 1 : 0), NOTICE_MS);
}

const DOWN = /fleet store \S+ is down\b/;
const UP = /fleet store \S+ is up\b/;
/** Why a hung store is down (a lost connection says so instead). */
const LATE = /is down \(3 answers in a row came later than 50 ms\)/;

peerTest(
  "fleet store: a hung store is reported down while decisions fall back at once, and up when it answers",
  ["redis-server"],
  async (peers) => {
    const redis = await RedisServer.start(peers["redis-server"]);
    let edge: Gateway | undefined;
    try {
      edge = await storeEdge(redis.url);
      // Request workers report their counts to worker 0 twice a second.
      await waitFor(() => storeOf(edge!), (s) => isolatesOf(s) === 3, NOTICE_MS);
      await reported(edge, redis.url, true);
      assert.equal(lines(edge, UP), 3, "up once per isolate (worker 0 and two request workers)");
      for (let i = 0; i < 4; i++) assert.equal((await timedHit(edge)).status, 200);
      const decided = await waitFor(() => storeOf(edge!), (s) => s.decisions >= 4);

      // The store hangs under traffic: a few decisions wait out their deadline, then it is down.
      redis.signal("SIGSTOP");
      const during: { status: number; ms: number }[] = [];
      for (let i = 0; i < 12; i++) during.push(await timedHit(edge));
      await reported(edge, redis.url, false);
      for (let i = 0; i < 12; i++) during.push(await timedHit(edge));
      assert.ok(
        during.every((h) => h.status === 200),
        `local limits answer: ${JSON.stringify(during)}`,
      );
      const slow = during.slice(12).filter((h) => h.ms >= TIMEOUT_MS);
      assert.ok(
        slow.length <= 2,
        `once down, no decision waits for the store: ${JSON.stringify(during)}`,
      );
      const hung = await waitFor(
        () => storeOf(edge!),
        (s) => s.fallbacks >= 24 && s.fallbacks_down >= 12,
      );
      assert.equal(hung.decisions, decided.decisions, "the hung store decided nothing");
      await waitFor(() => lines(edge!, DOWN), (n) => n === 3, NOTICE_MS);
      assert.equal(lines(edge, LATE), 3, `down for its late answers:\n${edge.stderr}`);

      // It answers again: up on its first answer in time, and it decides again.
      redis.signal("SIGCONT");
      await reported(edge, redis.url, true);
      await waitFor(() => lines(edge!, UP), (n) => n === 6, NOTICE_MS);
      for (let i = 0; i < 4; i++) assert.equal((await timedHit(edge)).status, 200);
      const back = await waitFor(() => storeOf(edge!), (s) => s.decisions >= hung.decisions + 4);
      assert.equal(back.fallbacks, hung.fallbacks, "no fallback once it answers");

      // A hang with no traffic at all is found by the pings, in every isolate.
      redis.signal("SIGSTOP");
      await reported(edge, redis.url, false);
      await waitFor(() => lines(edge!, DOWN), (n) => n === 6, NOTICE_MS);
      redis.signal("SIGCONT");
      await reported(edge, redis.url, true);
      await waitFor(() => lines(edge!, UP), (n) => n === 9, NOTICE_MS);
      assert.equal(lines(edge, LATE), 6);
      assert.equal(lines(edge, /fleet store .* is (up|down)/), 15, "one line per change");
    } finally {
      redis.signal("SIGCONT");
      await edge?.dispose();
      await redis.stop();
    }
  },
);
