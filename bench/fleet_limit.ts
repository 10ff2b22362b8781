/**
 * What the per-client rate limit costs a request in the proxy chain (public lane → ledger →
 * routing → policies → SOCKS → nginx, as in `bench/proxy.ts`), decided four ways in one run: no
 * limit, the edge's shared table, a Redis store (one script call per decision), and a Redis store
 * behind a local pre-check of half the rate (`precheck_share: 0.5`). For the cost the limit admits
 * everything (1e6/s, burst 1e6), so every request runs the whole chain; the four gateways
 * (`workers: 1`, same salt, same tenants) are loaded in turn, `BENCH_RUNS` interleaved rounds with
 * the order rotated. Two tables: medians of wrk's rps and p50/p99 with the ratio to "limits off";
 * then CPU per request of the gateway and of redis-server, the store's round trips per 1,000
 * requests — from the gateway's `/v1/health` (read 1.1 s after the load: request workers report
 * twice a second) and, from outside the gateway, from redis-server's own counts (`redis-cli INFO
 * stats commandstats`: script calls, and `total_commands_processed`, which also counts the
 * commands a script runs), and the fallbacks (a decision later than `timeout_ms`, 50 ms by
 * default, is made on the edge's table). Requests still in flight when wrk stops are decided but
 * not counted by wrk: up to 64 a run, so the per-1,000 figures read slightly high on short runs.
 *
 * Then a flood: a second tenant on the same gateways with a tight limit (100/s, burst 50), loaded
 * once per limited gateway, where most requests are refused: admitted and refused counts, and what
 * the refusals cost the store. With one edge the pre-check admits at most its share of the rate.
 *
 * Needs `wrk`, `nginx`, `microsocks` and `redis-server` with `redis-cli` (Debian: apt-get install
 * -y wrk nginx microsocks redis-server). Usage: deno task bench:fleet (`BENCH_SECONDS` per wrk run,
 * default 5; `BENCH_RUNS` rounds, default 3; about 100 s in all on two cores).
 *
 * @module
 */
import {
  benchEdgeConfig,
  cpuSecondsOf,
  freePort,
  haveTools,
  median,
  nginxUpstreamConfig,
  spawnGateway,
  spawnReady,
  startMicrosocks,
  startNginx,
  stopAll,
  writeGateway,
  wrk,
  type WrkResult,
} from "./lib.ts";

const RUNS = Number(Deno.env.get("BENCH_RUNS") ?? 3);
const SECONDS = Number(Deno.env.get("BENCH_SECONDS") ?? 5);
const CONNECTIONS = 64;
/** The cost tenant's limit: never reached by the benchmark's one client. */
const ADMIT_ALL = { per_second: 1_000_000, burst: 1_000_000 };
/** The flood tenant's limit: wrk's one client is refused almost always. */
const TIGHT = { per_second: 100, burst: 50 };
const SALT = "bench-fleet-limit-salt-0123456789\n";
/** Each tool the run needs, and the argument that makes it answer. */
const TOOLS = {
  wrk: ["--version"],
  nginx: ["-v"],
  microsocks: ["-h"],
  "redis-server": ["--version"],
  "redis-cli": ["--version"],
};

/** One way of deciding the limit. */
interface Setup {
  readonly name: string;
  readonly limited: boolean;
  /** Extra fields of `store.redis` when the store decides (absent: no store). */
  readonly store?: Record<string, unknown>;
}

const SETUPS: readonly Setup[] = [
  { name: "limits off", limited: false },
  { name: "local table", limited: true },
  { name: "Redis, no pre-check", limited: true, store: {} },
  { name: "Redis, precheck_share 0.5", limited: true, store: { precheck_share: 0.5 } },
];

/** A running gateway of one setup. */
interface Edge {
  readonly setup: Setup;
  readonly port: number;
  readonly local: number;
  readonly pid: number;
}

/** The running redis-server, and what reading its command count itself adds to it. */
interface Store {
  readonly url: string;
  readonly port: number;
  readonly pid: number;
  readonly overhead: number;
}

/** The gateway's view of its store (`/v1/health`, `policy_stores[0]`). */
interface StoreView {
  up: boolean;
  round_trips: number;
  decisions: number;
  prechecked: number;
  fallbacks: number;
  fallbacks_timeout: number;
}

