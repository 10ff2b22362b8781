/**
 * What the hub transports cost: the same edge config, once dialling microsocks directly
 * (`egress.socks`), once through the hub's relay (`egress.transport: socks5_tls`: mutual TLS to
 * the hub, which pipes the stream to the same microsocks) and once through the hub's tunnel
 * (`https_tunnel`: a WebSocket per connection over mutual TLS, the same microsocks behind it), all
 * to the same nginx upstream, in the same run, interleaved. Prints, per body size (64 B with wrk -t2 -c64, 1 MiB with -c16), rps or
 * MB/s, p50, p99, the ratio to direct, and CPU per request of the edge and of the hub; then the
 * latency the transport adds: the median of the per-run p50 differences, and p50 over one
 * connection (`wrk -t1 -c1`), where queueing does not hide the per-request cost. Isolation is off
 * in both edges (`isolate_tenants: false`): microsocks takes no RFC 1929 credentials, and the
 * transport itself is what is measured. The edges' access log is off in both: `spawnReady` keeps
 * every byte a child prints, and at these rates the bench process then spent about a third of a
 * core re-reading it (measured), taken from the processes under test. Hub, edges, nginx and
 * microsocks are subprocesses on loopback, each under its derived flags; every one is stopped at
 * the end.
 *
 * Needs `wrk`, `nginx` and `microsocks` (Debian: apt-get install -y wrk nginx microsocks).
 * Usage: deno task bench:transport (`BENCH_RUNS`, default 3; `BENCH_SECONDS`, default 5).
 *
 * @module
 */
import { stringify } from "yaml";
import { TestPki } from "../tests/fixtures/certs.ts";
import {
  benchEdgeConfig,
  cpuSecondsOf,
  freePort,
  haveTools,
  median,
  nginxUpstreamConfig,
  ROOT,
  spawnGateway,
  spawnReady,
  startMicrosocks,
  startNginx,
  stopAll,
  writeGateway,
  type WrkResult,
} from "./lib.ts";

const RUNS = Number(Deno.env.get("BENCH_RUNS") ?? 3);
const SECONDS = Number(Deno.env.get("BENCH_SECONDS") ?? 5);
const HEADERS = ["Host: bench.test"];
const DIRECT = "edge → microsocks (egress.socks)";
const RELAYED = "edge → socks5_tls → hub → microsocks";
const TUNNELLED = "edge → https_tunnel → hub → microsocks";

/** How wrk loads a case: its path, threads and connections. */
interface Load {
  readonly path: string;
  readonly threads: number;
  readonly connections: number;
}

/** One case: where wrk sends, and the processes its CPU is charged to. */
interface Case {
  readonly name: string;
  readonly url: string;
  readonly edge: number;
  readonly hub?: number;
  /** The edge's `local_health` port (for `/v1/egress`). */
  readonly health: number;
}

/** What a table shows: requests per second, or MB per second. */
type Metric = "rps" | "mbps";

/** A wrk run with its load, socket errors and the CPU per request of the edge (and hub). */
interface Run extends WrkResult {
  readonly load: Load;
  readonly errors: number;
  readonly edgeUs: number;
  readonly hubUs?: number;
}

