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

const SECONDS = Number(Deno.env.get("BENCH_SECONDS") ?? 300);
const RATE = Number(Deno.env.get("BENCH_RATE") ?? 300);
const ONLY = Deno.env.get("BENCH_ONLY");
/** Pooled keep-alive connections (the fresh and aborted requests open their own). */
const CONNECTIONS = 8;
const SAMPLE_MS = 10_000;
const MB = 1024 * 1024;

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

interface Sample {
  readonly seconds: number;
  readonly rss: number;
  readonly fds: number;
  readonly requests: number;
  /** V8 heap in use per isolate, bytes. */
  readonly heaps: readonly number[];
}

/** Open descriptors of `pid`, counted from a listing of /proc/<pid>/fd. */
async function fdsOf(pid: number): Promise<number> {
  const out = await new Deno.Command("ls", { args: ["-1", `/proc/${pid}/fd`], stdout: "piped" })
    .output();
  return new TextDecoder().decode(out.stdout).split("\n").filter((line) => line !== "").length;
}

/** The least-squares slope of `y` over `x`. */
export function slope(points: readonly (readonly [x: number, y: number])[]): number {
  const n = points.length;
  if (n < 2) return NaN;
  const mx = points.reduce((s, [x]) => s + x, 0) / n;
  const my = points.reduce((s, [, y]) => s + y, 0) / n;
  let num = 0;
  let den = 0;
  for (const [x, y] of points) {
    num += (x - mx) * (y - my);
    den += (x - mx) ** 2;
  }
  return den === 0 ? NaN : num / den;
}

/** Output lines worth showing after a soak: none of the mix should give a 421 or a 500. */
const NOTABLE = /"status":(421|500)\b|portcullis: (error|warning)/;
/** At most this many notable lines are kept. */
const NOTABLE_CAP = 20;

/**
 * Starts the gateway and waits for "ready"; afterwards its output is read and dropped (the access
 * log runs to megabytes in a soak, which `spawnReady` would keep) — except lines matching
 * {@link NOTABLE}, which are kept in `notable`.
 */
