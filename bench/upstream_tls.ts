/**
 * What TLS to a backend costs: one gateway proxies `/small` (64 bytes) through one microsocks
 * instance to one nginx, once over plain HTTP (`http://127.0.0.1:<plain>`) and once over TLS
 * (`https://127.0.0.1:<ssl>` with `tls: { ca_file, server_name: backend.test }`, the leaf issued
 * by a throwaway test CA; the address keeps microsocks off the system resolver). The two cases are
 * interleaved, `BENCH_RUNS` rounds of `wrk -t2 -c64 -d<BENCH_SECONDS>s` in alternating order after
 * a warm-up; prints medians of rps, p50, p99, non-2xx, the gateway's CPU per request, and the
 * TLS/plain ratios.
 *
 * Pooling is checked on nginx's side, per measured run: its `stub_status` counts the connections
 * it accepted and the requests it served, and the TLS server logs the first request of each
 * connection (one line per handshake, with `$ssl_session_reused`). Kept-alive pooling shows as
 * handshakes ≪ requests; the handshakes left are connections the pool closed, e.g. when more come
 * back idle after a burst than its idle cap keeps (`MAX_FREE_SOCKETS` in src/egress/agents.ts).
 *
 * Needs `wrk`, `nginx` (with the ssl and stub_status modules) and `microsocks` (Debian: apt-get
 * install -y wrk nginx microsocks). Usage: deno task bench:upstream-tls (about 40 s with the
 * defaults, BENCH_RUNS=3 and BENCH_SECONDS=5).
 *
 * @module
 */
