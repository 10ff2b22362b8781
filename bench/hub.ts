/**
 * Live configuration figures: how long a change written to a hub's folder takes to be served by a
 * following edge (in-process hub and edge, real sockets, token auth), and what a large tenant set
 * costs — the hub's read + validation, one snapshot answer, and the edge's rebuild + validation of
 * the same set. Prints figures; run with `deno task bench:hub`.
 *
 * @module
 */
import { stringify } from "yaml";
import { hashFileSet, readFileSet, runtimeTextsOf } from "../src/config/file_set.ts";
import { buildRegistry } from "../src/proxy/tenants.ts";
import { siteYaml, startTestHub } from "../tests/fixtures/hub_in_process.ts";
import { request } from "../tests/fixtures/http_client.ts";
import { bootEdge } from "../tests/fixtures/in_process.ts";

const CHANGES = Number(Deno.env.get("BENCH_CHANGES") ?? 20);
const TENANTS = Number(Deno.env.get("BENCH_TENANTS") ?? 1000);

function percentile(values: number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))];
}

async function propagation(debounceMs: number): Promise<number[]> {
  const hub = await startTestHub({ edit: (c) => c.runtime.debounce_ms = debounceMs });
  const cacheDir = await Deno.makeTempDir({ prefix: "portcullis-bench-cache-" });
  const secrets = await Deno.makeTempDir({ prefix: "portcullis-bench-node-" });
  await Deno.writeTextFile(`${secrets}/node.token`, await hub.token("bench-edge"));
  const edge = await bootEdge({
    lanes: ["public", "local_health"],
    edit(config) {
      delete config.tenants_dir;
      Object.assign(config, {
        node_id: "bench-edge",
        mode: "remote",
        hub: { url: hub.url, token_file: `${secrets}/node.token` },
        cache_dir: cacheDir,
      });
    },
  });
  const body = async () =>
    (await request(edge.ports.public, { path: "/", headers: [["Host", "demo.test"]] })).body;
  const samples: number[] = [];
  try {
    for (let i = 0; i < CHANGES; i++) {
      const marker = `change ${i}\n`;
      const started = performance.now();
      await hub.write("demo.test.yaml", siteYaml("demo.test", marker));
      while (await body() !== marker) {
        if (performance.now() - started > 10_000) throw new Error("a change never arrived");
        await new Promise((resolve) => setTimeout(resolve, 2));
      }
      samples.push(performance.now() - started);
      await new Promise((resolve) => setTimeout(resolve, debounceMs + 20));
    }
  } finally {
    await edge.dispose();
    await hub.dispose();
    await Deno.remove(cacheDir, { recursive: true });
    await Deno.remove(secrets, { recursive: true });
  }
  return samples;
}

async function largeSet(): Promise<Record<string, number>> {
  const files: Record<string, string> = {};
  for (let i = 0; i < TENANTS; i++) {
    const host = `t${i}.bench.test`;
    files[`${host}.yaml`] = stringify({
      host,
      routes: [
        { name: "home", match: { path: "/" }, respond: { body: `tenant ${i}\n` } },
        { name: "old", match: { prefix: "/old/" }, redirect: { location: "/" } },
      ],
      policies: { rate_limit: { per_second: 10, burst: 20 } },
    });
  }
  const hub = await startTestHub({ files });
  try {
    let started = performance.now();
    const read = await readFileSet(hub.runtimeDir);
    await hashFileSet(read.files);
    const readMs = performance.now() - started;
    started = performance.now();
    await buildRegistry(hub.runtimeDir, runtimeTextsOf(read.files));
    const validateMs = performance.now() - started;
    const token = await hub.token("bench-edge");
    started = performance.now();
    const response = await fetch(`${hub.url}/v1/config/stream?node_id=bench-edge&wait=0`, {
      headers: { authorization: `Bearer ${token}` },
    });
    const text = await response.text();
    const snapshotMs = performance.now() - started;
    return { readMs, validateMs, snapshotMs, snapshotBytes: text.length };
  } finally {
    await hub.dispose();
  }
}

for (const debounce of [30, 250]) {
  const samples = await propagation(debounce);
  console.log(
    `hub → edge propagation, debounce ${debounce} ms, ${samples.length} changes: ` +
      `p50 ${percentile(samples, 0.5).toFixed(0)} ms, p95 ${
        percentile(samples, 0.95).toFixed(0)
      } ms, ` +
      `max ${Math.max(...samples).toFixed(0)} ms`,
  );
}
const large = await largeSet();
console.log(
  `${TENANTS} tenants: read+hash ${large.readMs.toFixed(0)} ms, validate ${
    large.validateMs.toFixed(0)
  } ms, snapshot answer ${large.snapshotMs.toFixed(0)} ms (${
    (large.snapshotBytes / 1024).toFixed(0)
  } KiB)`,
);
