/**
 * Slowloris proof: a connection that does not complete its request head within
 * `timeouts.header_ms` is closed without a reply (as nginx does: a 408 would be a reply of its own
 * shape to anyone who only connects), so is a connection that never sends a byte, and so is
 * an idle keep-alive connection after `timeouts.idle_ms`. The bare `Deno.serve` keeps all three
 * open for over 75 s (see docs/decisions.md).
 */
import assert from "node:assert/strict";
import { freePorts, Gateway, proofConfig, writeConfig } from "../tests/fixtures/gateway.ts";
import { readUntilClosed, renderRequest, writeAll } from "../tests/fixtures/http_client.ts";

const HEADER_MS = 1000;
const IDLE_MS = 1500;
/** Generous bound: the timeouts plus the server's checking interval and scheduling slack. */
const CLOSED_WITHIN_MS = 6000;

Deno.test("slowloris proof: slow heads, silent and idle connections are closed", async () => {
  const [publicPort, localPort, providerPort] = freePorts(3);
  const ports = { public: publicPort, local_health: localPort, provider_health: providerPort };
  const config = proofConfig(ports, { timeouts: { header_ms: HEADER_MS, idle_ms: IDLE_MS } });
  const gateway = await Gateway.start(await writeConfig(config), ports);
  const encoder = new TextEncoder();
  try {
    // 1. A head trickled one byte every 200 ms never completes.
    const slow = await Deno.connect({ hostname: "127.0.0.1", port: publicPort });
    const head = "GET / HTTP/1.1\r\nHost: demo.test\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    let stop = false;
    const trickle = (async () => {
      for (const byte of head) {
        if (stop) return;
        try {
          await writeAll(slow, encoder.encode(byte));
        } catch {
          return;
        }
        await new Promise((resolve) => setTimeout(resolve, 200));
      }
    })();
    // 2. A connection that sends nothing.
    const silent = await Deno.connect({ hostname: "127.0.0.1", port: publicPort });
    // 3. A keep-alive connection that goes idle after one request.
    const idle = await Deno.connect({ hostname: "127.0.0.1", port: publicPort });
    await writeAll(idle, encoder.encode(renderRequest({ path: "/healthz" }, true)));

    const [slowResult, silentResult, idleResult] = await Promise.all([
      readUntilClosed(slow, 20_000),
      readUntilClosed(silent, 20_000),
      readUntilClosed(idle, 20_000),
    ]);
    stop = true;
    await trickle;

    assert.ok(slowResult.ms < CLOSED_WITHIN_MS, `slow head closed after ${slowResult.ms} ms`);
    assert.equal(slowResult.text, "", "no reply to a head that never ended");
    assert.ok(silentResult.ms < CLOSED_WITHIN_MS, `silent closed after ${silentResult.ms} ms`);
    assert.ok(idleResult.ms >= IDLE_MS - 100, `idle kept for its idle time (${idleResult.ms} ms)`);
    assert.ok(idleResult.ms < IDLE_MS + CLOSED_WITHIN_MS, `idle closed after ${idleResult.ms} ms`);
    assert.match(idleResult.text, /^HTTP\/1\.1 200 /, "the idle connection was served first");

    const reading = await gateway.ledgerWhen((r) => r.lanes.public.connections === 0);
    assert.equal(reading.lanes.public.connections, 0, "every connection was closed");
    assert.equal(reading.lanes.public.admitted, 1, "only the complete request was admitted");
    const metrics = await (await fetch(`http://127.0.0.1:${localPort}/metrics`)).text();
    assert.match(metrics, /portcullis_protocol_errors_total\{lane="public"\} [2-9]/);
  } finally {
    await gateway.dispose();
  }
});
