/**
 * Adversarial delivery, what a cut leaves behind: a client reading a large reply at 256 B/s is cut
 * off under `timeouts.send_ms` and `timeouts.min_send_rate`, and from then on it receives no more of
 * the reply than was already in its own receive buffer. The kernel's send buffer held megabytes of
 * the reply for it (about 4 MB on loopback); closed gracefully, the kernel went on sending all of
 * that to the cut client (measured: 4.1 MB after the cut). The gateway resets the connection
 * instead, so the kernel drops it.
 *
 * @module
 */
import assert from "node:assert/strict";
import { writeAll } from "../fixtures/http_client.ts";
import { arenaTest, pause, SHOP } from "./arena.ts";

const MiB = 1024 * 1024;
const SEND_MS = 1000;
const MIN_SEND_RATE = 1024;
/** The reply: far more than the kernel's buffers take, so the watch sees the reader. */
const REPLY_BYTES = 64 * MiB;
/** The slow reader's pace: a quarter of the minimum rate. */
const SLOW_RATE = 256;
/** How long the case waits for the gateway to act (about two send windows, with room). */
const DEADLINE_MS = 10_000;
/**
 * Bytes a cut client may still read: what its own receive buffer held (about 128 KiB on loopback
 * for a reader that never drained it), with room; the kernel's send buffer held 4 MB more.
 */
const AFTER_CUT_LIMIT = MiB;

/** Reads the response head; the body bytes that came with it. */
async function readHead(conn: Deno.Conn): Promise<number> {
  const buffer = new Uint8Array(4096);
  let text = "";
  for (;;) {
    const n = await conn.read(buffer);
    if (n === null) throw new Error(`closed before a response head: ${JSON.stringify(text)}`);
    text += String.fromCharCode(...buffer.subarray(0, n));
    const end = text.indexOf("\r\n\r\n");
    if (end !== -1) {
      assert.match(text.slice(0, end), /^HTTP\/1\.1 200 /);
      return text.length - end - 4;
    }
  }
}

/** Reads 256 bytes at a time at `bytesPerSecond` until `stop()` holds or the connection ends. */
async function readSlowly(
  conn: Deno.Conn,
  bytesPerSecond: number,
  stop: () => boolean,
): Promise<number> {
  const buffer = new Uint8Array(256);
  const started = performance.now();
  let received = 0;
  while (!stop()) {
    if (received >= (performance.now() - started) / 1000 * bytesPerSecond) {
      await pause(50);
      continue;
    }
    const n = await conn.read(buffer).catch(() => null);
    if (n === null) break;
    received += n;
  }
  return received;
}

/** Reads as fast as bytes come until the connection ends (or the deadline): bytes, and how. */
async function drain(conn: Deno.Conn): Promise<{ bytes: number; ended: string }> {
  const buffer = new Uint8Array(64 * 1024);
  let bytes = 0;
  const timer = setTimeout(() => conn.close(), DEADLINE_MS);
  try {
    for (;;) {
      const n = await conn.read(buffer);
      if (n === null) return { bytes, ended: "end of stream" };
      bytes += n;
    }
  } catch (error) {
    return { bytes, ended: (error as Error).name };
  } finally {
    clearTimeout(timer);
  }
}

arenaTest("adversarial: a cut reply leaves nothing in the kernel for its client", {
  edit(config) {
    Object.assign(config.timeouts as Record<string, unknown>, {
      send_ms: SEND_MS,
      min_send_rate: MIN_SEND_RATE,
    });
  },
}, {
  "a 256 B/s reader is cut off, then receives only what its own buffer held": async (arena) => {
    const before = await arena.gateway.ledger();
    const conn = await Deno.connect({ hostname: "127.0.0.1", port: arena.ports.public });
    try {
      await writeAll(
        conn,
        new TextEncoder().encode(`GET /api/bytes/${REPLY_BYTES} HTTP/1.1\r\nHost: ${SHOP}\r\n\r\n`),
      );
      const withHead = await readHead(conn);
      let cut = false;
      const reading = readSlowly(conn, SLOW_RATE, () => cut);
      const after = await arena.gateway.ledgerWhen(
        (r) => r.outstanding === 0 && r.cancelled > before.cancelled,
        DEADLINE_MS,
      );
      cut = true;
      const slowly = await reading;
      assert.equal(after.cancelled, before.cancelled + 1, "the reply was cut, its slot cancelled");
      assert.equal(after.outstanding, 0);
      const rest = await drain(conn);
      assert.ok(
        rest.bytes < AFTER_CUT_LIMIT,
        `after the cut the client still received ${rest.bytes} bytes (${rest.ended}); it had ` +
          `read ${withHead + slowly} before`,
      );
      assert.notEqual(rest.ended, "TimedOut", "the connection ended");
    } finally {
      try {
        conn.close();
      } catch { /* closed */ }
    }
  },
});
