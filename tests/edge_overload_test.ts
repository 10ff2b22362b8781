/**
 * Overload end to end, in process over real loopback sockets: the per-connection bound, the
 * provider lane's rate budget, the lane deadline (through an injected ledger clock), and the
 * per-lane connection ceiling. Every refusal is a typed answer and is counted in the ledger.
 *
 * @module
 */
import assert from "node:assert/strict";
import {
  exchange,
  parseResponses,
  renderRequest,
  request,
  writeAll,
} from "./fixtures/http_client.ts";
import {
  balancedLedger,
  type ConfigObject,
  envelope,
  readResponse,
  waitFor,
  withEdge,
} from "./fixtures/in_process.ts";

const HOME: [string, string][] = [["Host", "demo.test"]];
const encoder = new TextEncoder();

Deno.test("per_connection 1: a pipelined second request waits for the first, then is served", async () => {
  const setup = { edit: (config: ConfigObject) => config.ledger.per_connection = 1 };
  await withEdge(setup, async (t) => {
    const text = await exchange(
      t.ports.public,
      renderRequest({ path: "/", headers: HOME }, true) +
        renderRequest({ path: "/", headers: [...HOME, ["X-Request-Id", "second"]] }),
    );
    const [first, second] = parseResponses(text);
    assert.equal(first.status, 200);
    assert.equal(first.body, "tenant-home");
    assert.equal(second.status, 200);
    assert.equal(second.headers["x-request-id"], "second");
    const ledger = await balancedLedger(t);
    assert.equal(ledger.lanes.public.overload.per_connection_limit, 0);
    assert.equal(ledger.lanes.public.admitted, 2, "one at a time, both admitted");
    assert.equal(ledger.high_water_slots, 1, "never two at once");
  });
});

Deno.test("per_connection 1: sequential keep-alive requests on one connection are served", async () => {
  const setup = { edit: (config: ConfigObject) => config.ledger.per_connection = 1 };
  await withEdge(setup, async (t) => {
    const conn = await Deno.connect({ hostname: "127.0.0.1", port: t.ports.public });
    try {
      for (let i = 0; i < 20; i++) {
        await writeAll(conn, encoder.encode(renderRequest({ path: "/", headers: HOME }, true)));
        const response = await readResponse(conn);
        assert.equal(response.status, 200, `request ${i + 1}`);
      }
    } finally {
      conn.close();
    }
    const ledger = await balancedLedger(t);
    assert.equal(ledger.lanes.public.admitted, 20);
    assert.equal(ledger.lanes.public.overload.per_connection_limit, 0);
  });
});

Deno.test("provider_health rate budget: the request after the burst is a 429 with retry-after", async () => {
  const setup = {
    edit: (config: ConfigObject) =>
      config.ledger.lanes.provider_health.rate = { per_second: 1, burst: 2 },
  };
  await withEdge(setup, async (t) => {
    const statuses = [];
    for (let i = 0; i < 2; i++) {
      statuses.push((await request(t.ports.provider_health, { path: "/healthz" })).status);
    }
    const third = await request(t.ports.provider_health, { path: "/healthz" });
    assert.deepEqual(statuses, [200, 200]);
    assert.equal(third.status, 429);
    assert.equal(envelope(third).code, "rate_budget");
    const retryAfter = Number(third.headers["retry-after"]);
    assert.ok(Number.isInteger(retryAfter) && retryAfter >= 1, `retry-after ${retryAfter}`);
    const local = await request(t.ports.local_health, { path: "/healthz" });
    assert.equal(local.status, 200, "another lane's budget is untouched");
    const ledger = await balancedLedger(t);
    assert.equal(ledger.lanes.provider_health.admitted, 2);
    assert.equal(ledger.lanes.provider_health.overload.rate_budget, 1);
  });
});

Deno.test("lane deadline: a reply ready only after the public deadline is a 503, cancelled", async () => {
  // Each clock read is `step` ms after the previous one: with a step of a minute, the reply is
  // ready a minute after admission, past the public lane's 30 s deadline.
  let skew = 0;
  let step = 0;
  const clock = () => {
    const now = performance.now() + skew;
    skew += step;
    return now;
  };
  await withEdge({ clock }, async (t) => {
    step = 60_000;
    const late = await request(t.ports.public, {
      path: "/",
      headers: [...HOME, ["X-Request-Id", "late-1"]],
    });
    step = 0;
    assert.equal(late.status, 503);
    assert.deepEqual(envelope(late), {
      code: "deadline_exceeded",
      message: "The request deadline passed",
      request_id: "late-1",
    });
    assert.doesNotMatch(late.body, /tenant-home/);
    const onTime = await request(t.ports.public, { path: "/", headers: HOME });
    assert.equal(onTime.status, 200);
    const ledger = await balancedLedger(t);
    assert.equal(ledger.lanes.public.admitted, 2);
    assert.equal(ledger.lanes.public.overload.deadline_exceeded, 1);
    assert.equal(ledger.cancelled, 1);
    assert.equal(ledger.double_release, 0);
  });
});

Deno.test("lane deadline: an unreadable clock refuses admission with a 503", async () => {
  let broken = false;
  const clock = () => {
    if (broken) throw new Error("clock unavailable");
    return performance.now();
  };
  await withEdge({ clock }, async (t) => {
    broken = true;
    const response = await request(t.ports.public, { path: "/", headers: HOME });
    broken = false;
    assert.equal(response.status, 503);
    assert.equal(envelope(response).code, "deadline_exceeded");
    const ledger = await balancedLedger(t);
    assert.equal(ledger.lanes.public.admitted, 0);
    assert.equal(ledger.lanes.public.overload.deadline_exceeded, 1);
  });
});

Deno.test("connection ceiling: a connection over max_connections is closed unanswered", async () => {
  const setup = {
    edit: (config: ConfigObject) => config.ledger.lanes.public.max_connections = 2,
  };
  await withEdge(setup, async (t) => {
    const port = t.ports.public;
    const held = [
      await Deno.connect({ hostname: "127.0.0.1", port }),
      await Deno.connect({ hostname: "127.0.0.1", port }),
    ];
    try {
      await waitFor(() => t.snapshot(), (s) => s.lanes.public.connections === 2);
      const third = await exchange(port, renderRequest({ path: "/", headers: HOME }), 3000);
      assert.equal(third, "", "closed without a response");
      const refused = t.snapshot().lanes.public;
      assert.equal(refused.connections_refused, 1);
      assert.equal(refused.admitted, 0, "nothing from the refused connection was admitted");
      const local = await request(t.ports.local_health, { path: "/healthz" });
      assert.equal(local.status, 200, "other lanes keep their own ceilings");
      held.pop()!.close();
      await waitFor(() => t.snapshot(), (s) => s.lanes.public.connections === 1);
      const again = await request(port, { path: "/", headers: HOME });
      assert.equal(again.status, 200, "a freed place admits a new connection");
    } finally {
      for (const conn of held) conn.close();
    }
    const ledger = await balancedLedger(t);
    assert.equal(ledger.lanes.public.connections_refused, 1);
    assert.equal(ledger.lanes.public.admitted, 1);
  });
});
