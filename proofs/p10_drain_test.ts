/**
 * Drain proof: SIGTERM stops admission on `public` (new connections refused, requests on open
 * connections answered 503 `draining`), keeps `local_health` answering with the drain visible, waits
 * for the in-flight public request, and exits 0. The local drain operation does the same, and only
 * for a request that holds the admin credential.
 *
 * Each answer is checked before and during the drain, as the client sees it; "the drain waits" is
 * shown by the process still answering on `local_health` after its public work was stopped, never
 * by how long a timer ran.
 */
import assert from "node:assert/strict";
import {
  ADMIN_AUTH,
  DEMO_TENANT,
  freePorts,
  Gateway,
  proofConfig,
  writeConfig,
} from "../tests/fixtures/gateway.ts";
import {
  json,
  parseResponses,
  type RawResponse,
  renderRequest,
  request,
  writeAll,
} from "../tests/fixtures/http_client.ts";
import { connectionRefused, envelope } from "../tests/fixtures/in_process.ts";
import { explained, PATIENCE_MS, pollUntil } from "./fixtures/evidence.ts";
import { messages } from "../tests/fixtures/diag_lines.ts";

Deno.test("drain proof: SIGTERM waits for in-flight public work, then exits 0", async () => {
  const [publicPort, localPort, providerPort] = freePorts(3);
  const ports = { public: publicPort, local_health: localPort, provider_health: providerPort };
  const dir = await writeConfig(proofConfig(ports), [DEMO_TENANT], {
    "assets/big.bin": new Uint8Array(16 * 1024 * 1024),
  });
  const gateway = await Gateway.start(dir, ports);
  let exited = false;
  await explained([gateway], async () => {
    // Before the drain: every lane answers, a kept-alive public connection is served and stays
    // open, and another connection is opened but not used yet.
    const used = await Deno.connect({ hostname: "127.0.0.1", port: publicPort });
    const first = await exchangeOn(used, renderRequest({ path: "/healthz" }, true));
    assert.equal(first.status, 200, first.body);
    assert.notEqual(first.headers.connection, "close");
    const fresh = await Deno.connect({ hostname: "127.0.0.1", port: publicPort });
    assert.equal((await request(providerPort, { path: "/healthz" })).body, "ok\n");
    assert.equal((await request(localPort, { path: "/readyz" })).status, 200);
    assert.equal((await health(localPort)).status, "ok");

    // One slow reader holds a public request in flight.
    const reader = await Deno.connect({ hostname: "127.0.0.1", port: publicPort });
    const head = renderRequest({ path: "/asset", headers: [["Host", "demo.test"]] });
    await writeAll(reader, new TextEncoder().encode(head));
    const held = await gateway.ledgerWhen((r) => r.lanes.public.in_use === 1, 30_000);
    assert.equal(held.lanes.public.in_use, 1, "the slow reader holds a public slot");

    const exit = gateway.stop("SIGTERM");
    exit.then(() => exited = true);
    const draining = await pollUntil("local_health reports the drain", async () => {
      const body = await health(localPort);
      return body.status === "draining" ? body : undefined;
    });
    assert.equal(draining.active_requests, 1, "the drain gauge shows the in-flight request");
    const ready = await request(localPort, { path: "/readyz" });
    assert.equal(ready.status, 503);
    assert.equal(envelope(ready).code, "draining");
    const probe = await request(providerPort, { path: "/healthz" });
    assert.deepEqual([probe.status, probe.body], [503, "draining\n"]);

    // New public connections: refused by the kernel once every public listener stopped
    // accepting (each public worker stops accepting and closes idle connections in one step).
    await pollUntil(
      "new public connections are refused",
      async () => await connectionRefused(publicPort) || undefined,
    );
    // A request on the connection opened but unused before the drain: the typed refusal, then
    // a close. The connection that was idle after its answer was closed by the drain: no answer.
    const late = await sendOn(fresh, renderRequest({ path: "/healthz" }, true));
    assert.equal(late.length, 1, `one answer, then the connection closed: ${JSON.stringify(late)}`);
    assert.equal(late[0].status, 503);
    assert.equal(envelope(late[0]).code, "draining");
    assert.equal(late[0].headers.connection, "close");
    const closed = await sendOn(used, renderRequest({ path: "/healthz" }, true));
    assert.deepEqual(closed, [], "the idle kept-alive connection was closed, unanswered");

    // Still waiting: the process answers on local_health after all of the above, with the
    // in-flight request still counted — it has not exited while public work is outstanding.
    const waiting = await health(localPort);
    assert.deepEqual([waiting.status, waiting.active_requests], ["draining", 1]);
    assert.equal(exited, false, "the drain waits for the in-flight request");
    assert.doesNotMatch(messages(gateway.stderr), /^drained/m);

    reader.close();
    const status = await pollUntil(
      "the gateway exits after its last public request",
      () => exited ? exit : undefined,
    );
    assert.equal(status.code, 0, gateway.stderr);
    assert.match(gateway.stderr, /draining: public admission stopped/);
    assert.match(messages(gateway.stderr), /^drained$/m, "drained with nothing cut at the cap");
  }).finally(() => gateway.dispose());
});