async function main() {
  if (
    !await haveTools("bench/transport", { wrk: ["--version"], nginx: ["-v"], microsocks: ["-h"] })
  ) return;
  const dir = await Deno.makeTempDir({ prefix: "portcullis-bench-transport-" });
  const pki = await TestPki.create();
  const children: Deno.ChildProcess[] = [];
  try {
    const ports = {
      nginx: freePort(),
      socks: freePort(),
      relay: freePort(),
      tunnel: freePort(),
      api: freePort(),
    };
    children.push(...await startUpstream(dir, ports));
    const caFile = `${pki.dir}/ca.crt`;
    await Deno.writeTextFile(caFile, pki.ca.certPem);
    const hub = await startHub(`${dir}/hub`, { pki, caFile, ports });
    children.push(hub);
    const edgeCert = await pki.issue("bench-edge");
    const backends = [{ url: `http://127.0.0.1:${ports.nginx}` }];
    const tenants = [{
      host: "bench.test",
      routes: [{ name: "all", match: { prefix: "/" }, proxy: { backends } }],
    }];
    const startEdge = async (name: string, egress: Record<string, unknown>) => {
      const at = { gateway: freePort(), local: freePort() };
      const config = edgeConfig(at, { ...egress, isolate_tenants: false });
      const flags = await writeGateway(`${dir}/${name}`, config, tenants);
      const child = await spawnGateway(`${dir}/${name}`, flags);
      children.push(child);
      return { url: `http://127.0.0.1:${at.gateway}`, edge: child.pid, health: at.local };
    };
    const socks = [{ hostname: "127.0.0.1", port: ports.socks }];
    const transport = {
      kind: "socks5_tls",
      hub: `127.0.0.1:${ports.relay}`,
      ports: [ports.socks],
      cert_file: edgeCert.certFile,
      key_file: edgeCert.keyFile,
      ca_file: caFile,
    };
    const tunnel = { ...transport, kind: "https_tunnel", hub: `127.0.0.1:${ports.tunnel}` };
    const cases: Case[] = [
      { name: DIRECT, ...await startEdge("direct", { socks }) },
      { name: RELAYED, hub: hub.pid, ...await startEdge("relayed", { transport }) },
      { name: TUNNELLED, hub: hub.pid, ...await startEdge("tunnelled", { transport: tunnel }) },
    ];
    const small = await measure(cases, { path: "/small", threads: 2, connections: 64 });
    table("64 B responses", cases, small, "rps");
    const big = await measure(cases, { path: "/big", threads: 2, connections: 16 });
    table("1 MiB responses", cases, big, "mbps");
    const single = await measure(cases, { path: "/small", threads: 1, connections: 1 });
    table("64 B responses, one connection", cases, single, "rps");
    addedLatency([["64 B, -c64", small], ["1 MiB, -c16", big], ["64 B, -c1", single]]);
    await egressCounters(cases);
  } finally {
    await stopAll(children);
    await pki.dispose();
    await Deno.remove(dir, { recursive: true });
  }
}

/** nginx serving `/small` (64 B) and `/big` (1 MiB), and microsocks, on their ports. */
async function startUpstream(
  dir: string,
  ports: { nginx: number; socks: number },
): Promise<Deno.ChildProcess[]> {
  await Deno.chmod(dir, 0o755); // nginx workers run as an unprivileged user
  await Deno.mkdir(`${dir}/www`, { mode: 0o755 });
  await Deno.writeFile(`${dir}/www/big`, new Uint8Array(1024 * 1024).fill(120));
  await Deno.writeTextFile(`${dir}/nginx.conf`, nginxUpstreamConfig(dir, dir, ports.nginx));
  const nginx = await startNginx(`${dir}/nginx.conf`, ports.nginx);
  try {
    return [nginx, await startMicrosocks(ports.socks)];
  } catch (error) {
    await stopAll([nginx]);
    throw error;
  }
}

/**
 * Writes the hub config (relay, tunnel, a pool of one: microsocks), derives its flags and boots it.
 */
