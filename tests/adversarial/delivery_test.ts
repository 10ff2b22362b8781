/**
 * Adversarial delivery: a client that asks for a large reply and then does not take it, or takes
 * it too slowly, cannot hold a public slot for ever. With `timeouts.send_ms` and
 * `timeouts.min_send_rate`, a reply whose bytes wait for the client is cut off — connection
 * closed, reservation cancelled, `portcullis_responses_cut_total{reason="send_timeout"}` counted —
 * unless the client takes at least `min_send_rate` bytes per second; a reader above the rate
 * receives every byte. With `timeouts.tunnel_idle_ms`, an Upgrade tunnel quiet both ways is closed
 * and counted (`reason="tunnel_idle"`); a tunnel that keeps talking stays, and without the option
 * a quiet tunnel stays too.
 *
 * What the gateway can see of a reader is shaped by the kernel, measured here on loopback:
 *
 * - the socket buffers take about 4 MB of a reply before the gateway sees backpressure (a client
 *   that read only the head received 4,069,618 bytes once it was cut), so bodies are sized well
 *   past that;
 * - a send buffer reports room again only once about a third of it has drained, so a reader's
 *   progress shows in steps of ~1.4 MB: a reader at 8 KiB/s shows none within a `send_ms` of
 *   1 s, while one at 4 MiB/s shows 3.2–4.6 MB in every window. The reader that proves the rate
 *   itself is enforced (not only progress) is therefore a 4 MiB/s one, cut under a `min_send_rate`
 *   of 8 MiB/s and received whole under one of 1 MiB/s.
 *
 * @module
 */
import assert from "node:assert/strict";
import http from "node:http";
import type { AddressInfo, Socket } from "node:net";
import { freePorts } from "../fixtures/gateway.ts";
import { request, writeAll } from "../fixtures/http_client.ts";
import { type Arena, arenaTest, pause, SHOP } from "./arena.ts";

const MiB = 1024 * 1024;
const SEND_MS = 1000;
/** The first arena's minimum rate, and the strict one of the second. */
const MIN_SEND_RATE = MiB;
const STRICT_MIN_SEND_RATE = 8 * MiB;
const TUNNEL_IDLE_MS = 500;
/** What an attacker asks for: far more than the socket buffers absorb. */
const ATTACK_BYTES = 64 * MiB;
/** A reader at four times the first arena's minimum rate and half the strict one. */
const STEADY_RATE = 4 * MiB;
/** A body the steady reader takes whole: the buffers' ~4 MB, then two seconds of backpressure. */
const STEADY_BYTES = 12 * MiB;
/**
 * A reader that makes progress in every window at an eighth of the strict minimum. Far enough
 * below it that the gateway, even starved of CPU on a busy machine, still has bytes waiting for it
 * (the minimum is enforced only while bytes wait; a reader at half the minimum was not cut once
 * under double load because the gateway could not produce faster than it read).
 */
const PROGRESS_RATE = MiB;
/** A reader far below any minimum rate. */
const TRICKLE_RATE = 8 * 1024;
/** How long the tunnel without an idle limit is left quiet: three of the first arena's limits. */
const QUIET_MS = 3 * TUNNEL_IDLE_MS;
/** How long a case waits for something the gateway must do within about two send windows. */
const DEADLINE_MS = 8000;

const encoder = new TextEncoder();

/** Opens a raw connection to the public lane. */
function connect(arena: Arena): Promise<Deno.TcpConn> {
  return Deno.connect({ hostname: "127.0.0.1", port: arena.ports.public });
}

/** Closes a connection the gateway may already have closed. */
function close(conn: Deno.Conn): void {
  try {
    conn.close();
  } catch { /* already closed */ }
}

/** Reads until the response head is complete; the head, and how many body bytes came with it. */
async function readHead(conn: Deno.Conn): Promise<{ head: string; bodyBytes: number }> {
  const buffer = new Uint8Array(16 * 1024);
  let text = "";
  for (;;) {
    const n = await conn.read(buffer);
    if (n === null) throw new Error(`closed before a response head: ${JSON.stringify(text)}`);
    text += String.fromCharCode(...buffer.subarray(0, n));
    const end = text.indexOf("\r\n\r\n");
    if (end !== -1) return { head: text.slice(0, end), bodyBytes: text.length - end - 4 };
  }
}

/**
 * Reads at about `bytesPerSecond` (in reads of a twentieth of a second's worth, 1–64 KiB) until
 * `total` bytes came, the peer closed, or `stop()` holds.
 *
 * @returns the bytes read
 */
