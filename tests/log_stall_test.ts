/**
 * A stalled reader of the gateway's output (a log shipper that stopped reading, `serve … | tee`
 * with `tee` stopped) must cost log lines, never serving: issue 32 found the public worker frozen
 * for the whole stall once the 64 KiB pipe was full, while every health probe said 200.
 *
 * @module
 */
import assert from "node:assert/strict";
import { DEMO_TENANT, freePorts, Gateway, proofConfig, writeConfig } from "./fixtures/gateway.ts";
import { parseDiag } from "./fixtures/diag_lines.ts";

/** Keep-alive `GET /` for demo.test from `clients` connections for `ms`; how many got a 200. */
async function load(port: number, clients: number, ms: number): Promise<number> {
  const until = Date.now() + ms;
  const request = new TextEncoder().encode("GET / HTTP/1.1\r\nHost: demo.test\r\n\r\n");
  let answered = 0;
  await Promise.all(Array.from({ length: clients }, async () => {
    const conn = await Deno.connect({ hostname: "127.0.0.1", port });
    const buffer = new Uint8Array(64 * 1024);
    let held = "";
    try {
      while (Date.now() < until) {
        await conn.write(request);
        // One answer: its head, then Content-Length bytes (a stalled gateway ends the loop here).
        for (;;) {
          const end = held.indexOf("\r\n\r\n");
          const length = /content-length: *(\d+)/i.exec(held.slice(0, Math.max(0, end)));
          if (end >= 0 && length && held.length >= end + 4 + Number(length[1])) {
            if (held.startsWith("HTTP/1.1 200")) answered++;
            held = held.slice(end + 4 + Number(length[1]));
            break;
          }
          const left = until - Date.now();
          if (left <= 0) return;
          const read = await Promise.race([
            conn.read(buffer),
            new Promise<"late">((resolve) => setTimeout(() => resolve("late"), left)),
          ]);
          if (read === "late" || read === null) return;
          held += new TextDecoder().decode(buffer.subarray(0, read));
        }
      }
    } finally {
      conn.close();
    }
  }));
  return answered;
}

/** The value of one sample of the metrics page. */
function sample(page: string, name: string): number {
  const line = page.split("\n").find((l) => l.startsWith(name + " "));
  return line ? Number(line.slice(name.length + 1)) : NaN;
}

Deno.test("a stalled stdout reader costs access-log lines, counted and said once, never the public lane", async () => {
  const [publicPort, localPort, providerPort] = freePorts(3);
  const ports = { public: publicPort, local_health: localPort, provider_health: providerPort };
  const dir = await writeConfig(
    proofConfig(ports, {
      ledger: {
        application_slots: 64,
        inflight_bytes: 33554432,
        per_connection: 8,
        lanes: {
          public: { footprint_bytes: 65536, deadline_ms: 30000 },
          local_health: { reserve: 4, footprint_bytes: 16384, deadline_ms: 5000 },
          provider_health: {
            reserve: 2,
            footprint_bytes: 1024,
            deadline_ms: 1000,
            rate: { per_second: 20, burst: 40 },
          },
        },
      },
    }),
    [DEMO_TENANT],
  );
  const gateway = await Gateway.start(dir, ports, undefined, { stdout: "piped" });
  try {
    // Nobody reads stdout: after ~64 KiB of access-log lines the pipe is full. Each answer here
    // writes one line of ~300 bytes, so a blocked writer would stop after a few hundred.
    const answered = await load(publicPort, 8, 3000);
    assert.ok(answered > 1500, `the public lane answered ${answered} requests in 3 s`);
    // The outlet queues lines before it drops any: on a slow, loaded machine 3 s may not have
    // filled pipe and queue, so the load goes on (a second at a time, 20 s at most) until it has.
    let page = "";
    let dropped = 0;
    for (const deadline = Date.now() + 20_000;;) {
      page = await (await fetch(`http://127.0.0.1:${localPort}/metrics`)).text();
      dropped = sample(page, 'portcullis_log_lines_total{stream="stdout",outcome="dropped"}');
      if (dropped > 0 || Date.now() > deadline) break;
      await load(publicPort, 8, 1000);
    }
    assert.ok(dropped > 0, `dropped lines counted: ${dropped}`);
    assert.ok(sample(page, 'portcullis_log_drop_episodes_total{stream="stdout"}') >= 1);
    const warned = () =>
      gateway.stderr.split("\n").filter((line) =>
        parseDiag(line)?.msg.startsWith("log lines on stdout are being dropped")
      );
    assert.equal(warned().length, 1, `one line for the episode:\n${gateway.stderr}`);
    // The reader comes back: what was queued is written, and the episode ends with one line.
    const reader = gateway.stdout.getReader();
    let text = "";
    const decoder = new TextDecoder();
    const reading = (async () => {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        text += decoder.decode(value, { stream: true });
      }
    })();
    const deadline = Date.now() + 10_000;
    while (!/log lines on stdout are written again/.test(gateway.stderr)) {
      assert.ok(Date.now() < deadline, `the episode did not end:\n${gateway.stderr}`);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    assert.equal(warned().length, 1, "still one warning for the one episode");
    // Every line that was written is whole JSON (no line broken by a partial write).
    const lines = text.split("\n").filter((line) => line !== "");
    assert.ok(lines.length > 100, `${lines.length} access-log lines read`);
    for (const line of lines) assert.equal(JSON.parse(line).lane, "public");
    await gateway.stop();
    await reading;
  } finally {
    await gateway.dispose();
  }
});
