/**
 * Soak: does the gateway's memory or descriptor count grow under steady load? Boots the real
 * gateway (the flags `main.ts flags` derives) in front of nginx on loopback and drives a fixed
 * rate (`BENCH_RATE`, default 300 req/s) over a fixed number of keep-alive connections for
 * `BENCH_SECONDS` (default 300), with a mix: a respond route, proxied 64 B and 64 KiB responses,
 * 404s and 429s (a rate-limited tenant), and a `/metrics` scrape every 10 s. Every 10 s it samples
 * the gateway's RSS (`ps`) and open descriptors (`ls /proc/<pid>/fd`; Deno wants full read access
 * for /proc), then prints the samples and least-squares slopes (MB/min, descriptors/min) — over
 * the whole run, over its second half, and over the troughs (the lowest RSS of each minute), since
 * a rising trough is retained memory where a rising peak may be the V8 heap still sizing itself.
 *
 * Three configurations, one gateway each: `workers: 1` (one public worker beside the isolate of the
 * protected lanes), `workers: 2`, and `shared_event_loop: true` (one isolate).
 *
 * `BENCH_LOG_EPISODE=stall` or `disk-full` puts a fault on the access log for a sixth of the run
 * (soak_episodes.ts: a reader of stdout that stops, or stdout a file on a tmpfs that fills; the
 * latter needs root): logging must never block serving (issue 32), so the mix must go on being
 * served, lines are dropped and counted instead, and memory and descriptors must come back after.
 * Each sample then also shows the access log's lines written and dropped and its drop episodes
 * (from `/metrics`), and the run ends with requests per second and latency before, during and after
 * the episode and the episode lines the gateway wrote on stderr.
 *
 * Usage: `deno task bench:soak` (needs `nginx`); `BENCH_ONLY=workers-1`, `workers-2` or `shared`
 * for one; `BENCH_SECONDS=60` for a short run while developing. Loopback only, bounded in time.
 *
 * @module
 */
import http from "node:http";
import { V8_FLAGS } from "../scripts/compile.ts";
import {
  freePort,
  has,
  nginxUpstreamConfig,
  ROOT,
  rssOf,
  startNginx,
  stopAll,
  writeGateway,
} from "./lib.ts";
import {
  episodeKind,
  type LogDisk,
  type LogEpisode,
  logEpisode,
  mountLogDisk,
  phaseTally,
  quantile,
} from "./soak_episodes.ts";
import {
  fdsOf,
  keep,
  type Kept,
  kept as emptyKept,
  loadAverage,
  mb,
  NOTABLE_CAP,
  printSamples,
  printSummary,
  reportEpisode,
  type Sample,
  SAMPLE_MS,
  scrape,
  summarize,
} from "./soak_report.ts";

const SECONDS = Number(Deno.env.get("BENCH_SECONDS") ?? 300);
const RATE = Number(Deno.env.get("BENCH_RATE") ?? 300);
const ONLY = Deno.env.get("BENCH_ONLY");
const EPISODE = episodeKind(Deno.env.get("BENCH_LOG_EPISODE"));
/** Pooled keep-alive connections (the fresh and aborted requests open their own). */
const CONNECTIONS = 8;

/**
 * How a request is sent: on a pooled keep-alive connection, on a fresh connection that closes after
 * it, or on a fresh connection the client drops after the first bytes of the body.
 */
type How = "pooled" | "fresh" | "abort";

/** One kind of request in the mix. */
interface Kind {
  readonly host: string;
  readonly path: string;
  readonly how: How;
}

const kind = (count: number, host: string, path: string, how: How = "pooled"): Kind[] =>
  Array(count).fill({ host, path, how });

/**
 * The request mix, one cycle of 20: respond route, proxied 64 B and 64 KiB responses, unmatched
 * paths (404), a rate-limited tenant (429 for most), a backend that refuses connections (502), a
 * new connection per request, and a client that leaves in the middle of a 64 KiB body.
 */
const MIX: readonly Kind[] = [
  ...kind(5, "bench.test", "/hello"),
  ...kind(4, "bench.test", "/small"),
  ...kind(4, "bench.test", "/k64"),
  ...kind(2, "bench.test", "/missing"),
  ...kind(2, "limited.test", "/hello"),
  ...kind(1, "bench.test", "/dead"),
  ...kind(1, "bench.test", "/small", "fresh"),
  ...kind(1, "bench.test", "/k64", "abort"),
];

