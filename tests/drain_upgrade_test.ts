/**
 * Rule 4 of issue 33, for the drain (src/pipeline/lane_phases.ts `admit`, src/edge/lifecycle.ts):
 * once a drain has stopped public admission, an `Upgrade` request is refused like any other
 * request — also one on a connection opened before the drain, whose head finishes arriving after
 * it, and one that arrives whole after it — and it never reaches a backend. An upgrade let through
 * would open a tunnel the drain cannot end (its slot held until the drain's cap cuts it) to a
 * backend the operator is taking away.
 *
 * Against the real gateway under its derived flags: a raw upstream that records every connection
 * and every byte (and answers an `Upgrade` with 101), a slow reader that keeps the drain waiting,
 * and the client's view of each late request. The other side first: before the drain the same
 * upgrade reaches the upstream and is tunnelled.
 *
 * @module
 */
import assert from "node:assert/strict";
import {
  ADMIN_AUTH,
  freePorts,
  Gateway,
  type LanePorts,
  proofConfig,
  writeConfig,
} from "./fixtures/gateway.ts";
import { request, writeAll } from "./fixtures/http_client.ts";
import { RawClient } from "./adversarial/raw_client.ts";

const SHOP = "shop.test";
const BIG = new Uint8Array(16 * 1024 * 1024).fill(0x61);
const encoder = new TextEncoder();

/** An upstream over raw TCP: every connection and every byte it got; 101 and echo on Upgrade. */
class RecordingUpstream {
  readonly port: number;
  /** One entry per accepted connection: the bytes it received, as latin1 text. */
  readonly connections: string[] = [];
  readonly #listener: Deno.Listener;
  readonly #conns = new Set<Deno.Conn>();
  readonly #accepting: Promise<void>;

  constructor() {
    this.port = freePorts(1)[0];
    this.#listener = Deno.listen({ hostname: "127.0.0.1", port: this.port });
    this.#accepting = this.#accept();
  }

  async #accept(): Promise<void> {
    try {
      for await (const conn of this.#listener) {
        this.#conns.add(conn);
        this.#serve(conn, this.connections.push("") - 1).finally(() => this.#conns.delete(conn));
      }
    } catch { /* closed */ }
  }

  async #serve(conn: Deno.Conn, index: number): Promise<void> {
    const buffer = new Uint8Array(16384);
    let switched = false;
    try {
      for (;;) {
        const n = await conn.read(buffer);
        if (n === null) break;
        const text = String.fromCharCode(...buffer.subarray(0, n));
        this.connections[index] += text;
        if (switched) await writeAll(conn, buffer.slice(0, n)); // the tunnel echoes
        else if (this.connections[index].includes("\r\n\r\n")) {
          switched = true;
          await writeAll(
            conn,
            encoder.encode(
              "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n",
            ),
          );
        }
      }
    } catch { /* reset */ }
    try {
      conn.close();
    } catch { /* closed */ }
  }

  async stop(): Promise<void> {
    this.#listener.close();
    for (const conn of this.#conns) {
      try {
        conn.close();
      } catch { /* closed */ }
    }
    await this.#accepting;
  }
}

/** An Upgrade request's head for the tunnelled route. */
function upgradeHead(id: string): string {
  return `GET /ws/chat HTTP/1.1\r\nHost: ${SHOP}\r\nConnection: Upgrade\r\nUpgrade: echo\r\n` +
    `X-Request-Id: ${id}\r\n\r\n`;
}

async function refused(port: number): Promise<boolean> {
  try {
    (await Deno.connect({ hostname: "127.0.0.1", port })).close();
    return false;
  } catch (error) {
    return error instanceof Deno.errors.ConnectionRefused;
  }
}

async function until(check: () => Promise<boolean>, what: string, ms = 10_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`Timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
}

/** Starts the gateway: `/ws/` tunnels to `upstream`, `/big` is a 16 MiB file the edge serves. */
async function startGateway(upstream: RecordingUpstream): Promise<Gateway> {
  const [p, l, h] = freePorts(3);
  const ports: LanePorts = { public: p, local_health: l, provider_health: h };
  const config = proofConfig(ports, {
    drain: { timeout_ms: 20_000, lame_duck_ms: 0 },
    egress: { direct: [`127.0.0.1:${upstream.port}`], connect_timeout_ms: 1000 },
  });
  const tenant = {
    host: SHOP,
    routes: [
      {
        name: "ws",
        match: { prefix: "/ws/" },
        proxy: { backends: [{ url: `http://127.0.0.1:${upstream.port}` }] },
      },
      { name: "big", match: { path: "/big" }, respond: { body_file: "assets/big.bin" } },
    ],
  };
  const dir = await writeConfig(config, [tenant], { "assets/big.bin": BIG });
  return await Gateway.start(dir, ports);
}

