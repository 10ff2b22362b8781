/**
 * What keeping the public lane off the protected lanes' event loop costs: the same gateway (a
 * respond route) run as one isolate (`shared_event_loop: true`) and with its public lane in a
 * request worker (the default), interleaved: idle RSS, RSS after load, requests per second and
 * p50/p99 latency (wrk). Then what the parse gate costs by itself: a bare node:http server with
 * and without it. Loopback only, bounded in time.
 *
 * Usage: deno task bench:isolation   (needs `wrk`)
 *
 * @module
 */
import {
  freePort,
  has,
  median,
  ROOT,
  rssOf,
  spawnGateway,
  spawnReady,
  stopAll,
  writeGateway,
  wrk,
  type WrkResult,
} from "./lib.ts";

const RUNS = Number(Deno.env.get("BENCH_RUNS") ?? 3);
const SECONDS = Number(Deno.env.get("BENCH_SECONDS") ?? 5);
const CONNECTIONS = 16;
const MB = 1024 * 1024;

interface Sample {
  readonly idle: number;
  readonly loaded: number;
  readonly run: WrkResult;
}

/** Boots one gateway, measures it once, stops it. */
async function measureGateway(shared: boolean): Promise<Sample> {
  const dir = await Deno.makeTempDir({ prefix: "portcullis-bench-" });
  const [publicPort, localPort] = [freePort(), freePort()];
  const demo = await Deno.readTextFile(`${ROOT}deploy/example/tenants/demo.localhost.yaml`);
  const flags = await writeGateway(dir, {
    node_id: "bench-edge",
    mode: "local",
    tenants_dir: "tenants",
    shared_event_loop: shared,
    lanes: {
      public: { listen: [{ hostname: "127.0.0.1", port: publicPort }] },
      local_health: { listen: [{ hostname: "127.0.0.1", port: localPort }] },
    },
    ledger: { application_slots: 1024, inflight_bytes: 1 << 30, per_connection: 8 },
  }, []);
  await Deno.writeTextFile(`${dir}/tenants/demo.localhost.yaml`, demo);
  const child = await spawnGateway(dir, flags);
  try {
    await new Promise((resolve) => setTimeout(resolve, 1000));
    const idle = await rssOf(child.pid);
    const run = await wrk(`http://127.0.0.1:${publicPort}/`, {
      seconds: SECONDS,
      connections: CONNECTIONS,
      headers: ["Host: demo.localhost"],
    });
    return { idle, loaded: await rssOf(child.pid), run };
  } finally {
    await stopAll([child]);
    await Deno.remove(dir, { recursive: true }).catch(() => {});
  }
}

/** Boots the bare server (gated or not) and runs wrk once. */
async function measureBare(gated: boolean): Promise<WrkResult> {
  const port = freePort();
  const child = await spawnReady(Deno.execPath(), [
    "run",
    "--no-prompt",
    `--allow-net=127.0.0.1:${port}`,
    `--allow-read=${ROOT}`,
    `${ROOT}bench/fixtures/bare_node.ts`,
    String(port),
    ...(gated ? ["gated"] : []),
  ]);
  try {
    return await wrk(`http://127.0.0.1:${port}/`, { seconds: SECONDS, connections: 64 });
  } finally {
    await stopAll([child]);
  }
}

function row(name: string, samples: readonly Sample[]): string {
  const m = (pick: (s: Sample) => number) => median(samples.map(pick));
  return `| ${name} | ${(m((s) => s.idle) / MB).toFixed(0)} | ${
    (m((s) => s.loaded) / MB).toFixed(0)
  } | ` +
    `${m((s) => s.run.rps).toFixed(0)} | ${m((s) => s.run.p50).toFixed(2)} | ` +
    `${m((s) => s.run.p99).toFixed(2)} |`;
}

async function main() {
  if (!await has("wrk")) {
    console.error("isolation: wrk is not installed (Debian: apt-get install -y wrk); skipped");
    return;
  }
  const shared: Sample[] = [];
  const worker: Sample[] = [];
  const bare: number[] = [];
  const gated: number[] = [];
  for (let run = 0; run < RUNS; run++) {
    shared.push(await measureGateway(true));
    worker.push(await measureGateway(false));
    bare.push((await measureBare(false)).rps);
    gated.push((await measureBare(true)).rps);
  }
  console.log(`\n${RUNS} interleaved runs of ${SECONDS} s, wrk -c${CONNECTIONS}, medians:\n`);
  console.log("| public lane | idle RSS (MB) | RSS after load (MB) | rps | p50 (ms) | p99 (ms) |");
  console.log("|---|---|---|---|---|---|");
  console.log(row("shared event loop (one isolate)", shared));
  console.log(row("own request worker (default)", worker));
  const ratio = median(gated) / median(bare);
  console.log(
    `\nparse gate alone (bare node:http, wrk -c64): ${median(bare).toFixed(0)} rps without, ` +
      `${median(gated).toFixed(0)} rps with (${ratio.toFixed(2)}×)`,
  );
}

if (import.meta.main) await main();
