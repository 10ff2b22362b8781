/**
 * The memory benchmark (issue 21): the gateway's RSS under four loads, each figure printed against
 * its target. Not a timed test: it reports, it does not fail on a missed target.
 *
 * - `streams`: 32 concurrent 256 MiB downloads (curl, bodies discarded): RSS before, peak, growth,
 *   RSS 10 s after the load and its distance from before, aggregate MB/s.
 * - `upload`, `download`: one 1 GiB POST to a discarding upstream, one 1 GiB GET: growth each.
 * - `idle`: 10,000 keep-alive connections, each after one answered request to a `respond` route,
 *   left idle: the gateway's total RSS.
 * - `proxy`: 64 B responses, `wrk -t2 -c64 -d5s`: requests per second.
 *
 * Each scenario boots a fresh gateway (the default `workers`, as `bench:proxy` runs it: one
 * request worker beside the protected lanes' isolate, one process) with default V8 flags and
 * `direct` egress to nginx on loopback, and samples the process's VmRSS every 100 ms. The open-file
 * limit is raised for the gateway as far as the hard limit allows; the 10,000 idle sockets are
 * held by this process. `BENCH_COMPARE_FLAGS` (e.g. `--v8-flags=--max-semi-space-size=1`) runs
 * every scenario also on a gateway started with those extra deno flags, interleaved, and prints
 * both with ratios; `BENCH_COMPARE_NODE_READS=1` compares instead with a gateway whose upstream
 * responses go through `node:http`'s client (`egress.owned_reads: false`, the relay before issue
 * 21). `BENCH_ONLY=streams,upload,download,idle,proxy` picks scenarios.
 *
 * Needs `nginx`, `wrk` and `curl`. Usage: `deno task bench:memory`. About 2 minutes per
 * configuration on a 2-core machine.
 *
 * @module
 */
import {
  benchEdgeConfig,
  curlThrough,
  discardSink,
  freePort,
  haveTools,
  nginxUpstreamConfig,
  ROOT,
  sampleRss,
  spawnReady,
  startNginx,
  stopAll,
  writeGateway,
  wrk,
} from "./lib.ts";

const SCENARIOS = ["streams", "upload", "download", "idle", "proxy"] as const;
type Scenario = typeof SCENARIOS[number];
const ONLY = (Deno.env.get("BENCH_ONLY") ?? SCENARIOS.join(",")).split(",").map((s) => s.trim());
const COMPARE = Deno.env.get("BENCH_COMPARE_FLAGS")?.trim();
/** `BENCH_COMPARE_NODE_READS=1`: the second gateway relays through `node:http`'s client. */
const NODE_READS = Deno.env.get("BENCH_COMPARE_NODE_READS") === "1"
  ? { owned_reads: false }
  : undefined;
const MIB = 1024 * 1024;
const STREAMS = 32;
const STREAM_BYTES = 256 * MIB;
const GIB = 1024 * MIB;
const IDLE = 10_000;
const SETTLE_MS = 10_000;
/** Raise the gateway's open-file limit, as far as the hard limit allows, then become it. */
const RAISE_AND_EXEC = 'ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"; exec "$0" "$@"';

/** One gateway configuration: a label, the extra deno flags it starts with, its egress fields. */
interface Variant {
  readonly label: string;
  readonly flags: readonly string[];
  readonly egress?: Record<string, unknown>;
}

/** One measured figure with its target: at most `max`, or at least `share` × the default's. */
interface Row {
  readonly scenario: Scenario;
  readonly figure: string;
  readonly value: number;
  readonly digits?: number;
  readonly max?: number;
  readonly share?: number;
}

/** What every scenario shares: the temp folder and the upstreams' addresses. */
interface Bench {
  readonly dir: string;
  readonly nginx: string;
  readonly sink: string;
}

/** A running gateway. */
interface Gateway {
  readonly child: Deno.ChildProcess;
  readonly port: number;
  readonly url: string;
}

/** Rows of one scenario: `row(figure, value, { max, share, digits })`. */
const rowsOf = (scenario: Scenario) => (figure: string, value: number, more: Partial<Row> = {}) =>
  ({ scenario, figure, value, ...more }) as Row;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const mb = (bytes: number) => bytes / MIB;

