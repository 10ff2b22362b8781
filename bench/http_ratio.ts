/**
 * The public lane's `respond` route against a bare server on the same substrate (node:http inside
 * Deno), with bare Deno.serve for reference: the cases are interleaved, each run several times with
 * wrk, and the medians and the ratio printed. Loopback only, bounded in time.
 *
 * Usage: deno task bench   (needs `wrk`; on Debian: apt-get install -y wrk)
 *
 * @module
 */
import {
  freePort,
  has,
  median,
  ROOT,
  spawnGateway,
  spawnReady,
  stopAll,
  writeGateway,
  wrk,
} from "./lib.ts";

const RUNS = Number(Deno.env.get("BENCH_RUNS") ?? 3);
const SECONDS = Number(Deno.env.get("BENCH_SECONDS") ?? 5);
const CONNECTIONS = 64;

async function main() {
  if (!await has("wrk")) {
    console.error("http_ratio: wrk is not installed (Debian: apt-get install -y wrk); skipped");
    return;
  }
  const dir = await Deno.makeTempDir({ prefix: "portcullis-bench-" });
  const children: Deno.ChildProcess[] = [];
  try {
    const [gatewayPort, localPort, nodePort, denoPort] = [
      freePort(),
      freePort(),
      freePort(),
      freePort(),
    ];
    const demo = await Deno.readTextFile(`${ROOT}deploy/example/tenants/demo.localhost.yaml`);
    const flags = await writeGateway(dir, {
      node_id: "bench-edge",
      mode: "local",
      tenants_dir: "tenants",
      lanes: {
        public: { listen: [{ hostname: "127.0.0.1", port: gatewayPort }] },
        local_health: { listen: [{ hostname: "127.0.0.1", port: localPort }] },
      },
      ledger: { application_slots: 1024, inflight_bytes: 1 << 30, per_connection: 8 },
    }, []);
    await Deno.writeTextFile(`${dir}/tenants/demo.localhost.yaml`, demo);
    const deno = Deno.execPath();
    children.push(
      await spawnGateway(dir, flags),
      await spawnReady(deno, [
        "run",
        "--no-prompt",
        `--allow-net=127.0.0.1:${nodePort}`,
        `${ROOT}bench/fixtures/bare_node.ts`,
        String(nodePort),
      ]),
      await spawnReady(deno, [
        "run",
        "--no-prompt",
        `--allow-net=127.0.0.1:${denoPort}`,
        `${ROOT}bench/fixtures/bare_deno.ts`,
        String(denoPort),
      ]),
    );
    const cases = [
      {
        name: "bare node:http (same substrate)",
        url: `http://127.0.0.1:${nodePort}/`,
        headers: [],
      },
      {
        name: "portcullis public respond route",
        url: `http://127.0.0.1:${gatewayPort}/`,
        headers: ["Host: demo.localhost"],
      },
      { name: "bare Deno.serve (reference)", url: `http://127.0.0.1:${denoPort}/`, headers: [] },
    ];
    const results = new Map<string, { rps: number; p50: number; p99: number }[]>();
    for (let run = 0; run < RUNS; run++) {
      for (const c of cases) {
        const result = await wrk(c.url, {
          seconds: SECONDS,
          connections: CONNECTIONS,
          headers: c.headers,
        });
        results.set(c.name, [...(results.get(c.name) ?? []), result]);
      }
    }
    const base = median(results.get(cases[0].name)!.map((r) => r.rps));
    console.log(
      `\nwrk -t2 -c${CONNECTIONS} -d${SECONDS}s, ${RUNS} interleaved runs, medians (min-max rps)\n`,
    );
    console.log("| case | rps | min-max | p50 ms | p99 ms | ratio to bare node:http |");
    console.log("|---|---|---|---|---|---|");
    for (const c of cases) {
      const rows = results.get(c.name)!;
      const rps = rows.map((r) => r.rps);
      console.log(
        `| ${c.name} | ${median(rps).toFixed(0)} | ${Math.min(...rps).toFixed(0)}-${
          Math.max(...rps).toFixed(0)
        } | ` +
          `${median(rows.map((r) => r.p50)).toFixed(2)} | ${
            median(rows.map((r) => r.p99)).toFixed(2)
          } | ` +
          `${(median(rps) / base).toFixed(2)} |`,
      );
    }
  } finally {
    await stopAll(children);
    await Deno.remove(dir, { recursive: true });
  }
}

await main();
