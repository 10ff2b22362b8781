/**
 * Proof 15 — one rate budget for a fleet: a real hub serves a tenant whose per-client limit is
 * decided on a real Redis, and three remote-mode edges (two request workers each, under the flags
 * `flags` prints) follow it. One client (127.0.0.1) sends round-robin over all six workers, three
 * requests at a time on fresh connections. The claims:
 *
 * - the fleet admits one budget — GCRA allows at most `burst + rate × t` over t seconds of
 *   decisions, and at least that, less one, when the client keeps asking faster than the rate — not
 *   one per edge or per worker, and every decision is the store's (no fallback);
 * - Redis killed under load, every request is still answered 200 or 429 within a bounded time; each
 *   edge says the store is down (`/v1/health`, `/metrics`) and limits on its own shared table,
 *   which every store answer moved to the fleet's state: the client, whose bucket was empty, gets
 *   no fresh burst on any edge — each admits at its own rate, so the fleet admits more than one
 *   budget (three rates) but never three bursts;
 * - Redis back (same port, empty), each edge says it is up again, the store makes every decision
 *   again (no new fallback) and the fleet is back to one budget.
 *
 * Why these numbers: `burst` 20 and 10 a second let the client (hundreds of requests a second, even
 * on a busy two-core machine) empty the bucket within each two-second phase, so edges deciding as
 * if alone would show as ~3× the budget (~120 admitted where one budget is ~40), and edges that
 * forgot the fleet's state at the outage as a fresh burst each (~40 per edge). The store's
 * `timeout_ms` is 500 (default 50): this proof is about the budget, not latency, and three edges
 * of three isolates each on two cores can stall an event loop past 50 ms, which would be a
 * fallback.
 *
 * @module
 */
import assert from "node:assert/strict";
import { parse, stringify } from "yaml";
import { Gateway } from "../tests/fixtures/gateway.ts";
import { disposeAll, edgeStatus, HubProcess, writeRemoteEdge } from "../tests/fixtures/hub.ts";
import {
  exchange,
  json,
  parseResponses,
  renderRequest,
  request,
} from "../tests/fixtures/http_client.ts";
import { waitFor } from "../tests/fixtures/in_process.ts";
import {
  metricOf as metric,
  RedisServer,
  storeOf,
  type StoreView,
  writeSalt,
} from "../tests/fixtures/redis.ts";
import { peerTest } from "../tests/fixtures/require.ts";

const RATE = 10;
const BURST = 20;
const NODES = ["edge-a", "edge-b", "edge-c"];
const SALT = "proof-15-fleet-budget-salt-0123456789\n";
/** Requests in flight at once (each on its own connection). */
const CONCURRENCY = 3;
/** The longest a request may take: an edge that hangs on a dead store fails the proof. */
const ANSWER_MS = 3000;
/** How long each phase sends. */
const PHASE_MS = 2000;

/** One request: the edge it went to, when it was sent and answered (ms), and its status. */
interface Outcome {
  readonly edge: number;
  readonly sentAt: number;
  readonly doneAt: number;
  readonly status: number | "no answer";
}

/** The hub's tenant: `GET /` answered by the edge, limited per client on the store at `url`. */
function tenantFile(url: string): string {
  return stringify({
    host: "demo.test",
    routes: [{ name: "home", match: { path: "/" }, respond: { status: 200, body: "home" } }],
    policies: {
      rate_limit: {
        per_second: RATE,
        burst: BURST,
        store: { redis: { url, timeout_ms: 500 } },
      },
    },
  });
}

/** A remote-mode edge following `hub` as `node`: two workers, `url` its store, the fleet salt. */
async function startFleetEdge(hub: HubProcess, node: string, url: string): Promise<Gateway> {
  const { dir, ports } = await writeRemoteEdge(hub, node);
  const config = parse(await Deno.readTextFile(dir.config)) as Record<string, unknown>;
  Object.assign(config, { workers: 2, policy_stores: [url], observe: { salt_file: "salt" } });
  await Deno.writeTextFile(dir.config, stringify(config));
  await writeSalt(dir.dir, SALT);
  const edge = await Gateway.start(dir, ports).catch(async (error) => {
    await Deno.remove(dir.dir, { recursive: true }).catch(() => {});
    throw error;
  });
  try {
    await waitFor(() => edgeStatus(edge), (status) => status.tenants === 1, 10_000);
    await waitFor(() => storeOf(edge), (store) => store.up, 10_000);
  } catch (error) {
    await edge.dispose();
    throw new Error(`${node} did not get its tenant and store: ${error}\n${edge.stderr}`);
  }
  return edge;
}

