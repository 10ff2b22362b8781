/**
 * Drain proof: SIGTERM stops admission on `public` (new connections refused, requests on open
 * connections answered 503 `draining`), keeps `local_health` answering with the drain visible, waits
 * for the in-flight public request, and exits 0.
 */
import assert from "node:assert/strict";
import {
  DEMO_TENANT,
  freePorts,
  Gateway,
  proofConfig,
  writeConfig,
} from "../tests/fixtures/gateway.ts";
import { parseResponses, renderRequest, request, writeAll } from "../tests/fixtures/http_client.ts";

Deno.test("drain proof: SIGTERM waits for in-flight public work, then exits 0", async () => {
  const [publicPort, localPort, providerPort] = freePorts(3);
  const ports = { public: publicPort, local_health: localPort, provider_health: providerPort };
  const dir = await writeConfig(proofConfig(ports), [DEMO_TENANT], {
    "assets/big.bin": new Uint8Array(16 * 1024 * 1024),
  });
  const gateway = await Gateway.start(dir, ports);
  try {
    // One slow reader holds a public request in flight.
    const reader = await Deno.connect({ hostname: "127.0.0.1", port: publicPort });
    const head = renderRequest({ path: "/asset", headers: [["Host", "demo.test"]] });
    await writeAll(reader, new TextEncoder().encode(head));
    // An idle keep-alive connection opened before the drain.
    const kept = await Deno.connect({ hostname: "127.0.0.1", port: publicPort });
    await gateway.ledgerWhen((r) => r.lanes.public.in_use === 1);

    const exit = gateway.stop("SIGTERM");
    const health = await waitFor(async () => {
      const response = await request(localPort, { path: "/v1/health" });
      const body = JSON.parse(response.body);
      return body.status === "draining" ? body : undefined;
    });
    assert.equal(health.active_requests, 1, "the drain gauge shows the in-flight request");
    assert.equal((await request(localPort, { path: "/readyz" })).status, 503);
    assert.equal((await request(providerPort, { path: "/healthz" })).status, 503);

    // A request on the connection opened before the drain is refused, and the connection closed.
    const late = parseResponses(await sendOn(kept, renderRequest({ path: "/healthz" }, true)));
    assert.equal(late.length, 1);
    assert.equal(late[0].status, 503);
    assert.equal(JSON.parse(late[0].body).error.code, "draining");
    assert.equal(late[0].headers.connection, "close");
    await assert.rejects(
      () => request(publicPort, { path: "/healthz" }),
      "new public connections are refused",
    );

    const early = await Promise.race([
      exit,
      new Promise((resolve) => setTimeout(() => resolve("waiting"), 500)),
    ]);
    assert.equal(early, "waiting", "the drain waits for the in-flight request");
    reader.close();
    const status = await exit;
    assert.equal(status.code, 0);
    assert.match(gateway.stderr, /draining: public admission stopped/);
    assert.match(gateway.stderr, /drained/);
  } finally {
    await gateway.dispose();
  }
});

/** Writes on an open connection and reads until the server closes it. */
async function sendOn(conn: Deno.Conn, text: string): Promise<string> {
  await writeAll(conn, new TextEncoder().encode(text));
  const buffer = new Uint8Array(4096);
  let out = "";
  for (;;) {
    const n = await conn.read(buffer).catch(() => null);
    if (n === null) break;
    out += new TextDecoder().decode(buffer.subarray(0, n));
  }
  conn.close();
  return out;
}

async function waitFor<T>(probe: () => Promise<T | undefined>, timeoutMs = 5000): Promise<T> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value !== undefined) return value;
    if (Date.now() > until) throw new Error("condition not reached");
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
}