async function startHub(
  dir: string,
  given: {
    pki: TestPki;
    caFile: string;
    ports: { socks: number; relay: number; tunnel: number; api: number };
  },
): Promise<Deno.ChildProcess> {
  const { pki, caFile, ports } = given;
  const server = await pki.issue("hub.test", { altNames: ["127.0.0.1"] });
  await Deno.mkdir(`${dir}/runtime`, { recursive: true });
  await Deno.mkdir(`${dir}/tokens`, { mode: 0o700 });
  const file = `${dir}/hub.yaml`;
  await Deno.writeTextFile(
    file,
    stringify({
      role: "hub",
      node_id: "bench-hub",
      runtime_dir: "runtime",
      runtime: { watch: false },
      api: { listen: [{ hostname: "127.0.0.1", port: ports.api }], tokens_dir: "tokens" },
      transport: {
        socks5_tls: {
          listen: { hostname: "127.0.0.1", port: ports.relay },
          cert_file: server.certFile,
          key_file: server.keyFile,
          client_ca_file: caFile,
        },
        https_tunnel: {
          listen: { hostname: "127.0.0.1", port: ports.tunnel },
          cert_file: server.certFile,
          key_file: server.keyFile,
          client_ca_file: caFile,
        },
      },
      pool: { socks: [{ hostname: "127.0.0.1", port: ports.socks }] },
    }),
  );
  const main = `${ROOT}main.ts`;
  const derived = await new Deno.Command(Deno.execPath(), {
    args: ["run", "--allow-read", "--ignore-env=LOG_STREAM,LOG_TOKENS", main, "flags", file],
    stdout: "piped",
    stderr: "piped",
  }).output();
  if (!derived.success) throw new Error(new TextDecoder().decode(derived.stderr));
  const flags = new TextDecoder().decode(derived.stdout).trim().split(" ");
  return spawnReady(Deno.execPath(), ["run", "--no-prompt", ...flags, main, "hub", file]);
}

function edgeConfig(
  ports: { gateway: number; local: number },
  egress: Record<string, unknown>,
): Record<string, unknown> {
  return benchEdgeConfig(ports, egress, { observe: { access_log: { enabled: false } } });
}

/** Warms each case up for a second, then runs them interleaved `RUNS` times. */
async function measure(cases: readonly Case[], load: Load): Promise<Map<string, Run[]>> {
  const runs = new Map<string, Run[]>(cases.map((c) => [c.name, []]));
  for (const c of cases) await wrkRun(c.url, load, 1);
  for (let run = 0; run < RUNS; run++) {
    for (const c of cases) {
      const before = [await cpuSecondsOf(c.edge), c.hub ? await cpuSecondsOf(c.hub) : 0];
      const result = await wrkRun(c.url, load, SECONDS);
      const us = async (pid: number, start: number) =>
        ((await cpuSecondsOf(pid)) - start) * 1e6 / result.requests;
      runs.get(c.name)!.push({
        ...result,
        load,
        edgeUs: await us(c.edge, before[0]),
        hubUs: c.hub ? await us(c.hub, before[1]) : undefined,
      });
    }
  }
  return runs;
}

/**
 * Runs wrk and parses its summary, socket errors included (`lib.ts`'s `wrk` fixes `-t2`, which
 * wrk refuses for one connection, and drops the socket errors this bench reports).
 */
async function wrkRun(
  url: string,
  load: Load,
  seconds: number,
): Promise<WrkResult & { errors: number }> {
  const args = [`-t${load.threads}`, `-c${load.connections}`, `-d${seconds}s`, "--latency"];
  for (const header of HEADERS) args.push("-H", header);
  args.push(url + load.path);
  const out = await new Deno.Command("wrk", { args, stdout: "piped" }).output();
  const text = new TextDecoder().decode(out.stdout);
  const rps = Number(/Requests\/sec:\s+([\d.]+)/.exec(text)?.[1]);
  if (!Number.isFinite(rps)) throw new Error(`wrk output not understood:\n${text}`);
  const ms = (label: string) => {
    const match = new RegExp(`\\s${label}%\\s+([\\d.]+)(us|ms|s)`).exec(text);
    const scale = { us: 0.001, ms: 1, s: 1000 }[match?.[2] ?? "ms"] ?? NaN;
    return match ? Number(match[1]) * scale : NaN;
  };
  const transfer = /Transfer\/sec:\s+([\d.]+)(B|KB|MB|GB)/.exec(text);
  const unit = { B: 1e-6, KB: 1.024e-3, MB: 1.048576, GB: 1073.741824 } as const;
  const socket = /connect (\d+), read (\d+), write (\d+), timeout (\d+)/.exec(text);
  return {
    rps,
    p50: ms("50"),
    p99: ms("99"),
    mbps: transfer ? Number(transfer[1]) * unit[transfer[2] as keyof typeof unit] : NaN,
    non2xx: Number(/Non-2xx or 3xx responses:\s+(\d+)/.exec(text)?.[1] ?? 0),
    requests: Number(/(\d+) requests in/.exec(text)?.[1]),
    errors: socket ? socket.slice(1).reduce((sum, n) => sum + Number(n), 0) : 0,
  };
}

