/**
 * The public lane's `respond` route against a bare server on the same substrate (node:http inside
 * Deno), with bare Deno.serve for reference: the cases are interleaved, each run several times with
 * wrk, and the medians and the ratio printed. Loopback only, bounded in time.
 *
 * Usage: deno task bench   (needs `wrk`; on Debian: apt-get install -y wrk)
 */
import { stringify } from "yaml";

const RUNS = Number(Deno.env.get("BENCH_RUNS") ?? 3);
const SECONDS = Number(Deno.env.get("BENCH_SECONDS") ?? 5);
const CONNECTIONS = 64;
const ROOT = new URL("../", import.meta.url).pathname;

interface Case {
  readonly name: string;
  readonly url: string;
  readonly headers: string[];
}

function freePort(): number {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (listener.addr as Deno.NetAddr).port;
  listener.close();
  return port;
}

async function spawnReady(args: string[]): Promise<Deno.ChildProcess> {
  const child = new Deno.Command(Deno.execPath(), { args, stderr: "piped", stdout: "null" })
    .spawn();
  const reader = child.stderr.pipeThrough(new TextDecoderStream()).getReader();
  let seen = "";
  while (!/ready/.test(seen)) {
    const { value, done } = await reader.read();
    if (done) throw new Error(`server exited: ${seen}`);
    seen += value;
  }
  (async () => {
    while (!(await reader.read()).done) { /* drain */ }
  })();
  return child;
}

async function wrk(c: Case): Promise<{ rps: number; p50: number; p99: number }> {
  const args = ["-t2", `-c${CONNECTIONS}`, `-d${SECONDS}s`, "--latency", ...c.headers, c.url];
  const out = await new Deno.Command("wrk", { args, stdout: "piped", stderr: "piped" }).output();
  const text = new TextDecoder().decode(out.stdout);
  const rps = Number(/Requests\/sec:\s+([\d.]+)/.exec(text)?.[1]);
  const ms = (label: string) => {
    const match = new RegExp(`\\s${label}%\\s+([\\d.]+)(us|ms|s)`).exec(text);
    if (!match) return NaN;
    const scale = match[2] === "us" ? 0.001 : match[2] === "s" ? 1000 : 1;
    return Number(match[1]) * scale;
  };
  if (!Number.isFinite(rps)) throw new Error(`wrk output not understood:\n${text}`);
  return { rps, p50: ms("50"), p99: ms("99") };
}

const median = (values: number[]) =>
  [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)];

async function main() {
  try {
    await new Deno.Command("wrk", { args: ["--version"], stdout: "null", stderr: "null" }).output();
  } catch {
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
    await Deno.mkdir(`${dir}/tenants`);
    await Deno.copyFile(
      `${ROOT}deploy/example/tenants/demo.localhost.yaml`,
      `${dir}/tenants/demo.localhost.yaml`,
    );
    await Deno.writeTextFile(
      `${dir}/config.yaml`,
      stringify({
        node_id: "bench-edge",
        mode: "local",
        tenants_dir: "tenants",
        lanes: {
          public: { listen: [{ hostname: "127.0.0.1", port: gatewayPort }] },
          local_health: { listen: [{ hostname: "127.0.0.1", port: localPort }] },
        },
        ledger: { application_slots: 1024, inflight_bytes: 1 << 30, per_connection: 8 },
      }),
    );
    const flags = (await new Deno.Command(Deno.execPath(), {
      args: [
        "run",
        "--allow-read",
        "--ignore-env=LOG_STREAM,LOG_TOKENS",
        `${ROOT}main.ts`,
        "flags",
        `${dir}/config.yaml`,
      ],
      stdout: "piped",
    }).output()).stdout;
    const permissions = new TextDecoder().decode(flags).trim().split(" ");
    children.push(
      await spawnReady([
        "run",
        "--no-prompt",
        ...permissions,
        `${ROOT}main.ts`,
        "serve",
        `${dir}/config.yaml`,
      ]),
    );
    children.push(
      await spawnReady([
        "run",
        "--no-prompt",
        `--allow-net=127.0.0.1:${nodePort}`,
        `${ROOT}bench/fixtures/bare_node.ts`,
        String(nodePort),
      ]),
    );
    children.push(
      await spawnReady([
        "run",
        "--no-prompt",
        `--allow-net=127.0.0.1:${denoPort}`,
        `${ROOT}bench/fixtures/bare_deno.ts`,
        String(denoPort),
      ]),
    );

    const cases: Case[] = [
      {
        name: "bare node:http (same substrate)",
        url: `http://127.0.0.1:${nodePort}/`,
        headers: [],
      },
      {
        name: "portcullis public respond route",
        url: `http://127.0.0.1:${gatewayPort}/`,
        headers: ["-H", "Host: demo.localhost"],
      },
      { name: "bare Deno.serve (reference)", url: `http://127.0.0.1:${denoPort}/`, headers: [] },
    ];
    const results = new Map<string, { rps: number; p50: number; p99: number }[]>();
    for (let run = 0; run < RUNS; run++) {
      for (const c of cases) {
        const result = await wrk(c);
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
    for (const child of children) {
      try {
        child.kill("SIGTERM");
      } catch { /* gone */ }
      await child.status;
    }
    await Deno.remove(dir, { recursive: true });
  }
}

await main();