async function readPaced(
  conn: Deno.Conn,
  bytesPerSecond: number,
  options: { readonly total?: number; readonly stop?: () => boolean },
): Promise<number> {
  const size = Math.min(64 * 1024, Math.max(1024, Math.floor(bytesPerSecond / 20)));
  const buffer = new Uint8Array(size);
  const started = performance.now();
  const total = options.total ?? Infinity;
  let received = 0;
  while (received < total && !options.stop?.()) {
    const due = (performance.now() - started) / 1000 * bytesPerSecond;
    if (received >= due) {
      await pause(Math.max(5, (received - due + size) / bytesPerSecond * 1000));
      continue;
    }
    let n: number | null;
    try {
      n = await conn.read(buffer.subarray(0, Math.min(size, total - received)));
    } catch {
      break;
    }
    if (n === null) break;
    received += n;
  }
  return received;
}

/**
 * Reads everything left as fast as it comes.
 *
 * @returns the bytes read, and whether the peer closed (false: `limitMs` passed first)
 */
async function drain(
  conn: Deno.Conn,
  limitMs: number,
): Promise<{ bytes: number; closed: boolean }> {
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    close(conn);
  }, limitMs);
  const buffer = new Uint8Array(64 * 1024);
  let bytes = 0;
  try {
    for (;;) {
      const n = await conn.read(buffer);
      if (n === null) break;
      bytes += n;
    }
  } catch { /* reset by the peer, or closed by the timer */ }
  clearTimeout(timer);
  return { bytes, closed: !timedOut };
}

type CutReason = "send_timeout" | "tunnel_idle";

/** `portcullis_responses_cut_total` for the public lane and `reason`, read from /metrics. */
async function cuts(arena: Arena, reason: CutReason): Promise<number> {
  const metrics = (await request(arena.ports.local_health, { path: "/metrics" })).body;
  const sample = new RegExp(
    `^portcullis_responses_cut_total\\{lane="public",reason="${reason}"\\} (\\d+)$`,
    "m",
  ).exec(metrics);
  assert.ok(sample, `/metrics counts no ${reason} cuts on the public lane`);
  return Number(sample[1]);
}

/** Polls the cut counter until it reaches `expected` (or the deadline passes); the last value. */
async function cutsWhen(arena: Arena, reason: CutReason, expected: number): Promise<number> {
  const until = Date.now() + DEADLINE_MS;
  let value = await cuts(arena, reason);
  while (value < expected && Date.now() < until) {
    await pause(50);
    value = await cuts(arena, reason);
  }
  return value;
}

/**
 * Asks for `path` (an {@link ATTACK_BYTES} reply), reads its head, then takes the body at
 * `bytesPerSecond` (0: not at all) without closing, and expects the gateway to cut the reply off
 * as the client, the ledger and /metrics see it.
 *
 * @returns the body bytes the client took before the cut
 */
async function expectCut(
  arena: Arena,
  path: string,
  bytesPerSecond: number,
  extraHeaders = "",
): Promise<number> {
  const before = await arena.gateway.ledger();
  const cutsBefore = await cuts(arena, "send_timeout");
  const conn = await connect(arena);
  try {
    await writeAll(
      conn,
      encoder.encode(`GET ${path} HTTP/1.1\r\nHost: ${SHOP}\r\n${extraHeaders}\r\n`),
    );
    const { head, bodyBytes } = await readHead(conn);
    assert.match(head, new RegExp(`^HTTP/1\\.1 200 [^]*\r\ncontent-length: ${ATTACK_BYTES}`, "i"));
    let stopped = false;
    const taking = bytesPerSecond > 0
      ? readPaced(conn, bytesPerSecond, { stop: () => stopped })
      : Promise.resolve(0);
    const after = await arena.gateway.ledgerWhen(
      (r) => r.outstanding === 0 && r.cancelled > before.cancelled,
      DEADLINE_MS,
    );
    stopped = true;
    const taken = bodyBytes + await taking;
    assert.equal(after.outstanding, 0, "the public slot was released");
    assert.equal(after.lanes.public.in_use, 0);
    assert.equal(after.cancelled, before.cancelled + 1, "the reply was cancelled");
    assert.equal(await cutsWhen(arena, "send_timeout", cutsBefore + 1), cutsBefore + 1);
    const { bytes, closed } = await drain(conn, DEADLINE_MS);
    assert.ok(closed, "the gateway closed the connection");
    const body = taken + bytes;
    assert.ok(body < ATTACK_BYTES, `the reply was cut short: ${body} of ${ATTACK_BYTES} bytes`);
    return taken;
  } finally {
    close(conn);
  }
}

/**
 * An upstream that streams `/bytes/<n>` with backpressure from a port reserved when the arena
 * boots, started only by the case that needs it: it tells whether its connection was closed
 * before the body was sent.
 */
class WatchedUpstream {
  port = 0;

