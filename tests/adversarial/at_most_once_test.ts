/**
 * At most once, under faults: the real gateway (derived flags) in front of two SOCKS instances and
 * an upstream that records every delivery by load id (fixtures/load_upstream.ts).
 *
 * - Instances are killed and restarted while clients send GET, PUT and POST with 1 KiB bodies
 *   (the upstream takes 30 ms per request, so kills find requests delivered, unanswered): no id arrives
 *   twice unless its method may be retried, no copy arrives with a body that is not its own, each
 *   client gets its own answer, and a client told 200 had its request delivered exactly once.
 * - The upstream drops kept-alive connections with a request on them, unanswered: a GET with
 *   `attempts: 1` and every POST arrive once and get a 502 at once, not the deadline's 504;
 *   GETs with attempts left are retried and answered.
 *
 * @module
 */
import assert from "node:assert/strict";
import { freePorts, Gateway, proofConfig, writeConfig } from "../fixtures/gateway.ts";
import { request } from "../fixtures/http_client.ts";
import { bodyFor, LoadUpstream } from "../fixtures/load_upstream.ts";
import { SocksFixture } from "../fixtures/socks5.ts";

const SHOP = "shop.test";
const APP = "app.internal";
/** The public deadline: a request waiting it out is answered 504 well inside a test's time. */
const DEADLINE_MS = 4000;

interface Edge {
  readonly gateway: Gateway;
  readonly upstream: LoadUpstream;
  readonly socks: SocksFixture[];
}

/** Boots upstream, `instances` SOCKS fixtures and a gateway whose routes are `routes`. */
async function withEdge(
  instances: number,
  routes: (backend: string) => Record<string, unknown>[],
  body: (edge: Edge) => Promise<void>,
): Promise<void> {
  const upstream = await LoadUpstream.start();
  const resolve = { [APP]: { hostname: "127.0.0.1", port: upstream.port } };
  const socks = await Promise.all(
    Array.from({ length: instances }, () => SocksFixture.start({ resolve })),
  );
  const [publicPort, localPort, providerPort] = freePorts(3);
  const ports = { public: publicPort, local_health: localPort, provider_health: providerPort };
  const config = proofConfig(ports);
  // deno-lint-ignore no-explicit-any
  const ledger = config.ledger as any;
  ledger.lanes.public.deadline_ms = DEADLINE_MS;
  ledger.application_slots = 64;
  config.egress = {
    socks: socks.map((s) => ({ hostname: "127.0.0.1", port: s.port })),
    probe_interval_ms: 200,
    connect_timeout_ms: 2000,
    // Each request is its own client connection, and each must find the connection the one
    // before left: no settle time (reuse_settle.ts) between clients.
    reuse_settle_ms: 0,
  };
  const dir = await writeConfig(config, [{ host: SHOP, routes: routes(`http://${APP}:80`) }]);
  let gateway: Gateway | undefined;
  try {
    gateway = await Gateway.start(dir, ports);
    await body({ gateway, upstream, socks });
    const ledger = await gateway.ledgerWhen((r) => r.outstanding === 0);
    assert.equal(ledger.outstanding, 0, "every reservation was released");
  } finally {
    await gateway?.dispose();
    await Promise.all(socks.map((s) => s.stop()));
    await upstream.stop();
  }
}

/** What one client saw for one load id. */
interface Outcome {
  readonly id: string;
  readonly method: string;
  readonly status: number;
  readonly body: string;
}

/** Sends one request of load `id` with a 1 KiB body (none for GET). */
async function send(port: number, path: string, method: string, id: string): Promise<Outcome> {
  const response = await request(port, {
    method,
    path,
    headers: [["Host", SHOP], ["X-Load-Id", id]],
    body: method === "GET" ? undefined : bodyFor(id),
  });
  return { id, method, status: response.status, body: response.body };
}