import { TestPki } from "../tests/fixtures/certs.ts";
import {
  benchEdgeConfig,
  cpuSecondsOf,
  freePort,
  haveTools,
  median,
  nginxUpstreamConfig,
  spawnGateway,
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
const NAME = "backend.test";

/** One case: the Host the gateway routes on, to nginx's plain or TLS port. */
interface Case {
  readonly name: string;
  readonly host: string;
  readonly tls: boolean;
}

const CASES: readonly Case[] = [
  { name: "plain HTTP via microsocks", host: "plain.test", tls: false },
  { name: "TLS via microsocks", host: "tls.test", tls: true },
];

/** One measured run, with what nginx and the gateway saw during it. */
interface Run extends WrkResult {
  readonly cpuUs: number;
  /** Requests nginx served and connections it accepted (the status probe taken off). */
  readonly served: number;
  readonly accepted: number;
  /** Lines of the TLS server's first-request log: handshakes, and how many resumed a session. */
  readonly handshakes: number;
  readonly resumed: number;
}

/** The ports, files and processes a run needs. */
interface Bench {
  readonly dir: string;
  readonly gateway: { port: number; pid: number };
  readonly statusPort: number;
}

async function main() {
  if (
    !await haveTools("bench/upstream_tls", {
      wrk: ["--version"],
      nginx: ["-v"],
      microsocks: ["-h"],
    })
  ) return;
  const dir = await Deno.makeTempDir({ prefix: "portcullis-bench-upstream-tls-" });
  const pki = await TestPki.create();
  const children: Deno.ChildProcess[] = [];
  try {
    await Deno.chmod(dir, 0o755); // nginx workers run as an unprivileged user
    const leaf = await pki.issue(NAME);
    const ports = { plain: freePort(), ssl: freePort(), status: freePort(), socks: freePort() };
    const config = nginxConfig(dir, ports, leaf);
    await Deno.writeTextFile(`${dir}/nginx.conf`, config);
    children.push(await startNginx(`${dir}/nginx.conf`, ports.ssl));
    children.push(await startMicrosocks(ports.socks));
    const gatewayPort = freePort();
    const at = `${dir}/gateway`;
    await Deno.mkdir(`${at}/tenants`, { recursive: true });
    await Deno.writeTextFile(`${at}/tenants/upstream-ca.pem`, pki.ca.certPem);
    const flags = await writeGateway(
      at,
      gatewayConfig({ gateway: gatewayPort, local: freePort(), socks: ports.socks }),
      tenants(ports),
    );
    const child = await spawnGateway(at, flags);
    children.push(child);
    report(
      await measure({
        dir,
        gateway: { port: gatewayPort, pid: child.pid },
        statusPort: ports.status,
      }),
    );
  } finally {
    await stopAll(children);
    await pki.dispose();
    await Deno.remove(dir, { recursive: true });
  }
}

/** Warms both cases up, then runs `RUNS` rounds, alternating which case goes first. */
async function measure(bench: Bench): Promise<Map<string, Run[]>> {
  const url = `http://127.0.0.1:${bench.gateway.port}/small`;
  for (const c of CASES) {
    const warm = await wrk(url, {
      seconds: 1,
      connections: CONNECTIONS,
      headers: [`Host: ${c.host}`],
    });
    if (warm.non2xx > 0) throw new Error(`${c.name}: ${warm.non2xx} non-2xx in the warm-up`);
  }
  const results = new Map<string, Run[]>();
  for (let round = 0; round < RUNS; round++) {
    const order = round % 2 === 0 ? CASES : [...CASES].reverse();
    for (const c of order) {
      const before = await observe(bench);
      const result = await wrk(url, {
        seconds: SECONDS,
        connections: CONNECTIONS,
        headers: [`Host: ${c.host}`],
      });
      const after = await observe(bench);
      results.set(c.name, [...(results.get(c.name) ?? []), {
        ...result,
        cpuUs: (after.cpu - before.cpu) * 1e6 / result.requests,
        // The second probe is one connection and one request of its own.
        served: after.requests - before.requests - 1,
        accepted: after.accepts - before.accepts - 1,
        handshakes: after.handshakes - before.handshakes,
        resumed: after.resumed - before.resumed,
      }]);
    }
  }
  return results;
}

/** The gateway's CPU seconds, nginx's counters and the TLS handshake log, read now. */
async function observe(bench: Bench) {
  const cpu = await cpuSecondsOf(bench.gateway.pid);
  const status = await stubStatus(bench.statusPort);
  const log = await Deno.readTextFile(`${bench.dir}/tls-handshakes.log`).catch(() => "");
  const lines = log.split("\n").filter((line) => line !== "");
  const resumed = lines.filter((line) => line.split(" ")[1] === "r").length;
  return { cpu, ...status, handshakes: lines.length, resumed };
}

/** nginx's `stub_status` over a one-request HTTP/1.0 connection: accepts and requests so far. */
async function stubStatus(port: number): Promise<{ accepts: number; requests: number }> {
  const conn = await Deno.connect({ hostname: "127.0.0.1", port });
  await conn.write(new TextEncoder().encode("GET /status HTTP/1.0\r\nHost: status\r\n\r\n"));
  const text = await new Response(conn.readable).text();
  const counts = /\n\s*(\d+)\s+(\d+)\s+(\d+)\s*\n/.exec(text);
  if (!counts) throw new Error(`stub_status not understood:\n${text}`);
  return { accepts: Number(counts[1]), requests: Number(counts[3]) };
}

/** Prints the table, the TLS/plain ratios, and nginx's connections against its requests. */
function report(results: Map<string, Run[]>) {
  console.log(
    `\n64 B responses through one microsocks to nginx: wrk -t2 -c${CONNECTIONS} -d${SECONDS}s, ` +
      `${RUNS} interleaved runs, medians\n`,
  );
  console.log(
    "| case | rps | min-max | p50 ms | p99 ms | non-2xx | gateway CPU µs/req | " +
      "wrk requests | nginx requests | upstream connections | TLS handshakes (resumed) |",
  );
  console.log("|---|---|---|---|---|---|---|---|---|---|---|");
  const of = (c: Case) => results.get(c.name)!;
  const sum = (rows: Run[], pick: (r: Run) => number) => rows.reduce((s, r) => s + pick(r), 0);
  for (const c of CASES) {
    const rows = of(c);
    const rps = rows.map((r) => r.rps);
    const handshakes = c.tls
      ? `${sum(rows, (r) => r.handshakes)} (${sum(rows, (r) => r.resumed)})`
      : "-";
    console.log(
      `| ${c.name} | ${median(rps).toFixed(0)} | ` +
        `${Math.min(...rps).toFixed(0)}-${Math.max(...rps).toFixed(0)} | ` +
        `${median(rows.map((r) => r.p50)).toFixed(2)} | ${
          median(rows.map((r) => r.p99)).toFixed(2)
        } | ` +
        `${sum(rows, (r) => r.non2xx)} | ${median(rows.map((r) => r.cpuUs)).toFixed(0)} | ` +
        `${sum(rows, (r) => r.requests)} | ${sum(rows, (r) => r.served)} | ` +
        `${sum(rows, (r) => r.accepted)} | ${handshakes} |`,
    );
  }
  const [plain, secure] = [of(CASES[0]), of(CASES[1])];
  const ratio = (pick: (r: Run) => number) =>
    (median(secure.map(pick)) / median(plain.map(pick))).toFixed(3);
  // Per round too: a round's two runs share the machine's state.
  const pairs = secure.map((r, i) => (r.rps / plain[i].rps).toFixed(3)).join(", ");
  console.log(
    `\nTLS / plain: rps ${ratio((r) => r.rps)} (per round ${pairs}), p99 ${ratio((r) => r.p99)}, ` +
      `gateway CPU per request ${ratio((r) => r.cpuUs)}`,
  );
  const served = sum(secure, (r) => r.served);
  const handshakes = sum(secure, (r) => r.handshakes);
  console.log(
    `TLS pooling: ${handshakes} handshakes for ${served} requests nginx served ` +
      `(1 per ${(served / Math.max(1, handshakes)).toFixed(0)}), measured runs only`,
  );
}

/**
 * lib's upstream config (`/small` on the plain port), plus the same `/small` on a TLS port with
 * the leaf, a log of each TLS connection's first request, and `stub_status` on a port of its own.
 */
function nginxConfig(
  state: string,
  ports: { plain: number; ssl: number; status: number },
  leaf: { certFile: string; keyFile: string },
): string {
  const base = nginxUpstreamConfig(state, state, ports.plain);
  const small = /location = \/small [^\n]*/.exec(base)![0];
  const extra =
    `  log_format handshakes '$connection $ssl_session_reused $ssl_protocol $ssl_server_name';
  map $connection_requests $first_on_connection { 1 1; default 0; }
  server {
    listen 127.0.0.1:${ports.ssl} ssl;
    ssl_certificate ${leaf.certFile};
    ssl_certificate_key ${leaf.keyFile};
    access_log ${state}/tls-handshakes.log handshakes if=$first_on_connection;
    ${small}
  }
  server {
    listen 127.0.0.1:${ports.status};
    location = /status { stub_status; }
  }
}
`;
  return base.replace(/}\n$/, extra);
}

/** Two tenants on one nginx: `plain.test` over HTTP, `tls.test` over TLS checked as backend.test. */
function tenants(ports: { plain: number; ssl: number }): Record<string, unknown>[] {
  const route = (url: string, tls?: Record<string, unknown>) => ({
    name: "all",
    match: { prefix: "/" },
    proxy: { backends: [{ url }], ...(tls ? { tls } : {}) },
  });
  return [
    { host: "plain.test", routes: [route(`http://127.0.0.1:${ports.plain}`)] },
    {
      host: "tls.test",
      routes: [
        route(`https://127.0.0.1:${ports.ssl}`, {
          ca_file: "upstream-ca.pem",
          server_name: NAME,
        }),
      ],
    },
  ];
}

function gatewayConfig(ports: Record<string, number>): Record<string, unknown> {
  return benchEdgeConfig(ports as { gateway: number; local: number }, {
    socks: [{ hostname: "127.0.0.1", port: ports.socks }],
    allow_private: ["127.0.0.0/8"],
  });
}

await main();
