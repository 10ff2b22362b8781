/**
 * The proxy benchmark: the full chain (public lane → ledger → routing → header hygiene → SOCKS →
 * upstream) against a minimal Deno proxy through the same microsocks and the same nginx upstream.
 * A second gateway runs the same chain with every tenant policy on (rate limit, caps, WAF,
 * blocklist rules, TTL blocklist, security headers), so the policy phase's cost is read off the
 * same run. Cases are interleaved, each run `BENCH_RUNS` times; prints rps, p50, p99 and the
 * ratio; then 1 MiB bodies, and the gateway's RSS growth while a 1 GiB body streams down and up.
 *
 * Needs `wrk`, `nginx` and `microsocks` (Debian: apt-get install -y wrk nginx microsocks).
 * Usage: deno task bench:proxy (`BENCH_ONLY=policies` for the policy cost alone, 7 runs).
 * `BENCH_BASELINE=<folder>` adds the same two gateways run from another checkout (e.g. a
 * `git worktree` of the commit before a refactor), interleaved with these in the same run.
 *
 * @module
 */
import http from "node:http";
import {
  benchEdgeConfig,
  cpuSecondsOf,
  download,
  freePort,
  haveTools,
  median,
  nginxUpstreamConfig,
  peakRss,
  ROOT,
  spawnGateway,
  spawnReady,
  startMicrosocks,
  startNginx,
  stopAll,
  writeGateway,
  wrk,
  type WrkResult,
} from "./lib.ts";

/** `policies`: only plain vs every-policy-on, 64 B responses, more runs (the policy cost). */
const ONLY = Deno.env.get("BENCH_ONLY");
const RUNS = Number(Deno.env.get("BENCH_RUNS") ?? (ONLY === "policies" ? 7 : 3));
const SECONDS = Number(Deno.env.get("BENCH_SECONDS") ?? 5);
/** A small young generation: external buffers are freed sooner while bodies stream. */
const SMALL_YOUNG = "--max-semi-space-size=1";
const PLAIN_CASE = "portcullis via microsocks";
const POLICIES_CASE = "portcullis via microsocks, every policy on";
/** Another checkout to compare with, in the same run (its own main.ts, this run's config). */
const BASELINE = Deno.env.get("BENCH_BASELINE")?.replace(/\/?$/, "/");

/** Every policy on, with limits the benchmark's one client never reaches. */
const EVERY_POLICY = {
  rate_limit: { per_second: 1_000_000, burst: 1_000_000 },
  caps: {},
  waf: { headers: ["user-agent", "referer", "cookie"] },
  blocklist: {
    rules: [
      { name: "admin", path: "^/(admin|wp-admin|phpmyadmin)", action: "404" },
      { name: "scanner", header: { name: "user-agent", pattern: "sqlmap|nikto|masscan" } },
    ],
    block_after: 10,
  },
  ttl_block: {},
  security_headers: {},
};

