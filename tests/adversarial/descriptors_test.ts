/**
 * Descriptors, from outside: the real gateway (derived flags) is watched through `/proc/<pid>/fd`
 * and through the SOCKS instance's own count of open connections, beside what it reports itself.
 *
 * - Clients leave at every point of an exchange — right after sending, during a slow SOCKS
 *   CONNECT (Tor building a circuit), while the upstream works, mid-download, mid-upload — and the
 *   gateway's descriptors and upstream connections return to the idle baseline.
 * - Under `ulimit -n 256`, 400 idle public connections: with the default (derived) public ceiling
 *   the protected lanes answer throughout; with a public ceiling set too high the descriptors run
 *   out, and every lane answers again once the connections close (listeners re-armed).
 *
 * @module
 */
import assert from "node:assert/strict";
import {
  freePorts,
  Gateway,
  type LanePorts,
  proofConfig,
  writeConfig,
} from "../fixtures/gateway.ts";
import { json, request } from "../fixtures/http_client.ts";
import { SocksFixture } from "../fixtures/socks5.ts";
import { UpstreamFixture } from "../fixtures/upstream.ts";
import { diagLines } from "../fixtures/diag_lines.ts";

const SHOP = "shop.test";
const APP = "app.internal";
const encoder = new TextEncoder();

/**
 * Open descriptors of process `pid`, as the kernel counts them (`ls`, since Deno grants `/proc`
 * to nothing short of `--allow-all`).
 */
async function descriptorsOf(pid: number): Promise<number> {
  const { stdout, success } = await new Deno.Command("ls", { args: [`/proc/${pid}/fd`] }).output();
  assert.ok(success, `cannot list the descriptors of ${pid}`);
  return new TextDecoder().decode(stdout).split("\n").filter((line) => line !== "").length;
}

/** Polls `read` until `done` holds or `ms` pass; returns the last reading. */
async function until<T>(read: () => T | Promise<T>, done: (value: T) => boolean, ms = 10_000) {
  const deadline = Date.now() + ms;
  let value = await read();
  while (!done(value) && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 100));
    value = await read();
  }
  return value;
}

/** `/v1/health` from the local-health lane. */
// deno-lint-ignore no-explicit-any
async function health(port: number): Promise<any> {
  const response = await request(port, { path: "/v1/health" });
  assert.equal(response.status, 200);
  return json(response);
}

function ports(): LanePorts {
  const [publicPort, localPort, providerPort] = freePorts(3);
  return { public: publicPort, local_health: localPort, provider_health: providerPort };
}

/** Opens a connection, sends `head` (and `body`), waits `ms`, reads `read` bytes, leaves. */
async function leave(
  port: number,
  head: string,
  options: { body?: Uint8Array; waitMs?: number; read?: number },
): Promise<void> {
  const conn = await Deno.connect({ hostname: "127.0.0.1", port });
  try {
    await conn.write(encoder.encode(head));
    if (options.body) await conn.write(options.body);
    if (options.waitMs) await new Promise((resolve) => setTimeout(resolve, options.waitMs));
    let got = 0;
    const buffer = new Uint8Array(65536);
    while (got < (options.read ?? 0)) {
      const n = await conn.read(buffer);
      if (n === null) break;
      got += n;
    }
  } finally {
    // Unread bytes in the receive buffer make this close a reset, as an impatient client's is.
    conn.close();
  }
}

Deno.test("descriptors: clients leaving at every point of an exchange leave nothing open", async () => {
  const upstream = await UpstreamFixture.start();
  const socks = await SocksFixture.start({
    resolve: { [APP]: { hostname: "127.0.0.1", port: upstream.port } },
  });
  const lanes = ports();
  const config = proofConfig(lanes);
  // deno-lint-ignore no-explicit-any
  (config.ledger as any).application_slots = 64;
  // Pooled idle sockets live 30 s (the default): nothing below may rely on them expiring.
  config.egress = { socks: [{ hostname: "127.0.0.1", port: socks.port }] };
  const dir = await writeConfig(config, [{
    host: SHOP,
    routes: [{
      name: "app",
      match: { prefix: "/" },
      proxy: { backends: [{ url: `http://${APP}` }] },
    }],
  }]);
  const gateway = await Gateway.start(dir, lanes);
  try {
    const baseline = await descriptorsOf(gateway.pid);
    const get = (path: string) => `GET ${path} HTTP/1.1\r\nHost: ${SHOP}\r\n\r\n`;
    const cases: [string, () => Promise<void>][] = [
      ["right after sending", () => leave(lanes.public, get("/echo"), {})],
      ["during a slow SOCKS CONNECT", async () => {
        socks.connectDelayMs = 300;
        await leave(lanes.public, get("/echo"), { waitMs: 50 });
      }],
      ["while the upstream works", () => leave(lanes.public, get("/slow/1500"), { waitMs: 300 })],
      ["mid-download", () => leave(lanes.public, get("/bytes/50000000"), { read: 200_000 })],
      ["mid-upload", () =>
        leave(
          lanes.public,
          `POST /echo HTTP/1.1\r\nHost: ${SHOP}\r\nContent-Length: 1048576\r\n\r\n`,
          { body: new Uint8Array(100_000).fill(120), waitMs: 200 },
        )],
    ];
    for (const [point, run] of cases) {
      socks.connectDelayMs = 0;
      await Promise.all(Array.from({ length: 16 }, run));
      // Outside evidence: the kernel's descriptor table and the SOCKS server's open connections.
      const settled = await until(
        async () => ({
          fds: await descriptorsOf(gateway.pid),
          socks: socks.open,
          upstream: (await health(lanes.local_health)).connections.upstream,
        }),
        (r) =>
          r.fds <= baseline + 2 && r.socks === 0 && r.upstream.active === 0 &&
          r.upstream.idle === 0 && r.upstream.connecting === 0,
      );
      assert.ok(
        settled.fds <= baseline + 2,
        `${point}: ${settled.fds} descriptors, ${baseline} idle`,
      );
      assert.equal(settled.socks, 0, `${point}: tunnels still open at the SOCKS instance`);
      assert.deepEqual(settled.upstream, { active: 0, idle: 0, connecting: 0, tunnels: 0 }, point);
    }
    // An ordinary request still works, and its pooled connection is reported as such.
    const ok = await request(lanes.public, { path: "/echo", headers: [["Host", SHOP]] });
    assert.equal(ok.status, 200);
    const pooled = await until(
      async () => (await health(lanes.local_health)).connections.upstream,
      (u) => u.idle === 1,
      3000,
    );
    assert.equal(pooled.idle, 1);
    assert.equal(socks.open, 1, "the one pooled tunnel, as the SOCKS instance sees it");
    const ledger = await gateway.ledgerWhen((r) => r.outstanding === 0);
    assert.equal(ledger.outstanding, 0);
  } finally {
    await gateway.dispose();
    await socks.stop();
    await upstream.stop();
  }
});