Deno.test("drain proof: the local drain operation needs the admin credential", async () => {
  const [publicPort, localPort, providerPort] = freePorts(3);
  const ports = { public: publicPort, local_health: localPort, provider_health: providerPort };
  const gateway = await Gateway.start(await writeConfig(proofConfig(ports)), ports);
  let exited = false;
  gateway.exited().then(() => exited = true);
  await explained([gateway], async () => {
    const attempts: [string, [string, string][]][] = [
      ["no credential", []],
      ["a wrong token", [["Authorization", "Bearer not-the-admin-token-0000"]]],
      ["another scheme", [["Authorization", `Basic ${ADMIN_AUTH[1].split(" ")[1]}`]]],
    ];
    for (const [name, headers] of attempts) {
      const refused = await request(localPort, { method: "POST", path: "/v1/drain", headers });
      assert.equal(refused.status, 401, `${name}: ${refused.body}`);
      assert.equal(envelope(refused).code, "admin_credential_required", name);
      assert.match(refused.headers["www-authenticate"] ?? "", /^Bearer\b/, name);
      // Not draining: every lane still serves.
      assert.equal((await health(localPort)).status, "ok", name);
      assert.equal((await request(publicPort, { path: "/healthz" })).status, 200, name);
      assert.equal((await request(providerPort, { path: "/healthz" })).status, 200, name);
    }

    const accepted = await request(localPort, {
      method: "POST",
      path: "/v1/drain",
      headers: [ADMIN_AUTH],
    });
    assert.equal(accepted.status, 202, accepted.body);
    assert.equal(json(accepted).draining, true);
    // With nothing in flight, public stops at once and the process exits 0.
    await pollUntil(
      "new public connections are refused",
      async () => exited || await connectionRefused(publicPort) || undefined,
    );
    const status = await pollUntil(
      "the gateway exits",
      () => exited ? gateway.exited() : undefined,
    );
    assert.equal(status.code, 0, gateway.stderr);
    assert.match(gateway.stderr, /draining: public admission stopped/);
    assert.match(messages(gateway.stderr), /^drained$/m);
  }).finally(() => gateway.dispose());
});

/** `/v1/health` from the local-health lane. */
// deno-lint-ignore no-explicit-any
async function health(port: number): Promise<Record<string, any>> {
  const response = await request(port, { path: "/v1/health" });
  assert.equal(response.status, 200, response.body);
  return json(response);
}

/** Sends one request on an open connection and reads its one answer, leaving it open. */
async function exchangeOn(conn: Deno.Conn, text: string): Promise<RawResponse> {
  await writeAll(conn, new TextEncoder().encode(text));
  const timer = setTimeout(() => conn.close(), PATIENCE_MS);
  const buffer = new Uint8Array(4096);
  let out = "";
  try {
    for (;;) {
      const n = await conn.read(buffer);
      if (n === null) throw new Error(`Connection closed after ${JSON.stringify(out)}`);
      out += new TextDecoder().decode(buffer.subarray(0, n));
      try {
        return parseResponses(out)[0];
      } catch { /* not whole yet */ }
    }
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Writes on an open connection and reads every answer until the server closes it (a connection
 * the server already closed may refuse the write: then there is no answer).
 */
async function sendOn(conn: Deno.Conn, text: string): Promise<RawResponse[]> {
  await writeAll(conn, new TextEncoder().encode(text)).catch(() => {});
  const timer = setTimeout(() => conn.close(), PATIENCE_MS);
  const buffer = new Uint8Array(4096);
  let out = "";
  for (;;) {
    const n = await conn.read(buffer).catch(() => null);
    if (n === null) break;
    out += new TextDecoder().decode(buffer.subarray(0, n));
  }
  clearTimeout(timer);
  try {
    conn.close();
  } catch { /* closed by the timer */ }
  return parseResponses(out);
}