async function main() {
  if (!await haveTools("bench/proxy", { wrk: ["--version"], nginx: ["-v"], microsocks: ["-h"] })) {
    return;
  }
  const dir = await Deno.makeTempDir({ prefix: "portcullis-bench-proxy-" });
  const children: Deno.ChildProcess[] = [];
  const closers: (() => void)[] = [];
  try {
    const ports = {
      nginx: freePort(),
      socks: freePort(),
      minimal: freePort(),
    };
    await Deno.chmod(dir, 0o755); // nginx workers run as an unprivileged user
    await Deno.mkdir(`${dir}/www`, { mode: 0o755 });
    await Deno.writeFile(`${dir}/www/big`, new Uint8Array(1024 * 1024).fill(120));
    const huge = await Deno.open(`${dir}/www/huge`, { create: true, write: true });
    await huge.truncate(1024 ** 3); // sparse: no disk used
    huge.close();
    await Deno.writeTextFile(`${dir}/nginx.conf`, nginxUpstreamConfig(dir, dir, ports.nginx));
    children.push(await startNginx(`${dir}/nginx.conf`, ports.nginx));
    children.push(await startMicrosocks(ports.socks));
    const sink = await startSink();
    closers.push(() => sink.close());
    const tenants = [{
      host: "bench.test",
      routes: [
        {
          name: "sink",
          match: { path: "/sink" },
          proxy: { backends: [{ url: `http://127.0.0.1:${sink.port}` }] },
        },
        {
          name: "all",
          match: { prefix: "/" },
          proxy: { backends: [{ url: `http://127.0.0.1:${ports.nginx}` }] },
        },
      ],
    }];
    const start = async (
      name: string,
      v8: string[],
      served: Record<string, unknown>[] = tenants,
      root?: string,
    ) => {
      const at = { ...ports, gateway: freePort(), local: freePort() };
      const flags = await writeGateway(`${dir}/${name}`, gatewayConfig(at), served, root);
      const child = await spawnGateway(`${dir}/${name}`, flags, v8, root);
      children.push(child);
      return { child, port: at.gateway };
    };
    const plain = await start("default", []);
    const small = await start("semi1", [`--v8-flags=${SMALL_YOUNG}`]);
    const guarded = await start("policies", [], [{ ...tenants[0], policies: EVERY_POLICY }]);
    children.push(
      await spawnReady(Deno.execPath(), [
        "run",
        "--no-prompt",
        `--allow-net=127.0.0.1:${ports.minimal},127.0.0.1:${ports.socks}`,
        "--allow-env",
        "--allow-read",
        `${ROOT}bench/fixtures/minimal_socks_proxy.ts`,
        String(ports.minimal),
        String(ports.socks),
        "127.0.0.1",
        String(ports.nginx),
      ]),
    );

    const cases = [
      { name: "minimal Deno proxy via microsocks", url: `http://127.0.0.1:${ports.minimal}` },
      { name: PLAIN_CASE, url: `http://127.0.0.1:${plain.port}`, pid: plain.child.pid },
      {
        name: `portcullis via microsocks, ${SMALL_YOUNG}`,
        url: `http://127.0.0.1:${small.port}`,
        pid: small.child.pid,
      },
      { name: POLICIES_CASE, url: `http://127.0.0.1:${guarded.port}`, pid: guarded.child.pid },
    ];
    if (BASELINE) {
      const before = await start("baseline", [], tenants, BASELINE);
      const policed = [{ ...tenants[0], policies: EVERY_POLICY }];
      const beforePolicies = await start("baseline-policies", [], policed, BASELINE);
      cases.push(
        {
          name: `${PLAIN_CASE} (baseline)`,
          url: `http://127.0.0.1:${before.port}`,
          pid: before.child.pid,
        },
        {
          name: `${POLICIES_CASE} (baseline)`,
          url: `http://127.0.0.1:${beforePolicies.port}`,
          pid: beforePolicies.child.pid,
        },
      );
    }
    const headers = ["Host: bench.test"];
    if (ONLY === "policies") {
      const pair = cases.filter((c) => c.name.startsWith(PLAIN_CASE));
      await table("64 B responses", pair, headers, "/small", "rps");
      return;
    }
    await table("64 B responses", cases, headers, "/small", "rps");
    await table("1 MiB responses", cases, headers, "/big", "mbps");

    // Then, on fresh gateway processes: RSS while 1 GiB streams down and up.
    console.log("\n1 GiB bodies through a fresh gateway (RSS sampled every 50 ms)\n");
    console.log(
      "| gateway | direction | seconds | MB/s | RSS before MB | peak RSS MB | growth MB |",
    );
    console.log("|---|---|---|---|---|---|---|");
    const fresh = await start("fresh-default", []);
    await streaming("default V8 flags", fresh.child.pid, fresh.port);
    const freshSmall = await start("fresh-semi1", [`--v8-flags=${SMALL_YOUNG}`]);
    await streaming(SMALL_YOUNG, freshSmall.child.pid, freshSmall.port);
  } finally {
    for (const close of closers) close();
    await stopAll(children);
    await Deno.remove(dir, { recursive: true });
  }
}

/** One benchmark case: a URL, and the gateway process to charge CPU to (none for the baseline). */
interface Case {
  readonly name: string;
  readonly url: string;
  readonly pid?: number;
}

/** A wrk run, with the gateway's CPU per request when the case has a process. */
interface Run extends WrkResult {
  readonly cpuUs?: number;
}

