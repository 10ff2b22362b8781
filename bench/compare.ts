/**
 * Side by side: the same nginx upstream (64 B and 1 MiB) behind nginx, HAProxy, Caddy, Portcullis
 * (direct egress, and through microsocks; one request worker and one per core) and a minimal Deno
 * proxy through microsocks. Cases are interleaved, each run `BENCH_RUNS` times (default 3) for
 * `BENCH_SECONDS` (default 5); prints medians, spread, p50, p99 and the ratio to nginx as markdown.
 * Then the isolation claim (health probes while the public lane is flooded, against nginx with a
 * separate health server) and memory (10,000 idle keep-alive connections; RSS while 1 GiB streams).
 *
 * Installs wrk, nginx, haproxy, caddy and microsocks with apt-get when missing (as root); loopback
 * only; stops everything it started. Usage: `deno task bench:compare` (`BENCH_ONLY=throughput`,
 * `isolation` or `memory` for one part).
 *
 * @module
 */
import http from "node:http";
import net from "node:net";
import {
  download,
  freePort,
  has,
  median,
  nginxUpstreamConfig,
  peakRss,
  ROOT,
  rssOf,
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
const ONLY = Deno.env.get("BENCH_ONLY");
const CORES = navigator.hardwareConcurrency;
const TOOLS: [string, string, string[]][] = [
  ["wrk", "wrk", ["--version"]],
  ["nginx", "nginx", ["-v"]],
  ["haproxy", "haproxy", ["-v"]],
  ["caddy", "caddy", ["version"]],
  ["microsocks", "microsocks", ["-h"]],
];

interface Case {
  readonly name: string;
  readonly url: string;
}

async function ensureTools(): Promise<boolean> {
  const missing: string[] = [];
  for (const [pkg, command, args] of TOOLS) if (!await has(command, args)) missing.push(pkg);
  if (missing.length === 0) return true;
  console.error(`bench/compare: installing ${missing.join(" ")} (apt-get)`);
  const apt = (args: string[]) =>
    new Deno.Command("apt-get", { args, stdout: "null", stderr: "inherit" }).output();
  if ((await apt(["install", "-y", ...missing])).code !== 0) {
    await apt(["update"]);
    if ((await apt(["install", "-y", ...missing])).code !== 0) {
      console.error(`bench/compare: could not install ${missing.join(" ")}; skipped`);
      return false;
    }
  }
  return true;
}

async function main() {
  if (!await ensureTools()) return;
  const dir = await Deno.makeTempDir({ prefix: "portcullis-bench-compare-" });
  const children: Deno.ChildProcess[] = [];
  try {
    await Deno.chmod(dir, 0o755);
    const up = { port: freePort() };
    await Deno.mkdir(`${dir}/www`, { mode: 0o755 });
    await Deno.writeFile(`${dir}/www/big`, new Uint8Array(1024 * 1024).fill(120));
    const huge = await Deno.open(`${dir}/www/huge`, { create: true, write: true });
    await huge.truncate(1024 ** 3);
    huge.close();
    await Deno.writeTextFile(
      `${dir}/upstream.conf`,
      nginxUpstreamConfig(`${dir}/up`, dir, up.port),
    );
    await Deno.mkdir(`${dir}/up`);
    children.push(await startNginx(`${dir}/upstream.conf`, up.port));
    const socks = freePort();
    children.push(await startMicrosocks(socks));
    const upstream = `127.0.0.1:${up.port}`;

    if (!ONLY || ONLY === "throughput") {
      const cases = await startPeers(dir, upstream, socks, children);
      await table("64 B responses", cases, "/small", "rps", 64);
      await table("1 MiB responses", cases, "/big", "mbps", 16);
    }
    if (!ONLY || ONLY === "isolation") await isolation(dir, upstream, children);
    if (!ONLY || ONLY === "memory") await memory(dir, upstream, children);
  } finally {
    await stopAll(children);
    await Deno.remove(dir, { recursive: true }).catch(() => {});
  }
}

/** Starts every proxy in front of `upstream`; returns the cases, nginx first. */
async function startPeers(
  dir: string,
  upstream: string,
  socks: number,
  children: Deno.ChildProcess[],
): Promise<Case[]> {
  const ports = { nginx: freePort(), haproxy: freePort(), caddy: freePort(), minimal: freePort() };
  await Deno.mkdir(`${dir}/px`);
  await Deno.writeTextFile(
    `${dir}/proxy.conf`,
    `worker_processes auto;
daemon off;
pid ${dir}/px/nginx.pid;
error_log ${dir}/px/error.log;
events { worker_connections 8192; }
http {
  access_log off;
  client_body_temp_path ${dir}/px/body;
  proxy_temp_path ${dir}/px/proxy;
  fastcgi_temp_path ${dir}/px/fastcgi;
  uwsgi_temp_path ${dir}/px/uwsgi;
  scgi_temp_path ${dir}/px/scgi;
  upstream up { server ${upstream}; keepalive 64; }
  server {
    listen 127.0.0.1:${ports.nginx};
    location / { proxy_pass http://up; proxy_http_version 1.1; proxy_set_header Connection ""; }
  }
}
`,
  );
  children.push(await startNginx(`${dir}/proxy.conf`, ports.nginx));
  await Deno.writeTextFile(
    `${dir}/haproxy.cfg`,
    `global
  maxconn 8192
defaults
  mode http
  timeout connect 5s
  timeout client 30s
  timeout server 30s
  http-reuse always
frontend f
  bind 127.0.0.1:${ports.haproxy}
  default_backend b
backend b
  server s ${upstream}
`,
  );
  children.push(
    await spawnReady("haproxy", ["-f", `${dir}/haproxy.cfg`, "-db"], { port: ports.haproxy }),
  );
  await Deno.writeTextFile(
    `${dir}/Caddyfile`,
    `{
  admin off
  auto_https off
}
http://:${ports.caddy} {
  bind 127.0.0.1
  reverse_proxy ${upstream}
}
`,
  );
  children.push(
    await spawnReady("caddy", ["run", "--config", `${dir}/Caddyfile`, "--adapter", "caddyfile"], {
      port: ports.caddy,
      env: { HOME: dir, XDG_DATA_HOME: dir, XDG_CONFIG_HOME: dir },
    }),
  );
  children.push(
    await spawnReady(Deno.execPath(), [
      "run",
      "--no-prompt",
      `--allow-net=127.0.0.1:${ports.minimal},127.0.0.1:${socks}`,
      "--allow-env",
      "--allow-read",
      `${ROOT}bench/fixtures/minimal_socks_proxy.ts`,
      String(ports.minimal),
      String(socks),
      "127.0.0.1",
      upstream.split(":")[1],
    ]),
  );
  const gateway = async (
    name: string,
    workers: number | "auto",
    egress: Record<string, unknown>,
  ) => {
    const folder = `${dir}/${name.toLowerCase().replace(/[^a-z0-9]+/g, "-")}`;
    const port = await startGateway(folder, upstream, workers, egress, children);
    return { name, url: `http://127.0.0.1:${port}` };
  };
  const direct = { direct: [upstream] };
  const viaSocks = { socks: [{ hostname: "127.0.0.1", port: socks }] };
  return [
    { name: "nginx proxy", url: `http://127.0.0.1:${ports.nginx}` },
    { name: "HAProxy", url: `http://127.0.0.1:${ports.haproxy}` },
    { name: "Caddy reverse_proxy", url: `http://127.0.0.1:${ports.caddy}` },
    await gateway("Portcullis direct, 1 worker", 1, direct),
    await gateway(`Portcullis direct, ${CORES} workers`, "auto", direct),
    await gateway("Portcullis via microsocks, 1 worker", 1, viaSocks),
    await gateway(`Portcullis via microsocks, ${CORES} workers`, "auto", viaSocks),
    { name: "minimal Deno proxy via microsocks", url: `http://127.0.0.1:${ports.minimal}` },
  ];
}

/** Starts a gateway proxying everything to `upstream`; returns its public port. */
async function startGateway(
  dir: string,
  upstream: string,
  workers: number | "auto",
  egress: Record<string, unknown>,
  children: Deno.ChildProcess[],
  extra: { provider?: number; local?: number; maxConnections?: number; v8?: string[] } = {},
): Promise<number> {
  const port = freePort();
  const lanes: Record<string, unknown> = {
    public: { listen: [{ hostname: "127.0.0.1", port }] },
    local_health: { listen: [{ hostname: "127.0.0.1", port: extra.local ?? freePort() }] },
  };
  if (extra.provider) {
    lanes.provider_health = { listen: [{ hostname: "127.0.0.1", port: extra.provider }] };
  }
  const config = {
    node_id: "bench-edge",
    mode: "local",
    workers,
    tenants_dir: "tenants",
    lanes,
    timeouts: { header_ms: 10000, idle_ms: 120000, request_ms: 600000 },
    ledger: {
      application_slots: 1024,
      inflight_bytes: 1 << 30,
      per_connection: 8,
      lanes: {
        public: { deadline_ms: 60000, max_connections: extra.maxConnections ?? 4096 },
      },
    },
    egress,
  };
  const tenant = {
    host: "bench.test",
    routes: [{
      name: "all",
      match: { prefix: "/" },
      proxy: { backends: [{ url: `http://${upstream}` }] },
    }],
  };
  const flags = await writeGateway(dir, config, [tenant]);
  children.push(
    await spawnGateway(dir, flags, extra.v8),
  );
  return port;
}

async function table(
  title: string,
  cases: readonly Case[],
  path: string,
  metric: "rps" | "mbps",
  connections: number,
) {
  const headers = ["Host: bench.test"];
  const expected = path === "/small" ? 64 : 1024 * 1024;
  for (const c of cases) {
    // wrk counts any 200: make sure each proxy really returns the upstream's body.
    const [status, bytes] = await fetchLength(c.url + path);
    if (status !== 200 || bytes !== expected) {
      throw new Error(`${c.name} answered ${status} with ${bytes} bytes for ${path}`);
    }
  }
  const results = new Map<string, WrkResult[]>();
  for (const c of cases) await wrk(c.url + path, { seconds: 1, connections, headers });
  for (let run = 0; run < RUNS; run++) {
    for (const c of cases) {
      const result = await wrk(c.url + path, { seconds: SECONDS, connections, headers });
      results.set(c.name, [...(results.get(c.name) ?? []), result]);
    }
  }
  const base = median(results.get(cases[0].name)!.map((r) => r[metric]));
  console.log(
    `\n### ${title}: wrk -t2 -c${connections} -d${SECONDS}s, ${RUNS} interleaved runs, medians\n`,
  );
  console.log(
    `| case | ${
      metric === "rps" ? "rps" : "MB/s"
    } | min–max | p50 ms | p99 ms | non-2xx | × nginx |`,
  );
  console.log("|---|---|---|---|---|---|---|");
  for (const c of cases) {
    const rows = results.get(c.name)!;
    const values = rows.map((r) => r[metric]);
    console.log(
      `| ${c.name} | ${median(values).toFixed(0)} | ${Math.min(...values).toFixed(0)}–${
        Math.max(...values).toFixed(0)
      } | ${median(rows.map((r) => r.p50)).toFixed(2)} | ${
        median(rows.map((r) => r.p99)).toFixed(2)
      } | ${rows.reduce((s, r) => s + r.non2xx, 0)} | ${(median(values) / base).toFixed(2)} |`,
    );
  }
}

/** GETs `url` with `Host: bench.test`; the status and the body's length. */
function fetchLength(url: string): Promise<[number, number]> {
  return new Promise((resolve, reject) => {
    http.get(url, { headers: { host: "bench.test" }, agent: false }, (response) => {
      let bytes = 0;
      response.on("data", (chunk: Uint8Array) => bytes += chunk.byteLength);
      response.on("end", () => resolve([response.statusCode ?? 0, bytes]));
    }).on("error", reject);
  });
}

/** One probe: a fresh connection, `GET path`, a 200 within `timeoutMs`. */
function probe(port: number, path: string, timeoutMs = 1000): Promise<number | undefined> {
  const started = performance.now();
  return new Promise((resolve) => {
    const request = http.get({ host: "127.0.0.1", port, path, agent: false, timeout: timeoutMs });
    request.on("response", (response) => {
      response.resume();
      response.on(
        "end",
        () => resolve(response.statusCode === 200 ? performance.now() - started : undefined),
      );
    });
    request.on("timeout", () => request.destroy());
    request.on("error", () => resolve(undefined));
  });
}

/** Probes `targets` at `perSecond` each for `seconds`; returns success rate and latencies. */
async function prober(
  targets: { name: string; port: number; path: string }[],
  perSecond: number,
  seconds: number,
) {
  const results = new Map(targets.map((t) => [t.name, [] as (number | undefined)[]]));
  const pending: Promise<void>[] = [];
  for (let i = 0; i < perSecond * seconds; i++) {
    for (const t of targets) {
      pending.push(probe(t.port, t.path).then((ms) => void results.get(t.name)!.push(ms)));
    }
    await new Promise((resolve) => setTimeout(resolve, 1000 / perSecond));
  }
  await Promise.all(pending);
  return results;
}

function percentile(values: number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))] ?? NaN;
}