/** A wrk run with the CPU it cost per request and the commands redis-server processed. */
interface Sample extends WrkResult {
  readonly gatewayUs: number;
  readonly redisUs: number;
  readonly commands: number;
  readonly scripts: number;
}

async function main() {
  if (!await haveTools("bench/fleet_limit", TOOLS)) return;
  const started = performance.now();
  const dir = await Deno.makeTempDir({ prefix: "portcullis-bench-fleet-" });
  const children: Deno.ChildProcess[] = [];
  try {
    const nginx = freePort();
    const socks = freePort();
    await Deno.chmod(dir, 0o755); // nginx workers run as an unprivileged user
    await Deno.mkdir(`${dir}/www`, { mode: 0o755 });
    await Deno.writeTextFile(`${dir}/nginx.conf`, nginxUpstreamConfig(dir, dir, nginx));
    children.push(await startNginx(`${dir}/nginx.conf`, nginx));
    children.push(await startMicrosocks(socks));
    const store = await startRedis(children);
    const edges = await Promise.all(
      SETUPS.map((setup, i) => boot(`${dir}/edge${i}`, setup, { nginx, socks, store }, children)),
    );
    const load = await loadAverage();
    const cost = await costRuns(edges, store);
    const flood = await floodRuns(edges.filter((e) => e.setup.limited), store);
    printCost(edges, cost);
    printFlood(flood);
    console.log(
      `\n${((performance.now() - started) / 1000).toFixed(0)} s in all; load average ` +
        `(1 min) ${load} before the runs, ${await loadAverage()} after`,
    );
  } finally {
    await stopAll(children);
    await Deno.remove(dir, { recursive: true });
  }
}

/** The 1-minute load average (`/proc/loadavg`, read with `cat` as `cpuSecondsOf` reads /proc). */
async function loadAverage(): Promise<string> {
  const out = await new Deno.Command("cat", { args: ["/proc/loadavg"], stdout: "piped" }).output();
  return new TextDecoder().decode(out.stdout).split(" ")[0];
}

/** Starts redis-server on a free loopback port, nothing persisted. */
async function startRedis(children: Deno.ChildProcess[]): Promise<Store> {
  const port = freePort();
  const child = await spawnReady("redis-server", [
    "--port",
    String(port),
    "--bind",
    "127.0.0.1",
    "--save",
    "",
    "--appendonly",
    "no",
  ], { port });
  children.push(child);
  // What one reading adds (itself, and anything redis-cli sends), taken off every delta.
  const first = await commandsOf(port);
  const second = await commandsOf(port);
  return {
    url: `redis://127.0.0.1:${port}`,
    port,
    pid: child.pid,
    overhead: second.total - first.total,
  };
}

/** redis-server's own counts, read with redis-cli (`INFO stats commandstats`). */
interface Commands {
  /** `total_commands_processed`: every command, those a script runs included. */
  readonly total: number;
  /** Script calls (`EVALSHA` and `EVAL`): the round trips of rate decisions. */
  readonly scripts: number;
}

async function commandsOf(port: number): Promise<Commands> {
  const out = await new Deno.Command("redis-cli", {
    args: ["-h", "127.0.0.1", "-p", String(port), "INFO", "stats", "commandstats"],
    stdout: "piped",
  }).output();
  const text = new TextDecoder().decode(out.stdout);
  const total = Number(/total_commands_processed:(\d+)/.exec(text)?.[1]);
  if (!Number.isFinite(total)) throw new Error(`redis-cli INFO not understood: ${text}`);
  const calls = (name: string) =>
    Number(new RegExp(`cmdstat_${name}:calls=(\\d+)`).exec(text)?.[1] ?? 0);
  return { total, scripts: calls("evalsha") + calls("eval") };
}