async function table(
  title: string,
  cases: readonly Case[],
  headers: string[],
  path: string,
  metric: "rps" | "mbps",
) {
  const connections = metric === "rps" ? 64 : 16;
  const results = new Map<string, Run[]>();
  for (const c of cases) await wrk(c.url + path, { seconds: 1, connections, headers }); // warm up
  for (let run = 0; run < RUNS; run++) {
    for (const c of cases) {
      const before = c.pid ? await cpuSecondsOf(c.pid) : 0;
      const result = await wrk(c.url + path, { seconds: SECONDS, connections, headers });
      const cpuUs = c.pid
        ? ((await cpuSecondsOf(c.pid)) - before) * 1e6 / result.requests
        : undefined;
      results.set(c.name, [...(results.get(c.name) ?? []), { ...result, cpuUs }]);
    }
  }
  const base = median(results.get(cases[0].name)!.map((r) => r[metric]));
  console.log(
    `\n${title}: wrk -t2 -c${connections} -d${SECONDS}s, ${RUNS} interleaved runs, medians\n`,
  );
  console.log(
    `| case | ${
      metric === "rps" ? "rps" : "MB/s"
    } | min-max | p50 ms | p99 ms | non-2xx | ratio | ` +
      "gateway CPU µs/req |",
  );
  console.log("|---|---|---|---|---|---|---|---|");
  for (const c of cases) {
    const rows = results.get(c.name)!;
    const values = rows.map((r) => r[metric]);
    const cpu = c.pid ? median(rows.map((r) => r.cpuUs!)).toFixed(0) : "-";
    console.log(
      `| ${c.name} | ${median(values).toFixed(metric === "rps" ? 0 : 1)} | ` +
        `${Math.min(...values).toFixed(0)}-${Math.max(...values).toFixed(0)} | ` +
        `${median(rows.map((r) => r.p50)).toFixed(2)} | ${
          median(rows.map((r) => r.p99)).toFixed(2)
        } | ` +
        `${rows.reduce((s, r) => s + r.non2xx, 0)} | ${(median(values) / base).toFixed(2)} | ` +
        `${cpu} |`,
    );
  }
  const off = results.get(PLAIN_CASE);
  const on = results.get(POLICIES_CASE);
  if (off && on) {
    const ratio = median(on.map((r) => r[metric])) / median(off.map((r) => r[metric]));
    // Per run too: the runs are interleaved, so pairs share the machine's state.
    const pairs = on.map((r, i) => (r[metric] / off[i][metric]).toFixed(3)).join(", ");
    const cpuOff = median(off.map((r) => r.cpuUs!));
    const cpuOn = median(on.map((r) => r.cpuUs!));
    console.log(
      `\npolicies on / off: throughput ${ratio.toFixed(3)} (per run ${pairs}); ` +
        `gateway CPU per request ${cpuOn.toFixed(0)} vs ${cpuOff.toFixed(0)} µs ` +
        `(+${((cpuOn / cpuOff - 1) * 100).toFixed(1)} %)`,
    );
  }
}

/** Streams 1 GiB down and 1 GiB up through a gateway, sampling its RSS every 50 ms. */
async function streaming(label: string, pid: number, port: number) {
  for (const direction of ["download", "upload"] as const) {
    const run = await peakRss(pid, () => direction === "download" ? download(port) : upload(port));
    const { before, peak, seconds } = run;
    const mb = (n: number) => (n / 1024 / 1024).toFixed(1);
    console.log(
      `| ${label} | ${direction} | ${seconds.toFixed(1)} | ${
        (run.value / 1e6 / seconds).toFixed(0)
      } | ` +
        `${mb(before)} | ${mb(peak)} | ${mb(peak - before)} |`,
    );
  }
}

/** An upstream that reads request bodies to the end before answering (nginx's `return` would not). */
async function startSink(): Promise<{ port: number; close(): void }> {
  const server = http.createServer((request, response) => {
    let bytes = 0;
    request.on("data", (chunk: Uint8Array) => bytes += chunk.byteLength);
    request.on("end", () => {
      const body = String(bytes);
      response.writeHead(200, { "content-length": String(body.length) });
      response.end(body);
    });
  });
  await new Promise<void>((resolve) => server.listen({ host: "127.0.0.1", port: 0 }, resolve));
  const port = (server.address() as { port: number }).port;
  return { port, close: () => server.close() };
}

/** POSTs 1 GiB through the gateway to the bench's sink; returns the bytes sent. */
function upload(port: number): Promise<number> {
  const total = 1024 ** 3;
  const chunk = Buffer.alloc(256 * 1024, 120);
  return new Promise((resolve, reject) => {
    const request = http.request({
      host: "127.0.0.1",
      port,
      path: "/sink",
      method: "POST",
      headers: { host: "bench.test", "content-length": String(total) },
    }, (response) => {
      response.resume();
      response.on(
        "end",
        () =>
          response.statusCode === 200
            ? resolve(total)
            : reject(new Error(`upload answered ${response.statusCode}`)),
      );
    });
    request.on("error", reject);
    let sent = 0;
    const pump = () => {
      while (sent < total) {
        sent += chunk.byteLength;
        if (!request.write(chunk)) return void request.once("drain", pump);
      }
      request.end();
    };
    pump();
  });
}

function gatewayConfig(ports: Record<string, number>): Record<string, unknown> {
  return benchEdgeConfig(ports as { gateway: number; local: number }, {
    socks: [{ hostname: "127.0.0.1", port: ports.socks }],
  });
}

await main();