/** One request for demo.test on a fresh connection, given up after {@link ANSWER_MS}. */
async function hit(edge: Gateway): Promise<number | "no answer"> {
  const bytes = renderRequest({ path: "/", headers: [["Host", "demo.test"]] });
  try {
    return parseResponses(await exchange(edge.ports.public, bytes, ANSWER_MS))[0]?.status ??
      "no answer";
  } catch {
    return "no answer";
  }
}

/**
 * Sends requests round-robin over `edges`, {@link CONCURRENCY} at a time, until `stop()` holds;
 * each outcome is pushed to `seen` as it comes.
 */
async function drive(edges: Gateway[], stop: () => boolean, seen: Outcome[] = []) {
  async function lane(offset: number): Promise<void> {
    for (let k = offset; !stop(); k++) {
      const edge = k % edges.length;
      const sentAt = performance.now();
      const status = await hit(edges[edge]);
      seen.push({ edge, sentAt, doneAt: performance.now(), status });
    }
  }
  await Promise.all(Array.from({ length: CONCURRENCY }, (_, i) => lane(i)));
  return seen;
}

/** The most one bucket admits over `ms` of decisions (GCRA: the burst, then the rate). */
function budget(ms: number): number {
  return BURST + RATE * ms / 1000;
}

/** From the first send to the last answer (every decision lies within), in ms. */
function outerMs(outcomes: readonly Outcome[]): number {
  return Math.max(...outcomes.map((o) => o.doneAt)) - Math.min(...outcomes.map((o) => o.sentAt));
}

/** From the first answer to the last send (the decisions span at least this), in ms. */
function innerMs(outcomes: readonly Outcome[]): number {
  return Math.max(...outcomes.map((o) => o.sentAt)) - Math.min(...outcomes.map((o) => o.doneAt));
}

/** The 200s among `outcomes` (of edge `edge` when given). */
function admitted(outcomes: readonly Outcome[], edge?: number): number {
  return outcomes.filter((o) => o.status === 200 && (edge === undefined || o.edge === edge))
    .length;
}

/** Asserts every request was answered, 200 or 429. */
function assertAnswered(outcomes: readonly Outcome[], phase: string): void {
  const other = outcomes.filter((o) => o.status !== 200 && o.status !== 429);
  assert.deepEqual(other, [], `${phase}: every request answered 200 or 429`);
}

/** Asserts the fleet admitted one budget over `outcomes`: within GCRA's bounds for their span. */
function assertOneBudget(outcomes: readonly Outcome[], phase: string): void {
  const [fleet, inner, outer] = [admitted(outcomes), innerMs(outcomes), outerMs(outcomes)];
  const low = Math.floor(budget(inner)) - 1, high = Math.floor(budget(outer)) + 3;
  assert.ok(
    fleet >= low && fleet <= high,
    `${phase}: the fleet admitted ${fleet} of ${outcomes.length} in ${outer.toFixed(0)} ms; ` +
      `one budget is ${low}…${high}`,
  );
}

/**
 * Every edge's store view once its workers' reports account for every request sent to it (each
 * request is one decision or one fallback; workers report twice a second).
 */
function settled(edges: Gateway[], all: readonly Outcome[]): Promise<StoreView[]> {
  const sent = edges.map((_, i) => all.filter((o) => o.edge === i).length);
  return waitFor(
    () => Promise.all(edges.map(storeOf)),
    (views) => views.every((v, i) => v.decisions + v.fallbacks === sent[i]),
    10_000,
  );
}

