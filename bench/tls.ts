/**
 * The TLS handshake cost on the public lane: one gateway serving the same `respond` route on a
 * plain and a TLS listener (ECDSA P-256 certificate generated here), measured with wrk as
 * kept-alive requests per second (plain vs TLS) and as new TLS connections per second (one request
 * per connection). Interleaved, medians of `BENCH_RUNS`.
 *
 * Needs `wrk` (Debian: apt-get install -y wrk). Usage: deno task bench:tls
 *
 * @module
 */
import { generateCertificate } from "../src/tls/self_signed.ts";
import { freePort, has, median, spawnGateway, stopAll, writeGateway, wrk } from "./lib.ts";

const RUNS = Number(Deno.env.get("BENCH_RUNS") ?? 3);
const SECONDS = Number(Deno.env.get("BENCH_SECONDS") ?? 5);

async function main() {
  if (!await has("wrk")) {
    console.error("bench/tls: wrk is not installed (apt-get install -y wrk); skipped");
    return;
  }
  const dir = await Deno.makeTempDir({ prefix: "portcullis-bench-tls-" });
  const children: Deno.ChildProcess[] = [];
  try {
    const certificate = await generateCertificate("bench.test");
    const tenant = {
      host: "bench.test",
      routes: [{ match: { path: "/" }, respond: { body: "Hello from Portcullis.\n" } }],
    };
    const plainPort = freePort();
    const tlsPort = freePort();
    const lanes = (port: number, tls: boolean) => ({
      public: {
        listen: [{ hostname: "127.0.0.1", port }],
        ...(tls
          ? {
            tls: {
              certificates: [{
                cert_file: "certs/bench.crt",
                key_file: "certs/bench.key",
                default: true,
              }],
            },
          }
          : {}),
      },
      local_health: { listen: [{ hostname: "127.0.0.1", port: freePort() }] },
    });
    const config = (port: number, tls: boolean) => ({
      node_id: "bench-edge",
      mode: "local",
      tenants_dir: "tenants",
      lanes: lanes(port, tls),
      ledger: { application_slots: 1024, inflight_bytes: 1 << 30, per_connection: 8 },
    });
    for (
      const [name, port, tls] of [["plain", plainPort, false], ["tls", tlsPort, true]] as const
    ) {
      if (tls) {
        await Deno.mkdir(`${dir}/${name}/certs`, { recursive: true });
        await Deno.writeTextFile(`${dir}/${name}/certs/bench.crt`, certificate.certPem);
        await Deno.writeTextFile(`${dir}/${name}/certs/bench.key`, certificate.keyPem);
      }
      const flags = await writeGateway(`${dir}/${name}`, config(port, tls), [tenant]);
      children.push(
        await spawnGateway(`${dir}/${name}`, flags),
      );
    }
    const host = ["Host: bench.test"];
    const cases = [
      {
        name: "plain HTTP/1.1, kept alive",
        url: `http://127.0.0.1:${plainPort}/`,
        headers: host,
        c: 64,
      },
      {
        name: "TLS HTTP/1.1, kept alive",
        url: `https://127.0.0.1:${tlsPort}/`,
        headers: host,
        c: 64,
      },
      {
        name: "TLS, new connection per request",
        url: `https://127.0.0.1:${tlsPort}/`,
        headers: [...host, "Connection: close"],
        c: 16,
      },
    ];
    const results = new Map<string, { rps: number; p50: number; p99: number }[]>();
    for (let run = 0; run < RUNS; run++) {
      for (const c of cases) {
        const result = await wrk(c.url, { seconds: SECONDS, connections: c.c, headers: c.headers });
        results.set(c.name, [...(results.get(c.name) ?? []), result]);
      }
    }
    const base = median(results.get(cases[0].name)!.map((r) => r.rps));
    console.log(`\nwrk -t2 -d${SECONDS}s, ${RUNS} interleaved runs, medians\n`);
    console.log("| case | requests/s | min-max | p50 ms | p99 ms | ratio to plain |");
    console.log("|---|---|---|---|---|---|");
    for (const c of cases) {
      const rows = results.get(c.name)!;
      const rps = rows.map((r) => r.rps);
      console.log(
        `| ${c.name} (-c${c.c}) | ${median(rps).toFixed(0)} | ${Math.min(...rps).toFixed(0)}-` +
          `${Math.max(...rps).toFixed(0)} | ${median(rows.map((r) => r.p50)).toFixed(2)} | ` +
          `${median(rows.map((r) => r.p99)).toFixed(2)} | ${(median(rps) / base).toFixed(2)} |`,
      );
    }
  } finally {
    await stopAll(children);
    await Deno.remove(dir, { recursive: true });
  }
}

await main();
