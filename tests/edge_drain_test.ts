/**
 * Drain, in process over real loopback sockets: a slow reader holds a public slot (a 16 MiB file it
 * does not read), the edge drains (by `edge.drain()` or `POST /v1/drain`), public admission stops,
 * health reports draining, and the drain completes only when the slow reader leaves (or at the
 * drain cap). With a lame-duck window, readiness says 503 at once while the public lane still
 * serves, and admission stops only when the window ends.
 *
 * @module
 */
import assert from "node:assert/strict";
import { json, renderRequest, request, writeAll } from "./fixtures/http_client.ts";
import {
  connectionRefused,
  type EdgeSetup,
  envelope,
  isBalanced,
  type TestEdge,
  waitFor,
  withEdge,
  within,
} from "./fixtures/in_process.ts";
import { ADMIN_AUTH } from "./fixtures/gateway.ts";

const BIG = new Uint8Array(16 * 1024 * 1024).fill(0x61);
const HOME: [string, string][] = [["Host", "demo.test"]];

function setup(drainMs: number, lameDuckMs = 0): EdgeSetup {
  return {
    files: { "assets/big.bin": BIG },
    edit: (config) => config.drain = { timeout_ms: drainMs, lame_duck_ms: lameDuckMs },
  };
}

/** Opens a connection that asks for the 16 MiB asset, reads only the response head, then stalls. */
async function slowReader(t: TestEdge): Promise<Deno.Conn> {
  const conn = await Deno.connect({ hostname: "127.0.0.1", port: t.ports.public });
  await writeAll(conn, new TextEncoder().encode(renderRequest({ path: "/asset", headers: HOME })));
  const head = new Uint8Array(512);
  const n = await conn.read(head);
  const text = new TextDecoder().decode(head.subarray(0, n ?? 0));
  assert.match(text, /^HTTP\/1\.1 200 /);
  assert.match(text, /content-length: 16777216\r\n/i);
  await waitFor(() => t.snapshot(), (s) => s.lanes.public.in_use === 1);
  return conn;
}

/** What an operator sees on the protected lanes while the edge drains. */
async function assertDrainingHealth(t: TestEdge): Promise<void> {
  const health = json(await request(t.ports.local_health, { path: "/v1/health" }));
  assert.equal(health.status, "draining");
  assert.equal(health.active_requests, 1, "the slow reader is still in flight");
  const ready = await request(t.ports.local_health, { path: "/readyz" });
  assert.equal(ready.status, 503);
  assert.equal(envelope(ready).code, "draining");
  const local = await request(t.ports.local_health, { path: "/healthz" });
  assert.deepEqual(json(local), { status: "draining" });
  const probe = await request(t.ports.provider_health, { path: "/healthz" });
  assert.equal(probe.status, 503);
  assert.equal(probe.body, "draining\n");
  const ledger = await t.ledger();
  assert.equal(ledger.lanes.public.in_use, 1);
  assert.equal(ledger.outstanding, 1, "only the slow reader, not the observer");
}

Deno.test("drain: public stops, health says draining, drain ends when the slow reader leaves", async () => {
  await withEdge(setup(8000), async (t) => {
    const slow = await slowReader(t);
    let open = true;
    try {
      const drained = t.edge.drain();
      await waitFor(() => connectionRefused(t.ports.public), (refused) => refused);
      await assertDrainingHealth(t);
      assert.equal(await within(drained, 200), "timeout", "drain waits for the slow reader");
      assert.equal(await within(t.edge.finished, 0), "timeout");
      slow.close();
      open = false;
      assert.notEqual(await within(drained, 5000), "timeout", "drain resolves once it left");
      assert.notEqual(await within(t.edge.finished, 1000), "timeout");
    } finally {
      if (open) slow.close();
    }
    const ledger = t.snapshot();
    assert.ok(isBalanced(ledger), JSON.stringify(ledger));
    assert.equal(ledger.lanes.public.in_use, 0);
    assert.equal(ledger.cancelled, 1, "the unfinished download was cancelled, not completed");
    assert.equal(await connectionRefused(t.ports.local_health), true, "every listener closed");
    assert.equal(await connectionRefused(t.ports.provider_health), true);
    assert.ok(t.lines.includes("portcullis: draining: public admission stopped"), t.lines.join());
    assert.ok(t.lines.includes("portcullis: drained"), t.lines.join());
  });
});