async function main() {
  const unknown = ONLY.filter((s) => !(SCENARIOS as readonly string[]).includes(s));
  if (unknown.length > 0) {
    throw new RangeError(`BENCH_ONLY must list ${SCENARIOS.join(", ")}; got "${unknown}"`);
  }
  if (!await haveTools("bench/memory", { wrk: ["--version"], nginx: ["-v"], curl: ["-V"] })) return;
  const variants: Variant[] = [{ label: "default", flags: [] }];
  if (COMPARE) variants.push({ label: COMPARE, flags: COMPARE.split(/\s+/) });
  else if (NODE_READS) {
    variants.push({ label: "owned_reads: false", flags: [], egress: NODE_READS });
  }
  const dir = await Deno.makeTempDir({ prefix: "portcullis-bench-memory-" });
  const children: Deno.ChildProcess[] = [];
  const sink = discardSink();
  try {
    const bench = await startUpstream(dir, children, sink.addr.port);
    await printSetup();
    const results = new Map<string, Row[]>(variants.map((v) => [v.label, []]));
    for (const scenario of SCENARIOS.filter((s) => ONLY.includes(s))) {
      for (const [i, variant] of variants.entries()) {
        const gateway = await startGateway(bench, variant, `${scenario}-${i}`);
        try {
          results.get(variant.label)!.push(...await SCENARIO_RUNS[scenario](gateway, bench));
        } finally {
          await stopAll([gateway.child]);
        }
      }
    }
    printTable(variants, results);
  } finally {
    await sink.shutdown();
    await stopAll(children);
    await Deno.remove(dir, { recursive: true });
  }
}

/** Starts nginx serving `/small` (64 B), `/s256` (256 MiB) and `/huge` (1 GiB, sparse files). */
async function startUpstream(
  dir: string,
  children: Deno.ChildProcess[],
  sinkPort: number,
): Promise<Bench> {
  const port = freePort();
  await Deno.chmod(dir, 0o755); // nginx workers run as an unprivileged user
  await Deno.mkdir(`${dir}/www`, { mode: 0o755 });
  for (const [name, size] of [["s256", STREAM_BYTES], ["huge", GIB]] as const) {
    const file = await Deno.open(`${dir}/www/${name}`, { create: true, write: true });
    await file.truncate(size); // sparse: no disk used
    file.close();
  }
  await Deno.writeTextFile(`${dir}/nginx.conf`, nginxUpstreamConfig(dir, dir, port));
  children.push(
    await startNginx(`${dir}/nginx.conf`, port),
  );
  return { dir, nginx: `127.0.0.1:${port}`, sink: `127.0.0.1:${sinkPort}` };
}

/**
 * Boots a fresh gateway (default `workers`, `direct` egress to nginx and the sink, public lane
 * allowed 12,000 connections) under `variant`'s flags; waits until a proxied request answers.
 */
async function startGateway(bench: Bench, variant: Variant, name: string): Promise<Gateway> {
  const at = { gateway: freePort(), local: freePort() };
  const egress = {
    direct: [bench.nginx, bench.sink],
    allow_private: ["127.0.0.0/8"],
    ...variant.egress,
  };
  const config = benchEdgeConfig(at, egress, {
    timeouts: { header_ms: 10000, idle_ms: 300000, request_ms: 600000 },
    ledger: {
      application_slots: 1024,
      inflight_bytes: 1 << 30,
      per_connection: 8,
      lanes: { public: { deadline_ms: 60000, max_connections: 12_000 } },
    },
    drain: { timeout_ms: 2000 },
  });
  const [sinkUrl, nginxUrl] = [`http://${bench.sink}`, `http://${bench.nginx}`];
  const tenant = {
    host: "bench.test",
    routes: [
      { name: "hello", match: { path: "/hello" }, respond: { body: "hello\n" } },
      { name: "sink", match: { path: "/sink" }, proxy: { backends: [{ url: sinkUrl }] } },
      { name: "all", match: { prefix: "/" }, proxy: { backends: [{ url: nginxUrl }] } },
    ],
  };
  const folder = `${bench.dir}/${name}`;
  const flags = await writeGateway(folder, config, [tenant]);
  const args = ["run", "--no-prompt", ...flags, ...variant.flags, `${ROOT}main.ts`, "serve"];
  const child = await spawnReady("sh", [
    "-c",
    RAISE_AND_EXEC,
    Deno.execPath(),
    ...args,
    `${folder}/config.yaml`,
  ]);
  const gateway = { child, port: at.gateway, url: `http://127.0.0.1:${at.gateway}` };
  const warm = await curlThrough(`${gateway.url}/small`);
  if (warm.status !== 200 || warm.bytes !== 64) {
    throw new Error(`Gateway "${name}" answered ${warm.status} with ${warm.bytes} bytes`);
  }
  await sleep(1000); // let the boot's garbage settle before "before"
  return gateway;
}