/** Floods the public side with wrk while probing the health ports, for Portcullis and for nginx. */
async function isolation(dir: string, upstream: string, children: Deno.ChildProcess[]) {
  const seconds = Math.max(SECONDS * 2, 10);
  const rows: string[] = [];
  const run = async (
    label: string,
    publicUrl: string,
    targets: { name: string; port: number; path: string }[],
  ) => {
    const flood = wrk(`${publicUrl}/small`, {
      seconds,
      connections: 256,
      headers: ["Host: bench.test"],
    });
    await new Promise((resolve) => setTimeout(resolve, 500));
    const probes = await prober(targets, 10, seconds - 2);
    const load = await flood;
    for (const [name, values] of probes) {
      const ok = values.filter((v): v is number => v !== undefined);
      rows.push(
        `| ${label} | ${name} | ${
          (100 * ok.length / values.length).toFixed(1)
        } % (${ok.length}/${values.length}) | ` +
          `${percentile(ok, 0.5).toFixed(2)} | ${percentile(ok, 0.99).toFixed(2)} | ${
            load.rps.toFixed(0)
          } |`,
      );
    }
  };
  const provider = freePort();
  const local = freePort();
  const gateway = await startGateway(
    `${dir}/isolation`,
    upstream,
    "auto",
    { direct: [upstream] },
    children,
    {
      provider,
      local,
    },
  );
  await run(`Portcullis, ${CORES} workers`, `http://127.0.0.1:${gateway}`, [
    { name: "provider_health /healthz", port: provider, path: "/healthz" },
    { name: "local_health /healthz", port: local, path: "/healthz" },
  ]);
  const ports = { public: freePort(), health: freePort() };
  await Deno.mkdir(`${dir}/iso-nginx`);
  await Deno.writeTextFile(
    `${dir}/iso-nginx.conf`,
    `worker_processes auto;
daemon off;
pid ${dir}/iso-nginx/nginx.pid;
error_log ${dir}/iso-nginx/error.log;
events { worker_connections 8192; }
http {
  access_log off;
  client_body_temp_path ${dir}/iso-nginx/body;
  proxy_temp_path ${dir}/iso-nginx/proxy;
  fastcgi_temp_path ${dir}/iso-nginx/fastcgi;
  uwsgi_temp_path ${dir}/iso-nginx/uwsgi;
  scgi_temp_path ${dir}/iso-nginx/scgi;
  upstream up { server ${upstream}; keepalive 64; }
  server {
    listen 127.0.0.1:${ports.public};
    location / { proxy_pass http://up; proxy_http_version 1.1; proxy_set_header Connection ""; }
  }
  server {
    listen 127.0.0.1:${ports.health};
    location = /healthz { default_type text/plain; return 200 "ok\\n"; }
  }
}
`,
  );
  children.push(await startNginx(`${dir}/iso-nginx.conf`, ports.public));
  await run("nginx, separate health server", `http://127.0.0.1:${ports.public}`, [
    { name: "health server /healthz", port: ports.health, path: "/healthz" },
  ]);
  console.log(
    `\n### Isolation: wrk -t2 -c256 floods the public side for ${seconds} s; probes at 10/s each, a fresh connection per probe, 1 s timeout\n`,
  );
  console.log("| server | probe | success | p50 ms | p99 ms | flood rps |");
  console.log("|---|---|---|---|---|---|");
  for (const row of rows) console.log(row);
}