Deno.test(
  "rule 4: an Upgrade that arrives, or finishes arriving, after a drain began is refused and never reaches a backend",
  async () => {
    const upstream = new RecordingUpstream();
    let gateway: Gateway | undefined;
    const clients: RawClient[] = [];
    let slow: Deno.Conn | undefined;
    try {
      gateway = await startGateway(upstream);
      const port = gateway.ports.public;
      const open = async () => {
        const client = await RawClient.open(port);
        clients.push(client);
        return client;
      };

      // The other side: before the drain the upgrade reaches the upstream and tunnels.
      const before = await open();
      await before.write(upgradeHead("before"));
      assert.ok(await before.until((t) => t.includes("\r\n\r\n"), 5000), before.text);
      assert.match(before.text, /^HTTP\/1\.1 101 /);
      await before.write("ping");
      assert.ok(await before.until((t) => t.endsWith("ping"), 5000), "the tunnel echoes");
      assert.equal(upstream.connections.length, 1);
      before.close();
      await until(async () => (await gateway!.ledger()).outstanding === 0, "the tunnel's release");
      upstream.connections.length = 0;

      // A reader that takes nothing of a 16 MiB reply past its head keeps the drain waiting.
      slow = await Deno.connect({ hostname: "127.0.0.1", port });
      await writeAll(slow, encoder.encode(`GET /big HTTP/1.1\r\nHost: ${SHOP}\r\n\r\n`));
      const first = new Uint8Array(512);
      const n = await slow.read(first);
      assert.match(new TextDecoder().decode(first.subarray(0, n ?? 0)), /^HTTP\/1\.1 200 /);
      await until(
        async () => (await gateway!.ledger()).lanes.public.in_use === 1,
        "the slow reader's slot",
      );
      // Opened before the drain: one whose upgrade head is half sent, one that sent nothing yet.
      const half = await open();
      await half.write(
        `GET /ws/chat HTTP/1.1\r\nHost: ${SHOP}\r\nConnection: Upgrade\r\nUpgrade: echo\r\n`,
      );
      const quiet = await open();
      await until(
        async () => (await gateway!.ledger()).lanes.public.connections === 3,
        "three open public connections",
      );

      const drain = await request(gateway.ports.local_health, {
        method: "POST",
        path: "/v1/drain",
        headers: [ADMIN_AUTH],
      });
      assert.equal(drain.status, 202, drain.body);
      await until(() => refused(port), "the public listener to close");

      // Finishes arriving after the drain began.
      await half.write("X-Request-Id: half\r\n\r\n");
      // Arrives whole after the drain began, on a connection from before it.
      await quiet.write(upgradeHead("quiet"));
      for (const [name, client] of [["half", half], ["quiet", quiet]] as const) {
        await client.until((t) => t.includes("\r\n\r\n"), 5000);
        const ended = await client.end(5000);
        assert.doesNotMatch(ended.text, /^HTTP\/1\.1 101 /, `${name}: switched protocols`);
        // Refused with the drain's answer, and the connection closed after it.
        assert.match(ended.text, /^HTTP\/1\.1 503 /, `${name}: ${ended.text}`);
        assert.match(ended.text, /\r\nconnection: close\r\n/i, name);
        assert.match(ended.text, new RegExp(`"code":"draining".*"request_id":"${name}"`), name);
        assert.ok(ended.closed, `${name}: the gateway closed the connection`);
      }
      // Arrives after the drain began on a new connection: nothing accepts it.
      assert.equal(await refused(port), true);

      assert.deepEqual(upstream.connections, [], "no backend saw a connection or a byte");
      assert.equal((await gateway.ledger()).lanes.public.in_use, 1, "the drain still waits");
      slow.close();
      const status = await gateway.exited();
      assert.equal(status.code, 0, gateway.stderr);
      assert.equal(await refused(gateway.ports.local_health), true, "every listener closed");
    } finally {
      for (const client of clients) client.close();
      try {
        slow?.close();
      } catch { /* closed */ }
      await gateway?.dispose();
      await upstream.stop();
    }
  },
);