const CONFIGURATIONS = [
  { name: "workers-1", workers: 1, shared: false },
  { name: "workers-2", workers: 2, shared: false },
  { name: "shared", workers: 1, shared: true },
] as const;

/**
 * Starts the gateway and waits for "ready"; afterwards its output is read and dropped (the access
 * log runs to megabytes in a soak, which `spawnReady` would keep) — except lines {@link keep}
 * keeps. With an `episode`, it says how the gateway is spawned (stdout a file for `disk-full`) and
 * when stdout is not read (`stall`).
 */
async function spawnQuiet(
  dir: string,
  flags: readonly string[],
  kept: Kept,
  episode?: LogEpisode,
): Promise<Deno.ChildProcess> {
  // The compiled binary's V8 flags (scripts/compile.ts): what a deployed edge runs with.
  const args = ["run", "--no-prompt", V8_FLAGS, ...flags, `${ROOT}main.ts`, "serve"];
  args.push(`${dir}/config.yaml`);
  const spawn = episode?.spawn(Deno.execPath(), args) ??
    { command: Deno.execPath(), args, stdout: "piped" };
  const child = new Deno.Command(spawn.command, {
    args: spawn.args,
    stdout: spawn.stdout,
    stderr: "piped",
  }).spawn();
  let seen = "";
  let isReady = false;
  let ready!: () => void;
  const signalled = new Promise<void>((resolve) => ready = resolve);
  const drain = async (stream: ReadableStream<Uint8Array>, gate?: LogEpisode["beforeRead"]) => {
    const decoder = new TextDecoder();
    let rest = "";
    for await (const chunk of stream) {
      if (isReady) {
        const lines = (rest + decoder.decode(chunk, { stream: true })).split("\n");
        rest = lines.pop()!;
        for (const line of lines) keep(line, kept);
        // A stall: the next read waits, so the pipe fills and stays full.
        await gate?.();
        continue;
      }
      seen += decoder.decode(chunk, { stream: true });
      if (/\bready\b/.test(seen)) {
        isReady = true;
        ready();
      }
    }
  };
  if (spawn.stdout === "piped") drain(child.stdout, episode?.beforeRead);
  drain(child.stderr);
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<never>((_, reject) =>
    timer = setTimeout(() => reject(new Error(`The gateway was not ready: ${seen}`)), 20_000)
  );
  try {
    const exited = child.status.then(({ code }) => {
      throw new Error(`The gateway exited (code ${code}) before it was ready: ${seen}`);
    });
    await Promise.race([signalled, late, exited]);
  } finally {
    clearTimeout(timer);
  }
  return child;
}

/** Writes the config and tenants for one configuration; returns the derived flags and ports. */
async function writeSoakGateway(
  dir: string,
  upstream: string,
  setup: typeof CONFIGURATIONS[number],
) {
  // Nothing listens on this port: the "dead" route's backend refuses every connection.
  const dead = `127.0.0.1:${freePort()}`;
  const ports = { public: freePort(), local: freePort() };
  await Deno.mkdir(dir, { recursive: true });
  await Deno.writeTextFile(`${dir}/metrics-salt`, crypto.randomUUID());
  const proxy = (name: string, path: string, to = upstream) => ({
    name,
    match: { path, methods: ["GET"] },
    proxy: { backends: [{ url: `http://${to}` }] },
  });
  const hello = { name: "hello", match: { path: "/hello" }, respond: { body: "hello\n" } };
  const flags = await writeGateway(dir, {
    node_id: "soak-edge",
    mode: "local",
    tenants_dir: "tenants",
    workers: setup.workers,
    shared_event_loop: setup.shared,
    lanes: {
      public: { listen: [{ hostname: "127.0.0.1", port: ports.public }] },
      local_health: { listen: [{ hostname: "127.0.0.1", port: ports.local }] },
    },
    observe: { salt_file: "metrics-salt" },
    ledger: { application_slots: 1024, inflight_bytes: 1 << 30, per_connection: 8 },
    egress: { direct: [upstream, dead] },
  }, [
    {
      host: "bench.test",
      routes: [hello, proxy("small", "/small"), proxy("k64", "/k64"), proxy("dead", "/dead", dead)],
    },
    {
      host: "limited.test",
      routes: [hello],
      policies: { rate_limit: { per_second: 10, burst: 10 } },
    },
  ]);
  return { flags, ports };
}

