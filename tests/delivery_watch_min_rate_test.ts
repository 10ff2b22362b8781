/**
 * Rule 6 of issue 33, for bounded delivery (src/server/delivery_watch.ts, `timeouts.send_ms` and
 * `timeouts.min_send_rate`): a client that takes a reply's bytes steadily — something in every
 * window — but below `min_send_rate` is cut off, within a bounded time, as a `send_timeout`; a
 * client steadily above the rate is not. The minimum rate is its own rule beside "some progress in
 * every `send_ms` window": a reader that stalls whole windows is cut by the progress rule alone
 * (even with `min_send_rate: 0`), so a test with such a reader cannot tell whether the rate is
 * enforced at all.
 *
 * Two levels. The watch's contract in process, with an injected clock and a socket whose reader
 * is exact to the byte: the 512 bytes every 100 ms against a minimum of 16384 B/s, both
 * sides of the rate to the byte, and which rule cuts which reader. Then the real gateway under its
 * derived flags (the adversarial arena): a client reading 1 MiB/s of a large reply in small reads,
 * never pausing long, against a minimum of 4 MiB/s, and one reading 16 MiB/s. On loopback the
 * kernel's buffers (~4 MB) let the gateway see a reader's progress only in steps of about 1.4 MB
 * (tests/adversarial/delivery_test.ts), so `send_ms` is 3 s: long enough that a 1 MiB/s reader
 * shows progress in every window, and only the rate can cut it.
 *
 * @module
 */
import assert from "node:assert/strict";
import { DeliveryWatch, type SendingSocket } from "../src/server/delivery_watch.ts";
import { request, writeAll } from "./fixtures/http_client.ts";
import { type Arena, SHOP, withArena } from "./adversarial/arena.ts";

// ---------------------------------------------------------------------------------------------
// The watch's contract, exact

/** A socket whose client takes `takes(step)` bytes at each 100 ms step, always with bytes waiting. */
class PacedSocket implements SendingSocket {
  taken = 0;
  resets = 0;
  readonly writableLength = 1 << 20;

  get bytesWritten(): number {
    return this.taken + this.writableLength;
  }

  resetAndDestroy(): void {
    this.resets++;
  }
}

const STEP_MS = 100;

/**
 * Runs a watch over one paced reader for `ms`, sweeping every step (the watch judges a window by
 * the clock, not by how often it is swept).
 *
 * @returns when the reply was cut (ms from the start), or undefined
 */
function cutAfter(
  limits: { sendMs: number; minSendRate: number },
  takes: (step: number) => number,
  ms: number,
): { at?: number; resets: number } {
  let now = 1_000;
  const start = now;
  const watch = new DeliveryWatch(limits, () => now);
  const socket = new PacedSocket();
  let at: number | undefined;
  watch.watch(() => socket, () => at ??= now - start);
  try {
    for (let step = 0; now - start <= ms && at === undefined; step++) {
      watch.sweep();
      now += STEP_MS;
      socket.taken += takes(step);
    }
  } finally {
    watch.stop();
  }
  return { at, resets: socket.resets };
}

const SEND_MS = 1000;
const MIN_RATE = 16_384;
/** The reader: 512 bytes every 100 ms, 5,120 B/s, something in every step. */
const SLOW = () => 512;
/** A reader that stalls whole windows: 8 KiB at once every three windows. */
const STALLING = (step: number) => step % 30 === 0 ? 8192 : 0;

Deno.test(
  "rule 6: min_send_rate cuts a reader taking 512 B every 100 ms under 16384 B/s, after one send_ms window; progress alone would not",
  () => {
    const slow = cutAfter({ sendMs: SEND_MS, minSendRate: MIN_RATE }, SLOW, 10 * SEND_MS);
    // Judged once a window has passed since bytes started waiting: at the first sweep after it.
    assert.ok(slow.at !== undefined, "the slow reader was never cut");
    assert.ok(slow.at >= SEND_MS && slow.at <= SEND_MS + 2 * STEP_MS, `cut at ${slow.at} ms`);
    assert.equal(slow.resets, 1, "the connection is reset, so the kernel drops what it holds");
    // The reason: the rate. The same reader with only the progress rule (rate 0) is never cut.
    const progressOnly = cutAfter({ sendMs: SEND_MS, minSendRate: 0 }, SLOW, 10 * SEND_MS);
    assert.equal(progressOnly.at, undefined, "progress in every window is not what cut it");
  },
);

Deno.test(
  "rule 6: min_send_rate is a floor to the byte: 16,390 B/s steadily is never cut, 16,380 B/s is",
  () => {
    // 1639 and 1638 bytes per 100 ms: just above and just below 16384 B/s over each window.
    const above = cutAfter({ sendMs: SEND_MS, minSendRate: MIN_RATE }, () => 1639, 20 * SEND_MS);
    assert.equal(above.at, undefined, `a reader above the rate was cut at ${above.at} ms`);
    const below = cutAfter({ sendMs: SEND_MS, minSendRate: MIN_RATE }, () => 1638, 20 * SEND_MS);
    assert.ok(below.at !== undefined && below.at <= SEND_MS + 2 * STEP_MS, `cut at ${below.at}`);
    // Far above, for a long time: never.
    const fast = cutAfter({ sendMs: SEND_MS, minSendRate: MIN_RATE }, () => 4096, 60 * SEND_MS);
    assert.equal(fast.at, undefined);
  },
);

Deno.test(
  "rule 6: a reader that stalls whole windows is cut by the progress rule, with or without a minimum rate",
  () => {
    for (const minSendRate of [0, MIN_RATE]) {
      const stalled = cutAfter({ sendMs: SEND_MS, minSendRate }, STALLING, 10 * SEND_MS);
      assert.ok(stalled.at !== undefined, `min_send_rate ${minSendRate}: never cut`);
      assert.ok(stalled.at <= 2 * SEND_MS + 2 * STEP_MS, `cut at ${stalled.at} ms`);
    }
  },
);