/** RSS with 10,000 idle keep-alive connections, and growth while 1 GiB streams through. */
async function memory(dir: string, upstream: string, children: Deno.ChildProcess[]) {
  console.log("\n### Memory\n");
  console.log("| measurement | workers | RSS before MB | RSS after MB | growth MB |");
  console.log("|---|---|---|---|---|");
  const variants = [
    { workers: 1, label: "1", v8: [] },
    { workers: "auto", label: String(CORES), v8: [] },
    { workers: 1, label: "1, --max-semi-space-size=1", v8: ["--v8-flags=--max-semi-space-size=1"] },
  ] as const;
  for (const { workers, label, v8 } of variants) {
    const local = freePort();
    const folder = `${dir}/mem-${label.replace(/[^a-z0-9]+/gi, "-")}`;
    const port = await startGateway(folder, upstream, workers, { direct: [upstream] }, children, {
      local,
      maxConnections: 12_000,
      v8: [...v8],
    });
    const pid = children.at(-1)!.pid;
    const before = await rssOf(pid);
    const sockets = await openIdle(port, 10_000);
    await new Promise((resolve) => setTimeout(resolve, 1000));
    const idle = await rssOf(pid);
    for (const socket of sockets) socket.destroy();
    const mb = (n: number) => (n / 1024 / 1024).toFixed(1);
    console.log(
      `| 10,000 idle keep-alive connections | ${label} | ${mb(before)} | ${mb(idle)} | ${
        mb(idle - before)
      } |`,
    );
    await new Promise((resolve) => setTimeout(resolve, 1000));
    const run = await peakRss(pid, () => download(port));
    console.log(
      `| 1 GiB download streamed (${
        (run.value / 1e6 / run.seconds).toFixed(0)
      } MB/s) | ${label} | ${mb(run.before)} | ${mb(run.peak)} (peak) | ${
        mb(run.peak - run.before)
      } |`,
    );
  }
}

/** Opens `count` keep-alive connections, each after one answered request, and leaves them idle. */
async function openIdle(port: number, count: number): Promise<net.Socket[]> {
  const sockets: net.Socket[] = [];
  const one = () =>
    new Promise<void>((resolve, reject) => {
      const socket = net.connect(port, "127.0.0.1", () => {
        socket.write("GET /small HTTP/1.1\r\nHost: bench.test\r\n\r\n");
      });
      socket.once("data", () => resolve());
      socket.once("error", reject);
      sockets.push(socket);
    });
  for (let i = 0; i < count; i += 100) {
    await Promise.all(Array.from({ length: Math.min(100, count - i) }, one));
  }
  return sockets;
}

await main();