/** Writes a gateway of `setup` (cost tenant `bench.test`, flood tenant `flood.test`), boots it. */
async function boot(
  dir: string,
  setup: Setup,
  peers: { nginx: number; socks: number; store: Store },
  children: Deno.ChildProcess[],
): Promise<Edge> {
  const [port, local] = [freePort(), freePort()];
  await Deno.mkdir(dir, { recursive: true });
  await Deno.writeTextFile(`${dir}/salt`, SALT, { mode: 0o600 });
  await Deno.chmod(`${dir}/salt`, 0o600);
  const url = peers.store.url;
  const tenant = (host: string, rate: Record<string, number>, prefix: string) => ({
    host,
    routes: [{
      name: "all",
      match: { prefix: "/" },
      proxy: { backends: [{ url: `http://127.0.0.1:${peers.nginx}` }] },
    }],
    ...(setup.limited
      ? {
        policies: {
          rate_limit: setup.store
            ? { ...rate, store: { redis: { url, key_prefix: prefix, ...setup.store } } }
            : rate,
        },
      }
      : {}),
  });
  const name = dir.slice(dir.lastIndexOf("/") + 1);
  const config = benchEdgeConfig(
    { gateway: port, local },
    { socks: [{ hostname: "127.0.0.1", port: peers.socks }] },
    {
      node_id: `bench-${name}`,
      workers: 1,
      observe: { salt_file: "salt" },
      ...(setup.store ? { policy_stores: [url] } : {}),
    },
  );
  const flags = await writeGateway(dir, config, [
    tenant("bench.test", ADMIT_ALL, `${name}:`),
    tenant("flood.test", TIGHT, `${name}f:`),
  ]);
  const child = await spawnGateway(dir, flags);
  children.push(child);
  const edge = { setup, port, local, pid: child.pid };
  if (setup.store) {
    const until = Date.now() + 10_000;
    while (!(await storeView(edge))?.up) {
      if (Date.now() > until) throw new Error(`Gateway "${setup.name}" never saw its store up`);
      await sleep(100);
    }
  }
  return edge;
}

/** The gateway's view of its one store, or undefined when it has none. */
async function storeView(edge: Edge): Promise<StoreView | undefined> {
  const response = await fetch(`http://127.0.0.1:${edge.local}/v1/health`);
  const health = await response.json() as { policy_stores?: StoreView[] };
  return health.policy_stores?.[0];
}

/** Every edge's store view, after the workers' reports (twice a second) have reached worker 0. */
async function settledViews(edges: readonly Edge[]): Promise<(StoreView | undefined)[]> {
  await sleep(1100);
  return await Promise.all(edges.map(storeView));
}

/** One wrk run against `host` on `edge`, with the CPU and store commands it cost. */
async function measure(edge: Edge, host: string, store: Store): Promise<Sample> {
  const [gateway, redis, commands] = [
    await cpuSecondsOf(edge.pid),
    await cpuSecondsOf(store.pid),
    await commandsOf(store.port),
  ];
  const run = await wrk(`http://127.0.0.1:${edge.port}/small`, {
    seconds: SECONDS,
    connections: CONNECTIONS,
    headers: [`Host: ${host}`],
  });
  const after = await commandsOf(store.port);
  const perRequest = (seconds: number) => seconds * 1e6 / run.requests;
  return {
    ...run,
    gatewayUs: perRequest(await cpuSecondsOf(edge.pid) - gateway),
    redisUs: perRequest(await cpuSecondsOf(store.pid) - redis),
    commands: after.total - commands.total - store.overhead,
    scripts: after.scripts - commands.scripts,
  };
}

/** The cost rounds: every edge warmed up, then `RUNS` rounds, each in a rotated order. */
async function costRuns(edges: readonly Edge[], store: Store) {
  const headers = ["Host: bench.test"];
  for (const edge of edges) {
    await wrk(`http://127.0.0.1:${edge.port}/small`, { seconds: 1, connections: 64, headers });
  }
  const before = await settledViews(edges);
  const samples = edges.map(() => [] as Sample[]);
  for (let run = 0; run < RUNS; run++) {
    for (let k = 0; k < edges.length; k++) {
      const i = (run + k) % edges.length;
      samples[i].push(await measure(edges[i], "bench.test", store));
    }
  }
  const after = await settledViews(edges);
  return { samples, views: edges.map((_, i) => delta(before[i], after[i])) };
}

/** One flood run per limited edge (the flood tenant's bucket starts full). */
async function floodRuns(edges: readonly Edge[], store: Store) {
  const rows = [];
  for (const edge of edges) {
    const [before] = await settledViews([edge]);
    const sample = await measure(edge, "flood.test", store);
    const [after] = await settledViews([edge]);
    rows.push({ edge, sample, view: delta(before, after) });
  }
  return rows;
}