  /** Reserves the port and lets the egress reach it (an `ArenaOptions.edit`). */
  reserve(config: Record<string, unknown>): void {
    this.port = freePorts(1)[0];
    (config.egress as { direct: string[] }).direct.push(`127.0.0.1:${this.port}`);
  }

  /**
   * Serves while `run` runs.
   *
   * @param run the case, given a promise of the first reply's fate once its connection closed:
   *   the bytes written into it and whether the body was complete
   */
  async serve(
    run: (ended: Promise<{ written: number; complete: boolean }>) => Promise<void>,
  ): Promise<void> {
    let ended!: (fate: { written: number; complete: boolean }) => void;
    const fate = new Promise<{ written: number; complete: boolean }>((resolve) => ended = resolve);
    const sockets = new Set<Socket>();
    const server = http.createServer((request, response) => {
      const total = Number(/^\/bytes\/(\d+)$/.exec(request.url ?? "")?.[1] ?? 0);
      response.writeHead(200, { "content-length": String(total) });
      const chunk = Buffer.alloc(64 * 1024, "w");
      let written = 0;
      response.once("close", () => ended({ written, complete: response.writableFinished }));
      const pump = () => {
        while (written < total && !response.destroyed) {
          const size = Math.min(chunk.length, total - written);
          written += size;
          if (!response.write(chunk.subarray(0, size))) return void response.once("drain", pump);
        }
        response.end();
      };
      pump();
    });
    server.on("connection", (socket: Socket) => {
      sockets.add(socket);
      socket.once("close", () => sockets.delete(socket));
    });
    await new Promise<void>((resolve) =>
      server.listen({ host: "127.0.0.1", port: this.port }, resolve)
    );
    assert.equal((server.address() as AddressInfo).port, this.port);
    try {
      await run(fate);
    } finally {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    }
  }
}

/** Sends an `Upgrade: echo` request through `/api/` and reads the 101. */
async function openTunnel(arena: Arena): Promise<Deno.TcpConn> {
  const conn = await connect(arena);
  await writeAll(
    conn,
    encoder.encode(
      `GET /api/chat HTTP/1.1\r\nHost: ${SHOP}\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n`,
    ),
  );
  const { head, bodyBytes } = await readHead(conn);
  assert.match(head, /^HTTP\/1\.1 101 /, head);
  assert.equal(bodyBytes, 0, "nothing followed the 101 unasked");
  return conn;
}

/** Sends `text` into a tunnel and reads it back (within the case deadline). */
async function echo(conn: Deno.Conn, text: string): Promise<string> {
  await writeAll(conn, encoder.encode(text));
  const buffer = new Uint8Array(4096);
  let echoed = "";
  const timer = setTimeout(() => close(conn), DEADLINE_MS);
  try {
    while (echoed.length < text.length) {
      const n = await conn.read(buffer);
      if (n === null) break;
      echoed += new TextDecoder().decode(buffer.subarray(0, n));
    }
  } catch { /* closed */ }
  clearTimeout(timer);
  return echoed;
}

const watched = new WatchedUpstream();