/**
 * One GET of `kind`; resolves with its outcome once the body is read: the status, "aborted" when
 * the client left on purpose, "error" on a transport error.
 */
function get(agent: http.Agent, port: number, kind: Kind): Promise<string> {
  return new Promise((resolve) => {
    const request = http.get({
      host: "127.0.0.1",
      port,
      path: kind.path,
      agent: kind.how === "pooled" ? agent : false,
      headers: { host: kind.host, ...(kind.how === "fresh" ? { connection: "close" } : {}) },
    });
    request.on("response", (response) => {
      if (kind.how === "abort") {
        response.once("data", () => {
          request.destroy();
          resolve("aborted");
        });
      } else {
        response.resume();
      }
      response.on("end", () => resolve(String(response.statusCode)));
      response.on("error", () => resolve("error"));
    });
    request.on("error", () => resolve("error"));
  });
}

/** What the driver tells about each request. */
interface Outcomes {
  /** A request completed: its outcome and milliseconds. */
  record(outcome: string, ms: number): void;
  /** A request was not sent: the driver had too many pending. */
  skip(): void;
}

/** Drives the mix at `RATE` until `until` (ms, performance.now()); tells `outcomes` of each. */
async function drive(port: number, until: number, outcomes: Outcomes) {
  const agent = new http.Agent({ keepAlive: true, maxSockets: CONNECTIONS });
  const started = performance.now();
  const pending = new Set<Promise<void>>();
  let sent = 0;
  let skipped = 0;
  while (performance.now() < until) {
    const due = Math.floor((performance.now() - started) / 1000 * RATE);
    for (; sent < due; sent++) {
      // Keeps a stalled gateway from piling requests up in the driver.
      if (pending.size >= CONNECTIONS * 32) {
        skipped++;
        outcomes.skip();
        continue;
      }
      const at = performance.now();
      const done: Promise<void> = get(agent, port, MIX[sent % MIX.length]).then((status) => {
        outcomes.record(status, performance.now() - at);
        pending.delete(done);
      });
      pending.add(done);
    }
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
  await Promise.all(pending);
  agent.destroy();
  return { sent, skipped };
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, Math.max(0, ms)));

/** One configuration's gateway while it is soaked. */
interface Run {
  readonly child: Deno.ChildProcess;
  /** The local_health port, for `/metrics`. */
  readonly local: number;
  readonly episode?: LogEpisode;
  readonly kept: Kept;
  /** Requests completed so far. */
  readonly requests: () => number;
  /** The milliseconds of the requests completed, and the requests skipped, since the last call. */
  readonly interval: () => { ms: number[]; skipped: number };
}

/**
 * Samples `run` every {@link SAMPLE_MS} until `SECONDS` after `started`; after each sample the
 * episode may empty its log file.
 */
async function sampleRun(run: Run, started: number): Promise<Sample[]> {
  const samples: Sample[] = [];
  for (let at = SAMPLE_MS; at <= SECONDS * 1000; at += SAMPLE_MS) {
    await sleep(started + at - performance.now());
    const episode = run.episode?.on ?? false;
    const { heaps, log } = await scrape(run.local);
    const { ms, skipped } = run.interval();
    samples.push({
      seconds: at / 1000,
      p99: quantile(ms.sort((a, b) => a - b), 0.99),
      skipped,
      load: await loadAverage(),
      rss: await rssOf(run.child.pid),
      fds: await fdsOf(run.child.pid),
      requests: run.requests(),
      heaps,
      log,
      episode,
    });
    // The access log in a file (disk-full) is read here, before it is emptied.
    for (const line of (await run.episode?.sampled())?.split("\n") ?? []) keep(line, run.kept);
  }
  return samples;
}