/** Prints one markdown row. */
function row(cells: readonly (string | number)[]): void {
  console.log(`| ${cells.join(" | ")} |`);
}

/** One table: medians per case, the spread, summed failures, ratio to direct, CPU per request. */
function table(title: string, cases: readonly Case[], runs: Map<string, Run[]>, metric: Metric) {
  const { threads, connections } = runs.get(cases[0].name)![0].load;
  const flags = `-t${threads} -c${connections} -d${SECONDS}s`;
  console.log(`\n${title}: wrk ${flags}, ${RUNS} interleaved runs, medians\n`);
  row(["case", metric === "rps" ? "rps" : "MB/s", "min-max", "p50 ms", "p99 ms", "non-2xx"].concat(
    ["socket errors", "ratio", "edge CPU µs/req", "hub CPU µs/req"],
  ));
  row(Array(10).fill("---"));
  const base = median(runs.get(cases[0].name)!.map((r) => r[metric]));
  const digits = metric === "rps" ? 0 : 1;
  for (const c of cases) {
    const rows = runs.get(c.name)!;
    const values = rows.map((r) => r[metric]);
    const mid = (pick: (r: Run) => number, places: number) =>
      median(rows.map(pick)).toFixed(places);
    row([
      c.name,
      median(values).toFixed(digits),
      `${Math.min(...values).toFixed(digits)}-${Math.max(...values).toFixed(digits)}`,
      mid((r) => r.p50, 2),
      mid((r) => r.p99, 2),
      rows.reduce((sum, r) => sum + r.non2xx, 0),
      rows.reduce((sum, r) => sum + r.errors, 0),
      (median(values) / base).toFixed(2),
      mid((r) => r.edgeUs, 0),
      c.hub ? mid((r) => r.hubUs!, 0) : "-",
    ]);
  }
}

/** The p50 each transport adds: per run (the cases ran back to back), and their median. */
function addedLatency(sets: readonly [string, Map<string, Run[]>][]) {
  console.log("\nAdded latency per request (transport p50 − direct p50, paired by run)\n");
  row(["load", "transport", "per run ms", "median ms", "direct p50 ms", "transport p50 ms"]);
  row(Array(6).fill("---"));
  for (const [label, runs] of sets) {
    const direct = runs.get(DIRECT)!;
    for (const [name, via] of [["socks5_tls", RELAYED], ["https_tunnel", TUNNELLED]]) {
      const through = runs.get(via)!;
      const added = through.map((r, i) => r.p50 - direct[i].p50);
      row([
        label,
        name,
        added.map((ms) => ms.toFixed(3)).join(", "),
        median(added).toFixed(3),
        median(direct.map((r) => r.p50)).toFixed(3),
        median(through.map((r) => r.p50)).toFixed(3),
      ]);
    }
  }
}

/**
 * Each edge's SOCKS attempts and failures since boot (`/v1/egress`), so failures that never reach
 * the client (no non-2xx, no socket error) are seen too. It is the protected isolate's view, fed
 * by the request worker's outcomes: attempts sent while the worker's breaker refused (fallback)
 * are not among them.
 */
async function egressCounters(cases: readonly Case[]) {
  console.log("\nEgress counters after the runs (GET /v1/egress on each edge's local_health)\n");
  row(["case", "instance", "state", "attempts", "failures", "breaker opens", "retries"]);
  row(Array(7).fill("---"));
  for (const c of cases) {
    const egress = await (await fetch(`http://127.0.0.1:${c.health}/v1/egress`)).json();
    for (const i of egress.instances) {
      row([c.name, i.address, i.state, i.requests, i.failures, i.opens, egress.retries]);
    }
  }
}

await main();