Deno.test("at most once: a SOCKS instance killed under GET, PUT and POST load delivers nothing twice", async () => {
  await withEdge(2, (backend) => [
    { name: "load", match: { prefix: "/" }, proxy: { backends: [{ url: backend }] } },
  ], async ({ gateway, upstream, socks }) => {
    // Each request takes the upstream a while: a kill finds requests delivered but unanswered.
    upstream.delayMs = 30;
    const methods = ["GET", "PUT", "POST"];
    const outcomes: Outcome[] = [];
    // Faults at fixed points of the run: kill instance 0, bring it back, kill instance 1.
    const faults: [number, () => unknown][] = [
      [80, () => socks[0].kill()],
      [180, () => socks[0].restart()],
      [260, () => socks[1].kill()],
    ];
    const stopAt = 400;
    await Promise.all(Array.from({ length: 24 }, async (_, client) => {
      for (let n = 0; outcomes.length < stopAt; n++) {
        while (faults.length > 0 && outcomes.length >= faults[0][0]) faults.shift()![1]();
        const id = `c${client}-${n}`;
        outcomes.push(await send(gateway.ports.public, "/load", methods[(client + n) % 3], id));
      }
    }));
    assert.equal(faults.length, 0, "every fault was injected mid-run");

    for (const outcome of outcomes) {
      const copies = upstream.of(outcome.id);
      // Every copy that arrived whole is this request's own bytes: nothing of another request.
      for (const copy of copies.filter((c) => c.complete)) {
        assert.equal(copy.method, outcome.method);
        const expected = outcome.method === "GET" ? "" : bodyFor(outcome.id);
        assert.equal(copy.declared, outcome.method === "GET" ? -1 : 1024, outcome.id);
        assert.ok(copy.body === expected, `${outcome.id}: a copy arrived with another body`);
      }
      const whole = copies.filter((c) => c.complete).length;
      if (outcome.method === "POST") {
        assert.ok(copies.length <= 1, `POST ${outcome.id} reached the upstream ${copies.length}×`);
      }
      // A PUT with a body is not replayed once its body started (nothing buffered it).
      if (outcome.method === "PUT") {
        assert.ok(whole <= 1, `PUT ${outcome.id} delivered ${whole}×`);
      }
      assert.notEqual(outcome.status, 504, `${outcome.id} waited out the deadline`);
      if (outcome.status === 200) {
        // The client's own answer: its id, and the whole body delivered once.
        const answer = JSON.parse(outcome.body);
        assert.equal(answer.id, outcome.id, "a client got another client's answer");
        assert.equal(answer.bytes, outcome.method === "GET" ? 0 : 1024);
        if (outcome.method !== "GET") assert.equal(whole, 1, `${outcome.id} told 200`);
      } else {
        assert.equal(outcome.status, 502, `${outcome.id}: ${outcome.status} ${outcome.body}`);
      }
    }
    const unknown = upstream.deliveries.filter((d) => !outcomes.some((o) => o.id === d.id));
    assert.deepEqual(unknown, [], "the upstream saw requests no client sent");
    const failed = outcomes.filter((o) => o.status !== 200);
    assert.ok(failed.length <= 60, `${failed.length} of ${outcomes.length} failed`);
  });
});

Deno.test("at most once: an upstream that drops a kept-alive connection with a request on it", async () => {
  await withEdge(1, (backend) => [
    {
      name: "once",
      match: { prefix: "/once/" },
      proxy: { backends: [{ url: backend }], attempts: 1 },
    },
    { name: "retry", match: { prefix: "/retry/" }, proxy: { backends: [{ url: backend }] } },
  ], async ({ gateway, upstream }) => {
    const port = gateway.ports.public;
    // Warm a kept-alive connection, then let the upstream drop every reused one.
    assert.equal((await send(port, "/once/warm", "GET", "warm")).status, 200);
    upstream.mode = "close_reused";
    const cases = [["/once/a", "GET"], ["/once/b", "POST"], ["/retry/c", "POST"], [
      // PUT may be retried, but its body went out and nothing kept it: not again, and never as
      // a head without its body.
      "/retry/e",
      "PUT",
    ]];
    for (const [i, [path, method]] of cases.entries()) {
      const id = `${method}-${path}`;
      const outcome = await send(port, path, method, id);
      assert.equal(outcome.status, 502, `${id}: ${outcome.status} ${outcome.body}`);
      assert.equal(JSON.parse(outcome.body).error.code, "upstream_failed");
      const copies = upstream.of(id);
      assert.equal(copies.length, 1, `${id} reached the upstream ${copies.length}×`);
      assert.ok(copies[0].complete && copies[0].body === (method === "GET" ? "" : bodyFor(id)));
      // The next request needs a kept-alive connection to drop again, in its reader's pool: a
      // request without a body is read on the gateway's own connections (owned_conns.ts), one
      // with a body through node:http's client, and the two never share a connection.
      const next = cases[i + 1]?.[1] ?? "GET";
      const warm = await send(port, "/retry/x", next === "GET" ? "GET" : "POST", `warm-${id}`);
      assert.equal(warm.status, 200);
    }
    // A GET with attempts left is retried on a new connection and answered.
    const retried = await send(port, "/retry/d", "GET", "retried");
    assert.equal(retried.status, 200, retried.body);
    assert.ok(upstream.of("retried").length >= 2, "the dropped GET was sent again");
  });
});