peerTest(
  "proof 15: three edges of two workers admit one client one fleet budget; alone while the store is down",
  ["redis-server"],
  async (peers) => {
    const started = performance.now();
    const redis = await RedisServer.start(peers["redis-server"]);
    let hub: HubProcess | undefined;
    const edges: Gateway[] = [];
    try {
      hub = await HubProcess.start({
        nodes: NODES,
        runtime: { "demo.test.yaml": tenantFile(redis.url) },
      });
      const following = hub;
      edges.push(
        ...await Promise.all(NODES.map((node) => startFleetEdge(following, node, redis.url))),
      );
      const all: Outcome[] = [];

      // One budget: six workers, one bucket on the store.
      const oneStart = performance.now();
      const one = await drive(edges, () => performance.now() - oneStart >= PHASE_MS);
      all.push(...one);
      assertAnswered(one, "store up");
      assertOneBudget(one, "store up");
      const views = await settled(edges, all);
      assert.equal(views.reduce((sum, v) => sum + v.decisions, 0), one.length);
      assert.deepEqual(views.map((v) => v.fallbacks), [0, 0, 0], "the store made every decision");
      for (const edge of edges) {
        const { workers } = await json<{ workers: { admitted: number[] } }>(
          await request(edge.ports.local_health, { path: "/v1/health" }),
        );
        assert.ok(
          workers.admitted[1] > 0 && workers.admitted[2] > 0,
          `both workers served: ${workers.admitted}`,
        );
      }

      // The store killed under load, once the client has emptied its (refilled) bucket again.
      const down: Outcome[] = [];
      let stopAt = Infinity;
      const loading = drive(edges, () => performance.now() >= stopAt, down);
      await waitFor(() => down.filter((o) => o.status === 429).length, (n) => n >= 6, 10_000);
      const killedAt = performance.now();
      await redis.stop();
      stopAt = performance.now() + PHASE_MS;
      await loading;
      all.push(...down);
      assertAnswered(down, "store killed");
      const alone = down.filter((o) => o.sentAt >= killedAt);
      const aloneMs = Math.max(...alone.map((o) => o.doneAt)) - killedAt;
      // Each edge's table went on from the fleet's last answer (an empty bucket), not a fresh
      // one: the rate alone, never the burst again. +2: a token the store may grant before the
      // kill lands, and a decision in flight; -2 at the low end for the same two at the start.
      const own = RATE * aloneMs / 1000 + 2;
      for (let i = 0; i < edges.length; i++) {
        const n = admitted(alone, i);
        const least = Math.floor(RATE * innerMs(alone.filter((o) => o.edge === i)) / 1000) - 2;
        assert.ok(n >= least, `edge ${i} served at its own rate: ${n} ≥ ${least}`);
        assert.ok(n <= own, `edge ${i} got no fresh burst: ${n} ≤ ${own.toFixed(1)}`);
      }
      const fleet = admitted(alone);
      assert.ok(fleet > own, `each edge decided alone: the fleet admitted ${fleet} > ${own}`);
      for (const view of await settled(edges, all)) {
        assert.ok(
          !view.up && view.fallbacks > 0 && view.fallbacks_down > 0,
          `down, and the fallbacks counted: ${JSON.stringify(view)}`,
        );
      }
      for (const edge of edges) {
        assert.equal(await metric(edge, `portcullis_policy_store_up{store="${redis.url}"}`), 0);
        const series =
          `portcullis_policy_store_fallbacks_total{store="${redis.url}",reason="down"}`;
        assert.ok((await metric(edge, series))! > 0, series);
      }

      // The store back, empty: up again everywhere, every decision the store's, one budget again.
      await redis.resume();
      for (const edge of edges) await waitFor(() => storeOf(edge), (s) => s.up, 10_000);
      const before = await settled(edges, all);
      const backStart = performance.now();
      const back = await drive(edges, () => performance.now() - backStart >= PHASE_MS);
      all.push(...back);
      assertAnswered(back, "store back");
      assertOneBudget(back, "store back");
      const after = await settled(edges, all);
      assert.deepEqual(after.map((v) => v.fallbacks), before.map((v) => v.fallbacks));
      assert.equal(
        after.reduce((sum, v) => sum + v.decisions, 0),
        before.reduce((sum, v) => sum + v.decisions, 0) + back.length,
      );
      for (const [i, edge] of edges.entries()) {
        assert.equal(await metric(edge, `portcullis_policy_store_up{store="${redis.url}"}`), 1);
        const series = `portcullis_policy_store_decisions_total{store="${redis.url}"}`;
        assert.equal(await metric(edge, series), after[i].decisions, series);
      }
      console.log(
        `proof 15: admitted ${admitted(one)}/${one.length} (store up), ${fleet}/${alone.length} ` +
          `(killed), ${admitted(back)}/${back.length} (back), in ` +
          `${((performance.now() - started) / 1000).toFixed(1)} s`,
      );
    } finally {
      try {
        await disposeAll(...edges, hub);
      } finally {
        await redis.stop();
      }
    }
  },
);