async function spawnQuiet(
  dir: string,
  flags: readonly string[],
  notable: string[],
): Promise<Deno.ChildProcess> {
  const child = new Deno.Command(Deno.execPath(), {
    // The compiled binary's V8 flags (scripts/compile.ts): what a deployed edge runs with.
    args: [
      "run",
      "--no-prompt",
      V8_FLAGS,
      ...flags,
      `${ROOT}main.ts`,
      "serve",
      `${dir}/config.yaml`,
    ],
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  let seen = "";
  let isReady = false;
  let ready!: () => void;
  const signalled = new Promise<void>((resolve) => ready = resolve);
  const drain = async (stream: ReadableStream<Uint8Array>) => {
    const decoder = new TextDecoder();
    let rest = "";
    for await (const chunk of stream) {
      if (isReady) {
        const lines = (rest + decoder.decode(chunk, { stream: true })).split("\n");
        rest = lines.pop()!;
        for (const line of lines) {
          if (notable.length < NOTABLE_CAP && NOTABLE.test(line)) notable.push(line);
        }
        continue;
      }
      seen += decoder.decode(chunk, { stream: true });
      if (/\bready\b/.test(seen)) {
        isReady = true;
        ready();
      }
    }
  };
  drain(child.stdout);
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

/** Drives the mix at `RATE` until `until` (ms, performance.now()); counts statuses. */
async function drive(port: number, until: number, statuses: Map<string, number>) {
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
        continue;
      }
      const done: Promise<void> = get(agent, port, MIX[sent % MIX.length]).then((status) => {
        statuses.set(status, (statuses.get(status) ?? 0) + 1);
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

/**
 * Scrapes `/metrics` on the local_health lane (as Prometheus would); returns each isolate's V8 heap
 * in use (bytes, isolate 0 first), so growth can be told apart: JS objects kept, or native memory.
 */
async function scrape(port: number): Promise<number[]> {
  const response = await fetch(`http://127.0.0.1:${port}/metrics`).catch(() => undefined);
  const text = await response?.text().catch(() => "") ?? "";
  const heaps: number[] = [];
  for (
    const match of text.matchAll(/^portcullis_isolate_heap_used_bytes\{isolate="(\d+)"\} (\S+)$/gm)
  ) {
    heaps[Number(match[1])] = Number(match[2]);
  }
  return heaps;
}

const mb = (bytes: number) => (bytes / MB).toFixed(1);

/** Soaks one configuration; prints its samples and returns its summary row. */
async function soak(dir: string, upstream: string, setup: typeof CONFIGURATIONS[number]) {
  const { flags, ports } = await writeSoakGateway(`${dir}/${setup.name}`, upstream, setup);
  const notable: string[] = [];
  const child = await spawnQuiet(`${dir}/${setup.name}`, flags, notable);
  try {
    await new Promise((resolve) => setTimeout(resolve, 2000));
    const idle = { rss: await rssOf(child.pid), fds: await fdsOf(child.pid) };
    const statuses = new Map<string, number>();
    const started = performance.now();
    // The load outlasts the last sample, so no sample sees the connections close.
    const driving = drive(ports.public, started + SECONDS * 1000 + 1000, statuses);
    const samples: Sample[] = [];
    for (let at = SAMPLE_MS; at <= SECONDS * 1000; at += SAMPLE_MS) {
      await new Promise((resolve) => setTimeout(resolve, started + at - performance.now()));
      const heaps = await scrape(ports.local);
      const requests = [...statuses.values()].reduce((s, n) => s + n, 0);
      samples.push({
        seconds: at / 1000,
        rss: await rssOf(child.pid),
        fds: await fdsOf(child.pid),
        requests,
        heaps,
      });
    }
    const { sent, skipped } = await driving;
    console.log(
      `\n### ${setup.name}: ${RATE} req/s for ${SECONDS} s, ${CONNECTIONS} connections\n`,
    );
    console.log(`idle before load: RSS ${mb(idle.rss)} MB, ${idle.fds} descriptors\n`);
    console.log(
      "| t (s) | RSS (MB) | descriptors | req/s in the interval | V8 heap in use per isolate (MB) |",
    );
    console.log("|---|---|---|---|---|");
    samples.forEach((s, i) => {
      const rate = (s.requests - (samples[i - 1]?.requests ?? 0)) / (SAMPLE_MS / 1000);
      const heaps = s.heaps.map(mb).join(" / ");
      console.log(`| ${s.seconds} | ${mb(s.rss)} | ${s.fds} | ${rate.toFixed(0)} | ${heaps} |`);
    });
    const mix = [...statuses].sort().map(([s, n]) => `${s}: ${n}`).join(", ");
    console.log(`\nsent ${sent} (${skipped} skipped: the driver was saturated); outcomes ${mix}`);
    if (notable.length > 0) {
      console.log(`\nnotable gateway lines (first ${NOTABLE_CAP}):\n${notable.join("\n")}`);
    }
    return summarize(setup.name, idle.rss, samples);
  } finally {
    await stopAll([child]);
  }
}

/** Slopes per minute: all samples, the second half, the troughs (lowest RSS of each minute). */
function summarize(name: string, idle: number, samples: readonly Sample[]): string {
  const minutes = (s: Sample) => s.seconds / 60;
  const rss = (list: readonly Sample[]) => slope(list.map((s) => [minutes(s), s.rss / MB]));
  const late = samples.slice(Math.floor(samples.length / 2));
  const troughs: Sample[] = [];
  const perMinute = 60_000 / SAMPLE_MS;
  for (let i = 0; i + perMinute <= samples.length; i += perMinute) {
    const window = samples.slice(i, i + perMinute);
    troughs.push(window.reduce((low, s) => s.rss < low.rss ? s : low));
  }
  const fds = slope(samples.map((s) => [minutes(s), s.fds]));
  // The heaps' second half: a V8 heap still sizing itself grows early, a leak grows throughout.
  const heap = slope(late.map((s) => [minutes(s), s.heaps.reduce((a, b) => a + b, 0) / MB]));
  const fixed = (n: number) => Number.isNaN(n) ? "–" : n.toFixed(2);
  const first = samples[0];
  const last = samples.at(-1)!;
  return `| ${name} | ${mb(idle)} | ${mb(first.rss)} | ${mb(last.rss)} | ${
    fixed(rss(samples))
  } | ` +
    `${fixed(rss(late))} | ${fixed(rss(troughs))} | ${
      fixed(heap)
    } | ${first.fds} → ${last.fds} | ` +
    `${fixed(fds)} |`;
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
  try {
    await Deno.chmod(dir, 0o755);
    const port = freePort();
    await Deno.mkdir(`${dir}/www`, { mode: 0o755 });
    await Deno.mkdir(`${dir}/up`);
    await Deno.writeFile(`${dir}/www/k64`, new Uint8Array(64 * 1024).fill(120));
    await Deno.writeTextFile(`${dir}/upstream.conf`, nginxUpstreamConfig(`${dir}/up`, dir, port));
    children.push(await startNginx(`${dir}/upstream.conf`, port));
    const rows: string[] = [];
    for (const setup of setups) rows.push(await soak(dir, `127.0.0.1:${port}`, setup));
    console.log(`\n### Soak summary: ${RATE} req/s, ${SECONDS} s, samples every 10 s\n`);
    console.log(
      "| configuration | idle RSS (MB) | first sample (MB) | last sample (MB) | RSS slope (MB/min) " +
        "| second half (MB/min) | troughs (MB/min) | V8 heaps, second half (MB/min) | descriptors " +
        "| descriptor slope (/min) |",
    );
    console.log("|---|---|---|---|---|---|---|---|---|---|");
    for (const row of rows) console.log(row);
  } finally {
    await stopAll(children);
    await Deno.remove(dir, { recursive: true }).catch(() => {});
  }
}

if (import.meta.main) await main();