/** 32 concurrent 256 MiB downloads; RSS before, at peak, and 10 s after; aggregate MB/s. */
async function streams(gateway: Gateway): Promise<Row[]> {
  const rss = await sampleRss(gateway.child.pid);
  const before = rss.last;
  const started = performance.now();
  const got = await Promise.all(
    Array.from({ length: STREAMS }, () => curlThrough(`${gateway.url}/s256`)),
  );
  const seconds = (performance.now() - started) / 1000;
  const peak = rss.peak;
  await sleep(SETTLE_MS);
  const after = rss.last;
  await rss.stop();
  const bad = got.filter((r) => r.status !== 200 || r.bytes !== STREAM_BYTES);
  if (bad.length > 0) throw new Error(`streams: ${bad.length} downloads failed: ${bad[0].status}`);
  const row = rowsOf("streams");
  return [
    row("RSS before MB", mb(before)),
    row("peak RSS MB", mb(peak)),
    row("peak growth MB", mb(peak - before), { max: 64 }),
    row(`RSS ${SETTLE_MS / 1000} s after MB`, mb(after)),
    row(`after − before MB`, mb(after - before), { max: 16 }),
    row("throughput MB/s", STREAMS * STREAM_BYTES / 1e6 / seconds, { digits: 0, share: 0.9 }),
  ];
}

/** curl arguments that POST the sparse 1 GiB file (streamed, without `Expect: 100-continue`). */
const upload = (bench: Bench) => ["-X", "POST", "-H", "Expect:", "-T", `${bench.dir}/www/huge`];

/** One 1 GiB body up (to the sink) or down (from nginx); the RSS growth while it streams. */
function oneGiB(direction: "upload" | "download") {
  return async function oneGiBBody(gateway: Gateway, bench: Bench): Promise<Row[]> {
    const rss = await sampleRss(gateway.child.pid);
    const before = rss.last;
    const started = performance.now();
    const result = direction === "download"
      ? await curlThrough(`${gateway.url}/huge`)
      : await curlThrough(`${gateway.url}/sink`, { args: upload(bench), keep: true });
    const seconds = (performance.now() - started) / 1000;
    await rss.stop();
    const bytes = direction === "download" ? result.bytes : Number(result.body);
    if (result.status !== 200 || bytes !== GIB) {
      throw new Error(`${direction}: ${result.status} with ${bytes} bytes`);
    }
    const row = rowsOf(direction);
    return [
      row("RSS before MB", mb(before)),
      row("peak growth MB", mb(rss.peak - before), { max: 32 }),
      row("throughput MB/s", GIB / 1e6 / seconds, { digits: 0 }),
    ];
  };
}

/** 10,000 keep-alive connections, one answered request each, then idle: the gateway's RSS. */
async function idle(gateway: Gateway): Promise<Row[]> {
  const rss = await sampleRss(gateway.child.pid);
  const before = rss.last;
  const conns: Deno.Conn[] = [];
  const request = new TextEncoder().encode("GET /hello HTTP/1.1\r\nHost: bench.test\r\n\r\n");
  const one = async () => {
    const conn = await Deno.connect({ hostname: "127.0.0.1", port: gateway.port });
    conns.push(conn);
    await conn.write(request);
    const buffer = new Uint8Array(1024);
    const n = await conn.read(buffer);
    const head = new TextDecoder().decode(buffer.subarray(0, n ?? 0));
    if (!head.startsWith("HTTP/1.1 200")) throw new Error(`idle: answered ${head.slice(0, 40)}`);
  };
  try {
    const started = performance.now();
    for (let i = 0; i < IDLE; i += 200) {
      await Promise.all(Array.from({ length: Math.min(200, IDLE - i) }, one));
    }
    const seconds = (performance.now() - started) / 1000;
    await sleep(2000);
    const held = rss.last;
    const row = rowsOf("idle");
    return [
      row("RSS before MB", mb(before)),
      row(`RSS with ${IDLE.toLocaleString("en-US")} idle MB`, mb(held), { max: 150 }),
      row("growth MB", mb(held - before)),
      row("KB per connection", (held - before) / 1024 / IDLE),
      row("seconds to open", seconds),
    ];
  } finally {
    await rss.stop();
    for (const conn of conns) conn.close();
  }
}