arenaTest("adversarial: bounded delivery", {
  edit(config) {
    Object.assign(config.timeouts as Record<string, unknown>, {
      send_ms: SEND_MS,
      min_send_rate: MIN_SEND_RATE,
      tunnel_idle_ms: TUNNEL_IDLE_MS,
    });
    watched.reserve(config);
  },
  routes: (ports) => [
    {
      name: "api",
      match: { prefix: "/api/" },
      proxy: {
        backends: [{ url: `http://127.0.0.1:${ports.upstream}` }],
        rewrite: { strip_prefix: "/api" },
      },
    },
    {
      name: "watched",
      match: { prefix: "/watched/" },
      proxy: {
        backends: [{ url: `http://127.0.0.1:${watched.port}` }],
        rewrite: { strip_prefix: "/watched" },
      },
    },
  ],
}, {
  "a client that reads the head of a 64 MiB reply and then nothing is cut off, its slot released":
    async (arena) => {
      await expectCut(arena, `/api/bytes/${ATTACK_BYTES}`, 0);
    },

  "an Upgrade request answered with a plain reply is cut the same way": async (arena) => {
    // The upstream ignores the Upgrade and streams a 64 MiB 200; the reply goes out on the raw
    // socket the gateway took over for the upgrade.
    await watched.serve(async () => {
      await expectCut(
        arena,
        `/watched/bytes/${ATTACK_BYTES}`,
        0,
        "Connection: Upgrade\r\nUpgrade: websocket\r\n",
      );
    });
  },

  "a client reading steadily above min_send_rate receives every byte and is not cut": async (
    arena,
  ) => {
    const before = await arena.gateway.ledger();
    const cutsBefore = await cuts(arena, "send_timeout");
    const conn = await connect(arena);
    try {
      await writeAll(
        conn,
        encoder.encode(
          `GET /api/bytes/${STEADY_BYTES} HTTP/1.1\r\nHost: ${SHOP}\r\nConnection: close\r\n\r\n`,
        ),
      );
      const { head, bodyBytes } = await readHead(conn);
      assert.match(head, new RegExp(`\r\ncontent-length: ${STEADY_BYTES}(\r\n|$)`, "i"), head);
      const paced = await readPaced(conn, STEADY_RATE, { total: STEADY_BYTES - bodyBytes });
      assert.equal(bodyBytes + paced, STEADY_BYTES, "every body byte arrived");
      const rest = await drain(conn, DEADLINE_MS);
      assert.deepEqual(rest, { bytes: 0, closed: true }, "then the connection closed, as asked");
    } finally {
      close(conn);
    }
    const after = await arena.gateway.ledgerWhen((r) => r.outstanding === 0, DEADLINE_MS);
    assert.equal(after.outstanding, 0);
    assert.equal(after.cancelled, before.cancelled, "the reply was not cancelled");
    assert.equal(await cuts(arena, "send_timeout"), cutsBefore);
  },

  "a client reading 8 KiB/s is cut off, and the upstream's connection is closed mid-body": async (
    arena,
  ) => {
    await watched.serve(async (upstreamEnded) => {
      const taken = await expectCut(arena, `/watched/bytes/${ATTACK_BYTES}`, TRICKLE_RATE);
      assert.ok(taken > 0, "the client was reading when it was cut");
      const upstream = await Promise.race([upstreamEnded, pause(DEADLINE_MS)]);
      assert.ok(upstream, "the upstream's connection was closed");
      assert.equal(upstream.complete, false, "before the upstream sent the whole body");
      assert.ok(upstream.written < ATTACK_BYTES);
    });
  },

  "an Upgrade tunnel with no byte either way for tunnel_idle_ms is closed and counted": async (
    arena,
  ) => {
    const cutsBefore = await cuts(arena, "tunnel_idle");
    const conn = await openTunnel(arena);
    try {
      assert.equal(await echo(conn, "hello"), "hello");
      assert.ok((await drain(conn, DEADLINE_MS)).closed, "the quiet tunnel was closed");
    } finally {
      close(conn);
    }
    assert.equal(await cutsWhen(arena, "tunnel_idle", cutsBefore + 1), cutsBefore + 1);
    const after = await arena.gateway.ledgerWhen((r) => r.outstanding === 0, DEADLINE_MS);
    assert.equal(after.outstanding, 0, "the tunnel's slot was released");
  },

  "an Upgrade tunnel that carries a byte every 100 ms outlives several idle periods": async (
    arena,
  ) => {
    const cutsBefore = await cuts(arena, "tunnel_idle");
    const conn = await openTunnel(arena);
    try {
      const until = performance.now() + 3 * TUNNEL_IDLE_MS;
      let rounds = 0;
      while (performance.now() < until) {
        assert.equal(await echo(conn, "."), ".", `the tunnel closed after ${rounds} rounds`);
        rounds++;
        await pause(100);
      }
      assert.equal(await echo(conn, "still here"), "still here");
      const open = await arena.gateway.ledger();
      assert.equal(open.outstanding, 1, "the tunnel holds its slot while it talks");
    } finally {
      close(conn);
    }
    assert.equal(await cuts(arena, "tunnel_idle"), cutsBefore);
  },
});

arenaTest("adversarial: delivery under a strict min_send_rate, without tunnel_idle_ms", {
  edit(config) {
    Object.assign(config.timeouts as Record<string, unknown>, {
      send_ms: SEND_MS,
      min_send_rate: STRICT_MIN_SEND_RATE,
    });
  },
}, {
  "a client taking 1 MiB/s, progress in every window, is cut off when min_send_rate is 8 MiB/s":
    async (arena) => {
      const taken = await expectCut(arena, `/api/bytes/${ATTACK_BYTES}`, PROGRESS_RATE);
      assert.ok(taken > MiB / 2, `the client took only ${taken} bytes before the cut`);
    },

  "a quiet Upgrade tunnel stays open when tunnel_idle_ms is unset": async (arena) => {
    const conn = await openTunnel(arena);
    try {
      assert.equal(await echo(conn, "hello"), "hello");
      await pause(QUIET_MS);
      // Closed meanwhile, the tunnel would answer this with the end of the connection.
      assert.equal(await echo(conn, "still open"), "still open");
      const open = await arena.gateway.ledger();
      assert.equal(open.outstanding, 1, "the tunnel still holds its slot");
    } finally {
      close(conn);
    }
    assert.equal(await cuts(arena, "tunnel_idle"), 0);
  },
});