/** Holds `count` idle connections to `port`; resolves to a function that closes them. */
async function hold(port: number, count: number): Promise<() => void> {
  const conns: Deno.Conn[] = [];
  for (let i = 0; i < count; i++) {
    conns.push(await Deno.connect({ hostname: "127.0.0.1", port }));
  }
  return () => {
    for (const conn of conns) {
      try {
        conn.close();
      } catch { /* the gateway closed it */ }
    }
  };
}

/** The status of one request, or 0 when none came within `ms`. */
async function answers(port: number, path: string, ms = 3000): Promise<number> {
  const attempt = request(port, { path, headers: [["Host", SHOP]] }).then((r) => r.status, () => 0);
  const timeout = new Promise<number>((resolve) => setTimeout(() => resolve(0), ms));
  return await Promise.race([attempt, timeout]);
}

async function lowLimitGateway(publicMax?: number): Promise<Gateway> {
  const lanes = ports();
  const config = proofConfig(lanes);
  // deno-lint-ignore no-explicit-any
  const ledger = config.ledger as any;
  if (publicMax !== undefined) ledger.lanes.public.max_connections = publicMax;
  const dir = await writeConfig(config, [{
    host: SHOP,
    routes: [{ name: "hello", match: { prefix: "/" }, respond: { status: 200, body: "hello" } }],
  }]);
  return await Gateway.start(dir, lanes, undefined, { fileLimit: 256 });
}

Deno.test("descriptors: under ulimit -n 256 the default public ceiling keeps the protected lanes answering", async () => {
  const gateway = await lowLimitGateway();
  try {
    const { ports: lanes } = gateway;
    assert.match(gateway.stderr, /open-file limit 256: public lane max_connections \d+ \(derived/);
    const report = await health(lanes.local_health);
    assert.equal(report.descriptors.limit, 256);
    assert.equal(report.descriptors.limit_exact, true);
    const release = await hold(lanes.public, 400);
    try {
      assert.equal(await answers(lanes.local_health, "/healthz"), 200, "local_health during hold");
      assert.equal(await answers(lanes.provider_health, "/healthz"), 200, "provider_health");
      const during = await health(lanes.local_health);
      assert.equal(during.descriptors.exhausted, false);
    } finally {
      release();
    }
    const back = await until(() => answers(lanes.public, "/"), (status) => status === 200);
    assert.equal(back, 200, "the public lane answers after the hold");
  } finally {
    await gateway.dispose();
  }
});

Deno.test("descriptors: after running out, every lane answers again once connections close", async () => {
  // A public ceiling above what the limit allows: the operator's choice, warned about at boot.
  const gateway = await lowLimitGateway(1000);
  try {
    const { ports: lanes } = gateway;
    const warned = diagLines(gateway.stderr).find((line) =>
      line.msg.startsWith("ledger.lanes.public.max_connections 1000 does not fit")
    );
    assert.equal(warned?.level, "warn", gateway.stderr);
    const release = await hold(lanes.public, 400);
    const exhausted = await until(
      () => descriptorsOf(gateway.pid),
      (fds) => fds >= 250,
    );
    assert.ok(exhausted >= 250, `only ${exhausted} descriptors open: the limit was not reached`);
    // The gateway notices (its once-a-second check) while the connections are held.
    const noticed = await until(
      () => gateway.stderr,
      (text) => /out of file descriptors/.test(text),
    );
    release();
    assert.match(noticed, /out of file descriptors \(EMFILE\)/);
    for (const [lane, path] of [["public", "/"], ["local_health", "/healthz"]] as const) {
      const status = await until(() => answers(lanes[lane], path), (s) => s === 200, 15_000);
      assert.equal(status, 200, `${lane} answers again`);
    }
    assert.equal(await answers(lanes.provider_health, "/healthz"), 200);
    const report = await health(lanes.local_health);
    assert.ok(report.descriptors.exhaustions >= 1, JSON.stringify(report.descriptors));
    assert.equal(report.descriptors.exhausted, false);
    assert.match(gateway.stderr, /descriptors are free again: \d+ listeners? re-armed/);
  } finally {
    await gateway.dispose();
  }
});