function delta(before?: StoreView, after?: StoreView): StoreView | undefined {
  if (!before || !after) return undefined;
  return {
    up: after.up,
    round_trips: after.round_trips - before.round_trips,
    decisions: after.decisions - before.decisions,
    prechecked: after.prechecked - before.prechecked,
    fallbacks: after.fallbacks - before.fallbacks,
    fallbacks_timeout: after.fallbacks_timeout - before.fallbacks_timeout,
  };
}

const perThousand = (count: number, requests: number) => (count * 1000 / requests).toFixed(1);
const row = (cells: readonly (string | number)[]) => console.log(`| ${cells.join(" | ")} |`);
const header = (cells: readonly string[]) => {
  row(cells);
  row(cells.map(() => "---"));
};
const sum = (samples: readonly Sample[], field: "requests" | "non2xx" | "commands" | "scripts") =>
  samples.reduce((n, s) => n + s[field], 0);
const fallbacks = (view?: StoreView) =>
  view ? `${view.fallbacks} (${view.fallbacks_timeout} late)` : "-";

function printCost(edges: readonly Edge[], cost: Awaited<ReturnType<typeof costRuns>>) {
  const base = median(cost.samples[0].map((s) => s.rps));
  console.log(
    `\nCost, limit admits all: wrk -t2 -c${CONNECTIONS} -d${SECONDS}s GET /small (64 B) via ` +
      `microsocks to nginx, ${RUNS} interleaved rounds, medians\n`,
  );
  header(["configuration", "rps", "min-max", "p50 ms", "p99 ms", "non-2xx", "ratio to off"]);
  edges.forEach((edge, i) => {
    const runs = cost.samples[i];
    const rps = runs.map((s) => s.rps);
    row([
      edge.setup.name,
      median(rps).toFixed(0),
      `${Math.min(...rps).toFixed(0)}-${Math.max(...rps).toFixed(0)}`,
      median(runs.map((s) => s.p50)).toFixed(2),
      median(runs.map((s) => s.p99)).toFixed(2),
      sum(runs, "non2xx"),
      (median(rps) / base).toFixed(3),
    ]);
  });
  console.log("\nCost, per request (all rounds; redis-server's counts from its own INFO)\n");
  header([
    "configuration",
    "requests",
    "gateway CPU µs",
    "redis CPU µs",
    "round trips /1k (health)",
    "EVALSHA+EVAL /1k (INFO)",
    "redis commands /1k (INFO)",
    "fallbacks",
  ]);
  edges.forEach((edge, i) => {
    const runs = cost.samples[i];
    const requests = sum(runs, "requests");
    const view = cost.views[i];
    row([
      edge.setup.name,
      requests,
      median(runs.map((s) => s.gatewayUs)).toFixed(0),
      median(runs.map((s) => s.redisUs)).toFixed(1),
      view ? perThousand(view.round_trips, requests) : "-",
      perThousand(sum(runs, "scripts"), requests),
      perThousand(sum(runs, "commands"), requests),
      fallbacks(view),
    ]);
  });
}

function printFlood(rows: Awaited<ReturnType<typeof floodRuns>>) {
  console.log(
    `\nFlood, limit ${TIGHT.per_second}/s burst ${TIGHT.burst} for wrk's one client: ` +
      `wrk -t2 -c${CONNECTIONS} -d${SECONDS}s, one run each\n`,
  );
  header([
    "configuration",
    "requests",
    "admitted",
    "refused",
    "rps",
    "p50 ms",
    "p99 ms",
    "round trips /1k (health)",
    "EVALSHA+EVAL /1k (INFO)",
    "redis commands /1k (INFO)",
    "decisions",
    "prechecked",
    "fallbacks",
  ]);
  for (const { edge, sample, view } of rows) {
    const n = sample.requests;
    row([
      edge.setup.name,
      n,
      n - sample.non2xx,
      sample.non2xx,
      sample.rps.toFixed(0),
      sample.p50.toFixed(2),
      sample.p99.toFixed(2),
      view ? perThousand(view.round_trips, n) : "-",
      perThousand(sample.scripts, n),
      perThousand(sample.commands, n),
      view?.decisions ?? "-",
      view?.prechecked ?? "-",
      fallbacks(view),
    ]);
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

await main();