/** 64 B responses proxied from nginx: `wrk -t2 -c64 -d5s` after a 1 s warm-up. */
async function proxy(gateway: Gateway): Promise<Row[]> {
  const headers = ["Host: bench.test"];
  await wrk(`${gateway.url}/small`, { seconds: 1, connections: 64, headers });
  const rss = await sampleRss(gateway.child.pid);
  const run = await wrk(`${gateway.url}/small`, { seconds: 5, connections: 64, headers });
  await rss.stop();
  if (run.non2xx > 0) throw new Error(`proxy: ${run.non2xx} responses were not 2xx`);
  const row = rowsOf("proxy");
  return [
    row("requests/s", run.rps, { digits: 0 }),
    row("p99 ms", run.p99),
    row("peak RSS MB", mb(rss.peak)),
  ];
}

const SCENARIO_RUNS: Record<Scenario, (gateway: Gateway, bench: Bench) => Promise<Row[]>> = {
  streams,
  upload: oneGiB("upload"),
  download: oneGiB("download"),
  idle,
  proxy,
};

/** The machine, runtime and limits the figures come from. */
async function printSetup() {
  const limit = async (script: string) =>
    new TextDecoder().decode(
      (await new Deno.Command("sh", { args: ["-c", script], stdout: "piped" })
        .output()).stdout,
    ).trim();
  const gatewayLimit = await limit(RAISE_AND_EXEC.replace(/exec .*$/, "ulimit -n"));
  console.log(
    `bench:memory — Deno ${Deno.version.deno}, ${navigator.hardwareConcurrency} cores; ` +
      "gateway: `workers` unset (default 1: one request worker isolate for the public lane beside " +
      "the protected lanes' isolate, one process), direct egress to nginx on loopback; " +
      `open files: gateway ${gatewayLimit}, this client ${await limit("ulimit -n")}; ` +
      "RSS = VmRSS of the gateway process every 100 ms, MB = 2^20 bytes; throughput MB = 10^6 bytes\n",
  );
}

/**
 * The table: scenario | figure | measured | target | met?; with a second configuration, both
 * figures, their ratio, and whether each met the target (throughput: against the default's).
 */
function printTable(variants: readonly Variant[], results: ReadonlyMap<string, Row[]>) {
  const [base, other] = variants.map((v) => results.get(v.label)!);
  const show = (row: Row) => row.value.toFixed(row.digits ?? 1);
  const target = (row: Row) =>
    row.max !== undefined ? `≤ ${row.max}` : row.share ? `≥ ${row.share}× default` : "—";
  const met = (row: Row, reference?: Row) => {
    if (row.max !== undefined) return row.value <= row.max ? "yes" : "no";
    if (row.share === undefined) return "—";
    if (!reference) return "reference (today's default)";
    return row.value >= row.share * reference.value ? "yes" : "no";
  };
  const header = other
    ? [
      "scenario",
      "figure",
      "default",
      variants[1].label,
      "ratio",
      "target",
      "met? default / other",
    ]
    : ["scenario", "figure", "measured", "target", "met?"];
  console.log(`| ${header.join(" | ")} |\n|${"---|".repeat(header.length)}`);
  for (const [i, row] of base.entries()) {
    const alt = other?.[i];
    const cells = alt
      ? [
        show(row),
        show(alt),
        row.value > 0 ? (alt.value / row.value).toFixed(2) : "—",
        target(row),
        `${met(row)} / ${met(alt, row)}`,
      ]
      : [show(row), target(row), met(row)];
    console.log(`| ${[row.scenario, row.figure, ...cells].join(" | ")} |`);
  }
}

await main();