Deno.test("drain: POST /v1/drain answers 202 and refuses a request already on its way", async () => {
  await withEdge(setup(8000), async (t) => {
    const slow = await slowReader(t);
    // A connection whose request head is half sent when the drain starts.
    const late = await Deno.connect({ hostname: "127.0.0.1", port: t.ports.public });
    let open = true;
    try {
      await writeAll(late, new TextEncoder().encode("GET / HTTP/1.1\r\nHost: demo.test\r\n"));
      await waitFor(() => t.snapshot(), (s) => s.lanes.public.connections === 2);
      const started = await request(t.ports.local_health, {
        method: "POST",
        path: "/v1/drain",
        headers: [ADMIN_AUTH],
      });
      assert.equal(started.status, 202);
      assert.deepEqual(json(started), { draining: true, active_requests: 1 });
      const again = await request(t.ports.local_health, {
        method: "POST",
        path: "/v1/drain",
        headers: [ADMIN_AUTH],
      });
      assert.equal(again.status, 202, "drain is idempotent");
      assert.equal(await connectionRefused(t.ports.public), true);

      await writeAll(late, new TextEncoder().encode("X-Request-Id: late\r\n\r\n"));
      const text = await readAll(late);
      assert.match(text, /^HTTP\/1\.1 503 /);
      assert.match(text, /\r\nconnection: close\r\n/i);
      assert.match(
        text,
        /"code":"draining","message":"The gateway is shutting down","request_id":"late"/,
      );
      await assertDrainingHealth(t);

      slow.close();
      open = false;
      assert.notEqual(await within(t.edge.finished, 5000), "timeout");
    } finally {
      late.close();
      if (open) slow.close();
    }
    const ledger = t.snapshot();
    assert.ok(isBalanced(ledger), JSON.stringify(ledger));
    assert.equal(ledger.lanes.public.admitted, 1, "the refused request was never admitted");
  });
});

Deno.test("drain: a reader that never leaves is cut at drain.timeout_ms", async () => {
  await withEdge(setup(300), async (t) => {
    const slow = await slowReader(t);
    try {
      const started = performance.now();
      const drained = t.edge.drain();
      assert.notEqual(await within(drained, 5000), "timeout", "the cap ends the drain");
      const elapsed = performance.now() - started;
      assert.ok(elapsed >= 250 && elapsed < 3000, `drained after ${elapsed} ms`);
      assert.ok(
        t.lines.includes("portcullis: drained with 1 public requests cut at the cap"),
        t.lines.join("\n"),
      );
      const ledger = await waitFor(() => t.snapshot(), isBalanced);
      assert.equal(ledger.cancelled, 1);
    } finally {
      slow.close();
    }
  });
});

Deno.test("drain: through the lame-duck window readiness is 503 and the public lane still serves", async () => {
  await withEdge(setup(8000, 1500), async (t) => {
    const started = performance.now();
    const drained = t.edge.drain();
    const ready = await request(t.ports.local_health, { path: "/readyz" });
    assert.equal(ready.status, 503);
    assert.equal(envelope(ready).code, "draining");
    const health = json(await request(t.ports.local_health, { path: "/v1/health" }));
    assert.deepEqual([health.status, health.ready], ["draining", false]);
    const probe = await request(t.ports.provider_health, { path: "/healthz" });
    assert.deepEqual([probe.status, probe.body], [503, "draining\n"]);
    const home = await request(t.ports.public, { path: "/", headers: HOME });
    assert.equal(home.status, 200, "a new public connection is still accepted and served");
    assert.equal(home.body, "tenant-home");
    assert.ok(performance.now() - started < 1500, "all of the above inside the window");
    assert.equal(await within(drained, 0), "timeout");

    // A connect racing the close may be reset instead of refused: either way, not served.
    const closed = () => connectionRefused(t.ports.public).catch(() => true);
    await waitFor(closed, (refused) => refused, 5000);
    const refusedAfter = performance.now() - started;
    assert.ok(
      refusedAfter >= 1400,
      `public refused after ${refusedAfter} ms, not before the window`,
    );
    assert.notEqual(await within(drained, 5000), "timeout");
    const at = (line: string) => t.lines.indexOf(line);
    assert.ok(
      at("portcullis: draining: not ready; public admission stops in 1500 ms") >= 0 &&
        at("portcullis: draining: not ready; public admission stops in 1500 ms") <
          at("portcullis: draining: public admission stopped"),
      t.lines.join("\n"),
    );
  });
});

Deno.test("drain: POST /v1/drain with nothing in flight is answered before the edge stops", async () => {
  await withEdge(setup(8000), async (t) => {
    const started = await request(t.ports.local_health, {
      method: "POST",
      path: "/v1/drain",
      headers: [ADMIN_AUTH],
    });
    assert.equal(started.status, 202);
    assert.deepEqual(json(started), { draining: true, active_requests: 0 });
    assert.notEqual(await within(t.edge.finished, 3000), "timeout");
    assert.equal(await connectionRefused(t.ports.local_health), true);
  });
});

Deno.test("drain: close() during the lame-duck window stops the edge at once", async () => {
  await withEdge(setup(8000, 60_000), async (t) => {
    const drained = t.edge.drain();
    const health = json(await request(t.ports.local_health, { path: "/v1/health" }));
    assert.equal(health.ready, false);
    const startedClose = performance.now();
    await t.edge.close();
    assert.notEqual(await within(drained, 1000), "timeout");
    assert.ok(performance.now() - startedClose < 1000);
    assert.equal(await connectionRefused(t.ports.public), true);
  });
});

async function readAll(conn: Deno.Conn): Promise<string> {
  const decoder = new TextDecoder();
  const buffer = new Uint8Array(4096);
  let text = "";
  for (;;) {
    const n = await conn.read(buffer).catch(() => null);
    if (n === null) return text;
    text += decoder.decode(buffer.subarray(0, n), { stream: true });
  }
}