// ---------------------------------------------------------------------------------------------
// The real gateway

const MiB = 1024 * 1024;
const GATEWAY_SEND_MS = 3000;
const GATEWAY_MIN_RATE = 4 * MiB;
/** A quarter of the minimum: a step of the kernel's ~1.4 MB comes about every 1.4 s. */
const SLOW_RATE = MiB;
/** Four times the minimum. */
const FAST_RATE = 16 * MiB;
/** Far more than the buffers hold, and more than the fast reader takes in two windows. */
const BODY_BYTES = 80 * MiB;
/** The sweep runs every quarter of send_ms; a cut comes within a window and two sweeps of it. */
const CUT_BOUND_MS = GATEWAY_SEND_MS + 2 * (GATEWAY_SEND_MS / 4) + 3000;

/** `portcullis_responses_cut_total` for the public lane and `send_timeout`. */
async function sendTimeouts(arena: Arena): Promise<number> {
  const metrics = (await request(arena.ports.local_health, { path: "/metrics" })).body;
  const sample = /^portcullis_responses_cut_total\{lane="public",reason="send_timeout"\} (\d+)$/m
    .exec(metrics);
  assert.ok(sample, "/metrics counts send_timeout cuts");
  return Number(sample[1]);
}

const LATIN1 = new TextDecoder("latin1");

/** What a paced reader saw: body bytes, the longest pause between reads, how it ended, when. */
interface Reading {
  readonly bytes: number;
  readonly longestGapMs: number;
  readonly ended: "complete" | "cut" | "bound";
  readonly ms: number;
}

/**
 * Asks for a {@link BODY_BYTES} reply and reads it at `rate` in reads of a fiftieth of a second's
 * worth, until it is complete, the gateway cuts it, or `boundMs` passes.
 */
async function readAt(arena: Arena, rate: number, boundMs: number): Promise<Reading> {
  const conn = await Deno.connect({ hostname: "127.0.0.1", port: arena.ports.public });
  try {
    const head =
      `GET /api/bytes/${BODY_BYTES} HTTP/1.1\r\nHost: ${SHOP}\r\nConnection: close\r\n\r\n`;
    await writeAll(conn, new TextEncoder().encode(head));
    const size = Math.max(1024, Math.floor(rate / 50));
    const buffer = new Uint8Array(size);
    const started = performance.now();
    let last = started, longestGapMs = 0, received = 0, headEnd = -1, text = "";
    for (;;) {
      const now = performance.now();
      if (now - started > boundMs) {
        return { bytes: received, longestGapMs, ended: "bound", ms: now - started };
      }
      const due = (now - started) / 1000 * rate;
      if (headEnd >= 0 && received >= due) {
        await new Promise((resolve) =>
          setTimeout(resolve, Math.max(2, (received - due) / rate * 1000))
        );
        continue;
      }
      let n: number | null;
      try {
        n = await conn.read(buffer);
      } catch {
        n = null; // reset by the gateway
      }
      const at = performance.now();
      if (n === null) {
        const ended = received === BODY_BYTES ? "complete" : "cut";
        return { bytes: received, longestGapMs, ended, ms: at - started };
      }
      longestGapMs = Math.max(longestGapMs, at - last);
      last = at;
      if (headEnd < 0) {
        text += LATIN1.decode(buffer.subarray(0, n)); // the head is ASCII; one char per byte
        headEnd = text.indexOf("\r\n\r\n");
        if (headEnd >= 0) {
          assert.match(text, /^HTTP\/1\.1 200 /);
          received = text.length - headEnd - 4;
        }
      } else received += n;
      if (received === BODY_BYTES) {
        return { bytes: received, longestGapMs, ended: "complete", ms: at - started };
      }
    }
  } finally {
    try {
      conn.close();
    } catch { /* closed */ }
  }
}

Deno.test(
  "rule 6: the gateway cuts a client steadily reading 1 MiB/s under a 4 MiB/s min_send_rate as send_timeout, and not one reading 16 MiB/s",
  async () => {
    await withArena({
      edit(config) {
        Object.assign(config.timeouts as Record<string, unknown>, {
          send_ms: GATEWAY_SEND_MS,
          min_send_rate: GATEWAY_MIN_RATE,
        });
      },
    }, async (arena) => {
      const cutsBefore = await sendTimeouts(arena);
      const slow = await readAt(arena, SLOW_RATE, CUT_BOUND_MS + 5000);
      assert.equal(slow.ended, "cut", `the slow reader: ${JSON.stringify(slow)}`);
      assert.ok(slow.ms <= CUT_BOUND_MS, `cut after ${Math.round(slow.ms)} ms`);
      // Steady: it never paused anywhere near a window, so progress alone would not have cut it.
      assert.ok(slow.longestGapMs < GATEWAY_SEND_MS / 3, `paused ${slow.longestGapMs} ms`);
      assert.ok(slow.bytes > 2 * MiB, `it took ${slow.bytes} bytes`);
      const after = await arena.gateway.ledgerWhen((r) => r.outstanding === 0);
      assert.equal(after.outstanding, 0, "the slot was released");
      assert.equal(await sendTimeouts(arena), cutsBefore + 1, "counted as send_timeout");

      // The other side: steadily above the rate, every byte arrives.
      const fast = await readAt(arena, FAST_RATE, 30_000);
      assert.equal(fast.ended, "complete", `the fast reader: ${JSON.stringify(fast)}`);
      assert.equal(await sendTimeouts(arena), cutsBefore + 1, "no second cut");
    });
  },
);
