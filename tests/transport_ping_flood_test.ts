/**
 * Issue 31, finding 4: after the dial op on `https_tunnel`, a node sent 101 MB of 125-byte pings
 * from a socket with a 4 KiB receive buffer that never read, and the hub answered every one: its
 * RSS went from 103 to 613 MB in 4.6 s and stayed there after the client closed. Against a real
 * hub under its derived flags, the same client (tests/fixtures/ping_flood.py, Python: Deno cannot
 * set a socket's receive buffer) sends up to 64 MB of pings: the hub stops reading it once its
 * pongs fill the kernel's buffers, closes the tunnel when a pong has been owed for
 * `timeouts.header_ms`, and its memory grows by a bounded amount.
 */
import assert from "node:assert/strict";
import { boundedTest } from "./fixtures/bounded_test.ts";
import { TransportFleet } from "./fixtures/transport_fleet.ts";

const FLOOD = new URL("./fixtures/ping_flood.py", import.meta.url).pathname;
const BUDGET = 64 * 1024 * 1024;
/** The pong deadline (`timeouts.header_ms`). */
const HEADER_MS = 2000;

/** What the flooding client reported. */
interface FloodResult {
  readonly sent: number;
  readonly closed: boolean;
  readonly how: string;
  readonly seconds: number;
}

boundedTest(
  "https_tunnel: a ping flood from a node that never reads stops being read, is closed, and leaves hub memory bounded",
  async () => {
    const fleet = await TransportFleet.start({ headerMs: HEADER_MS });
    let flooding = true;
    let sampling: Promise<void> | undefined;
    try {
      const edge = await fleet.enrol("edge-1");
      const before = await fleet.rss();
      let peak = before;
      sampling = (async () => {
        while (flooding) {
          peak = Math.max(peak, await fleet.rss());
          await new Promise((resolve) => setTimeout(resolve, 200));
        }
      })();
      const output = await new Deno.Command("python3", {
        args: [
          FLOOD,
          String(fleet.tunnelPort),
          fleet.rootFile,
          edge.certFile,
          edge.keyFile,
          String(fleet.pool.port),
          String(BUDGET),
          "20",
        ],
        stdout: "piped",
        stderr: "piped",
      }).output();
      flooding = false;
      await sampling;
      peak = Math.max(peak, await fleet.rss());
      const stderr = new TextDecoder().decode(output.stderr);
      assert.equal(output.code, 0, stderr);
      const result: FloodResult = JSON.parse(new TextDecoder().decode(output.stdout));
      const grew = peak - before;
      const report = `${JSON.stringify(result)}; hub RSS ${before >> 20} → peak ${peak >> 20} MB`;
      assert.ok(result.closed, `the hub closed the tunnel: ${report}`);
      assert.ok(result.sent <= BUDGET / 2, `the hub stopped reading: ${report}`);
      assert.ok(grew < 64 * 1024 * 1024, `hub memory bounded: ${report}`);
      assert.ok(result.seconds < 15, `closed within the pong deadline: ${report}`);
    } finally {
      flooding = false;
      await sampling;
      await fleet.dispose();
    }
  },
  90_000,
);