/** Soaks one configuration; prints its samples and returns its summary rows. */
async function soak(
  dir: string,
  upstream: string,
  setup: typeof CONFIGURATIONS[number],
  disk?: LogDisk,
): Promise<{ row: string; episodeRow?: string }> {
  const home = `${dir}/${setup.name}`;
  const { flags, ports } = await writeSoakGateway(home, upstream, setup);
  const kept = emptyKept();
  const episode = EPISODE && logEpisode(EPISODE, SECONDS, { disk, name: setup.name });
  const child = await spawnQuiet(home, flags, kept, episode);
  const stopEpisode = new AbortController();
  try {
    await sleep(2000);
    const idle = { rss: await rssOf(child.pid), fds: await fdsOf(child.pid) };
    const statuses = new Map<string, number>();
    const started = performance.now();
    const tally = episode && phaseTally(episode.window, started);
    let interval = { ms: [] as number[], skipped: 0 };
    const outcomes = {
      record(status: string, ms: number) {
        statuses.set(status, (statuses.get(status) ?? 0) + 1);
        interval.ms.push(ms);
        tally?.record(status, ms);
      },
      skip: () => interval.skipped++,
    };
    const taken = () => [interval, interval = { ms: [], skipped: 0 }][0];
    // The load outlasts the last sample, so no sample sees the connections close.
    const driving = drive(ports.public, started + SECONDS * 1000 + 1000, outcomes);
    const faulting = episode?.run(started, stopEpisode.signal);
    const requests = () => [...statuses.values()].reduce((s, n) => s + n, 0);
    const samples = await sampleRun(
      { child, local: ports.local, episode, kept, requests, interval: taken },
      started,
    );
    const { sent, skipped } = await driving;
    const ended = (performance.now() - started) / 1000;
    await faulting;
    console.log(
      `\n### ${setup.name}: ${RATE} req/s for ${SECONDS} s, ${CONNECTIONS} connections\n`,
    );
    console.log(`idle before load: RSS ${mb(idle.rss)} MB, ${idle.fds} descriptors\n`);
    printSamples(samples, episode !== undefined);
    const mix = [...statuses].sort().map(([s, n]) => `${s}: ${n}`).join(", ");
    console.log(`\nsent ${sent} (${skipped} skipped: the driver was saturated); outcomes ${mix}`);
    console.log(
      `${kept.expected} warnings and errors the mix causes on purpose (dead backend, limit)`,
    );
    if (kept.notable.length > 0) {
      console.log(`\nnotable gateway lines (first ${NOTABLE_CAP}):\n${kept.notable.join("\n")}`);
    }
    const row = summarize(setup.name, idle.rss, samples);
    if (!episode || !tally) return { row };
    return { row, episodeRow: reportEpisode(setup.name, { episode, tally, ended, samples, kept }) };
  } finally {
    stopEpisode.abort();
    await stopAll([child]);
  }
}

/** Serves the upstream's files from `dir` with nginx on a free port. */
async function startUpstream(dir: string): Promise<{ port: number; nginx: Deno.ChildProcess }> {
  const port = freePort();
  await Deno.mkdir(`${dir}/www`, { mode: 0o755 });
  await Deno.mkdir(`${dir}/up`);
  await Deno.writeFile(`${dir}/www/k64`, new Uint8Array(64 * 1024).fill(120));
  await Deno.writeTextFile(`${dir}/upstream.conf`, nginxUpstreamConfig(`${dir}/up`, dir, port));
  return { port, nginx: await startNginx(`${dir}/upstream.conf`, port) };
}

async function main() {
  if (!await has("nginx", ["-v"])) {
    console.error("soak: nginx is not installed (Debian: apt-get install -y nginx); skipped");
    return;
  }
  const setups = CONFIGURATIONS.filter((c) => !ONLY || c.name === ONLY);
  if (setups.length === 0) {
    throw new RangeError(`BENCH_ONLY must be workers-1, workers-2 or shared, got "${ONLY}"`);
  }
  const dir = await Deno.makeTempDir({ prefix: "portcullis-bench-soak-" });
  const children: Deno.ChildProcess[] = [];
  let disk: LogDisk | undefined;
  try {
    await Deno.chmod(dir, 0o755);
    if (EPISODE === "disk-full") {
      const mounted = await mountLogDisk(`${dir}/logfs`);
      if (typeof mounted === "string") {
        console.error(`soak: skipped: needs root to mount a tmpfs (mount: ${mounted})`);
        return;
      }
      disk = mounted;
    }
    const { port, nginx } = await startUpstream(dir);
    children.push(nginx);
    const rows = [];
    for (const setup of setups) rows.push(await soak(dir, `127.0.0.1:${port}`, setup, disk));
    printSummary(`Soak summary: ${RATE} req/s, ${SECONDS} s, samples every 10 s`, rows);
  } finally {
    await stopAll(children);
    await disk?.unmount();
    await Deno.remove(dir, { recursive: true }).catch(() => {});
  }
}

if (import.meta.main) await main();
