/**
 * An attack on issue 31's tunnel pacing: pongs nobody asked for were read at line rate on
 * `https_tunnel` (one node certificate, 5.8 GB in 40 s after the dial, hub RSS 174 → 290 MB), and
 * two such tunnels made another node's `/v1/pool` answer in 1,037 ms at the median instead of
 * 12 ms. Frames that carry no data — pings, pongs, empty binary frames — are outside every flow
 * control, so each tunnel now has a budget for them (ws_pacing.ts `ControlBudget`): over it the
 * hub sends close 1008 and stops reading the tunnel.
 *
 * Against a real hub under its derived flags, a Python node (tests/fixtures/control_flood.py)
 * floods one kind of frame at line rate while reading what the hub sends: each tunnel is closed
 * with 1008 within a second (what its socket took is what the kernels buffer, not gigabytes); while
 * two nodes flood, reconnecting each time the hub closes them, a third node's `/v1/pool` keeps
 * answering at about its usual speed (before: stalls of 2.2–3.2 s on this machine).
 */
import assert from "node:assert/strict";
import { boundedTest } from "./fixtures/bounded_test.ts";
import { type NodeFiles, TransportFleet } from "./fixtures/transport_fleet.ts";

const FLOOD = new URL("./fixtures/control_flood.py", import.meta.url).pathname;

/** What the flooding node reported. */
interface FloodResult {
  readonly sent: number;
  readonly connections: number;
  readonly closed: boolean;
  readonly code: number;
  readonly seconds: number;
}

/** Runs the flooder as `node` for at most `seconds`; `reconnect` replaces a closed tunnel. */
function flood(
  fleet: TransportFleet,
  node: NodeFiles,
  mode: "pong" | "ping" | "empty",
  seconds: number,
  reconnect = false,
): Promise<FloodResult> {
  const args = [
    FLOOD,
    String(fleet.tunnelPort),
    fleet.rootFile,
    node.certFile,
    node.keyFile,
    String(fleet.pool.port),
    mode,
    String(seconds),
    ...(reconnect ? ["reconnect"] : []),
  ];
  return new Deno.Command("python3", { args, stdout: "piped", stderr: "piped" }).output()
    .then((output) => {
      const stderr = new TextDecoder().decode(output.stderr);
      assert.equal(output.code, 0, stderr);
      return JSON.parse(new TextDecoder().decode(output.stdout));
    });
}

/**
 * Milliseconds of each `/v1/pool` poll as `node`, one every `gapMs`, each on a new TLS connection
 * (the handshake needs several turns of the hub's event loop, as a reconnecting edge's does).
 */
async function pollTimes(
  fleet: TransportFleet,
  node: NodeFiles,
  polls: number,
  gapMs: number,
): Promise<number[]> {
  const credentials = {
    caCerts: [await Deno.readTextFile(fleet.rootFile)],
    cert: await Deno.readTextFile(node.certFile),
    key: await Deno.readTextFile(node.keyFile),
  };
  const times: number[] = [];
  for (let i = 0; i < polls; i++) {
    const client = Deno.createHttpClient(credentials);
    try {
      const started = performance.now();
      const response = await fetch(`${fleet.hub.url}/v1/pool?node_id=${node.nodeId}`, { client });
      await response.body?.cancel();
      assert.equal(response.status, 200);
      times.push(performance.now() - started);
    } finally {
      client.close();
    }
    await new Promise((resolve) => setTimeout(resolve, gapMs));
  }
  return times;
}

/** The `share` quantile of `values` (0.5: the median). */
function quantile(values: readonly number[], share: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * share))];
}

for (const mode of ["pong", "ping", "empty"] as const) {
  boundedTest(
    `https_tunnel: a node flooding ${mode} frames is closed with 1008 within a second`,
    async () => {
      const fleet = await TransportFleet.start();
      try {
        const node = await fleet.enrol("edge-1");
        const before = await fleet.rss();
        const result = await flood(fleet, node, mode, 10);
        const after = await fleet.rss();
        const report = `${JSON.stringify(result)}; hub RSS ${before >> 20} → ${after >> 20} MB`;
        console.log(`${mode}: ${report}`);
        assert.ok(result.closed, `the hub closed the tunnel: ${report}`);
        assert.equal(result.code, 1008, `close 1008: ${report}`);
        assert.ok(result.seconds < 3, `closed at once: ${report}`);
        // What the client's socket took includes the kernel's buffers on both sides (a few MB on
        // loopback); unbounded, it was gigabytes.
        assert.ok(result.sent < 16 * 1024 * 1024, `the hub stopped reading: ${report}`);
        assert.match(fleet.hub.stderr, /stream refused \(protocol: 1008 Too many frames/);
      } finally {
        await fleet.dispose();
      }
    },
    60_000,
  );
}

boundedTest(
  "https_tunnel: two nodes flooding pongs do not slow a third node's /v1/pool",
  async () => {
    const fleet = await TransportFleet.start();
    try {
      const [a, b, c] = [
        await fleet.enrol("edge-1"),
        await fleet.enrol("edge-2"),
        await fleet.enrol("edge-3"),
      ];
      const quiet = await pollTimes(fleet, c, 20, 50);
      // Each flooder replaces its tunnel at once when the hub closes it, for 6 s.
      const flooding = [flood(fleet, a, "pong", 6, true), flood(fleet, b, "pong", 6, true)];
      await new Promise((resolve) => setTimeout(resolve, 500));
      const loaded = await pollTimes(fleet, c, 40, 100);
      const results = await Promise.all(flooding);
      const show = (times: number[]) =>
        `p50 ${quantile(times, 0.5).toFixed(1)} p90 ${quantile(times, 0.9).toFixed(1)} ` +
        `max ${Math.max(...times).toFixed(1)} ms`;
      const report = `quiet ${show(quiet)}; two flooders ${show(loaded)}; ${
        JSON.stringify(results)
      }`;
      console.log(report);
      for (const result of results) {
        assert.equal(result.code, 1008, report);
        // Each tunnel was closed at once (with what the kernels buffered, not gigabytes).
        assert.ok(result.sent / result.connections < 16 * 1024 * 1024, report);
      }
      // Measured before the budget: polls stalled for 2.2–3.2 s while the pongs were read (the
      // median hardly moved here); with it the slowest poll took 20–160 ms.
      const bound = Math.max(250, 5 * quantile(quiet, 0.9));
      assert.ok(quantile(loaded, 0.9) < bound, `p90 under ${bound.toFixed(0)} ms: ${report}`);
      assert.ok(Math.max(...loaded) < 1500, `no poll stalled: ${report}`);
    } finally {
      await fleet.dispose();
    }
  },
  90_000,
);
