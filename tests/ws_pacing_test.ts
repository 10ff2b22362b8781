/**
 * Control frames are paced by the peer's reading (src/egress/ws_pacing.ts; issue 31, finding 4),
 * over in-process transports that stand in for a peer that reads, one that never does, and a TLS
 * socket that goes on reading while paused (Deno 2.9.6's `node:tls`).
 */
import assert from "node:assert/strict";
import type { Socket } from "node:net";
import { Duplex } from "node:stream";
import { closeCodeOf, encodeFrame, FrameDecoder, Opcode } from "../src/egress/ws_frame.ts";
import { WebSocketStream } from "../src/egress/ws_stream.ts";

const MASK = Uint8Array.of(1, 2, 3, 4);

/** A transport whose writes complete only when {@link release}d (a peer that does not read). */
class HeldWire extends Duplex {
  readonly written: Uint8Array[] = [];
  readonly #callbacks: (() => void)[] = [];
  #flowing = false;
  override _read(): void {}
  override _write(chunk: Uint8Array, _encoding: string, callback: () => void): void {
    this.written.push(new Uint8Array(chunk));
    if (this.#flowing) return callback();
    this.#callbacks.push(callback);
  }
  /** The peer reads from now on: every held write completes. */
  release(): void {
    this.#flowing = true;
    for (const callback of this.#callbacks.splice(0)) callback();
  }
  /** The server's frames written so far, as a client decodes them. */
  frames() {
    const decoder = new FrameDecoder({ side: "client", maxPayload: 1 << 20 });
    return this.written.flatMap((chunk) => decoder.push(chunk).frames);
  }
}

/** `count` masked 125-byte pings, each starting with its index (two bytes), as one chunk. */
function pings(count: number): Uint8Array {
  const frames = Array.from({ length: count }, (_, i) => {
    const payload = new Uint8Array(125);
    payload.set([i >> 8, i & 0xff]);
    return encodeFrame(Opcode.ping, payload, MASK);
  });
  const chunk = new Uint8Array(frames.reduce((n, f) => n + f.length, 0));
  let at = 0;
  for (const frame of frames) chunk.set(frame, (at += frame.length) - frame.length);
  return chunk;
}

/** The stream's close, read anew (an assertion on it does not narrow the next read). */
const closeOf = (stream: WebSocketStream) => stream.wsClose;

const tick = (ms = 10) => new Promise((resolve) => setTimeout(resolve, ms));

/** A budget no test of the pacing reaches: those tests send thousands of pings at once. */
const UNBUDGETED = { per_second: 1e6, burst: 1e6 };

Deno.test("WebSocketStream answers every ping of a peer that reads", async () => {
  const wire = new HeldWire();
  wire.release();
  const stream = new WebSocketStream({
    side: "server",
    controlBoundBytes: 1024,
    controlBudget: UNBUDGETED,
  });
  stream.attach(wire as unknown as Socket);
  wire.push(pings(300));
  await tick();
  const pongs = wire.frames().filter((f) => f.opcode === Opcode.pong);
  assert.equal(pongs.length, 300);
  assert.equal(wire.isPaused(), false);
  stream.destroy();
});

Deno.test("WebSocketStream owes a peer that does not read only its latest ping, and reads it no further until it drains", async () => {
  const wire = new HeldWire();
  const stream = new WebSocketStream({
    side: "server",
    controlBoundBytes: 1024,
    controlBudget: UNBUDGETED,
  });
  stream.on("error", () => {});
  stream.attach(wire as unknown as Socket);
  wire.push(pings(2000));
  await tick();
  const queued = wire.writableLength;
  const bound = Math.max(1024, wire.writableHighWaterMark) + 127; // a pong past the mark
  assert.ok(queued <= bound, `pongs held for the peer: ${queued} bytes, bound ${bound}`);
  assert.equal(wire.isPaused(), true, "the transport is not read while a pong is owed");
  wire.release();
  await tick();
  const pongs = wire.frames().filter((f) => f.opcode === Opcode.pong);
  const most = Math.ceil(bound / 127) + 1; // those that fit under the bound, and the latest
  assert.ok(pongs.length <= most, `${pongs.length} pongs for 2000 pings (at most ${most})`);
  assert.deepEqual(
    [...pongs.at(-1)!.payload.subarray(0, 2)],
    [1999 >> 8, 1999 & 0xff],
    "the latest",
  );
  assert.equal(wire.isPaused(), false, "read again once drained");
  stream.destroy();
});

Deno.test("WebSocketStream closes with 1008 a peer that leaves a pong owed past pongDeadlineMs", async () => {
  const wire = new HeldWire();
  const stream = new WebSocketStream({
    side: "server",
    controlBoundBytes: 1024,
    pongDeadlineMs: 30,
    controlBudget: UNBUDGETED,
  });
  stream.on("error", () => {});
  stream.attach(wire as unknown as Socket);
  wire.push(pings(2000));
  await tick(10);
  assert.equal(stream.wsClose, undefined, "not yet");
  await tick(80);
  assert.equal(closeOf(stream)?.code, 1008);
  assert.equal(wire.destroyed, true, "the transport is ended at once");
});

Deno.test("WebSocketStream closes with 1008 when data nobody takes passes maxBufferedBytes on a transport that reads while paused", async () => {
  const wire = new HeldWire();
  wire.release();
  const stream = new WebSocketStream({ side: "server", maxBufferedBytes: 256 * 1024 });
  stream.on("error", () => {});
  stream.attach(wire as unknown as Socket);
  const frame = encodeFrame(Opcode.binary, new Uint8Array(32 * 1024), MASK);
  for (let i = 0; i < 7; i++) wire.emit("data", frame); // 224 KiB: under the cap
  assert.equal(stream.wsClose, undefined);
  for (let i = 0; i < 2; i++) wire.emit("data", frame); // what pause() should have stopped
  assert.equal(closeOf(stream)?.code, 1008);
  const close = wire.frames().find((f) => f.opcode === Opcode.close)!;
  assert.equal(closeCodeOf(close.payload), 1008);
  await tick();
  assert.equal(wire.destroyed, true);
});

/** `count` masked frames of `opcode` with `payload`, as one chunk. */
function framesOf(opcode: 0x2 | 0x9 | 0xa, payload: Uint8Array, count: number): Uint8Array {
  const frame = encodeFrame(opcode, payload, MASK);
  const chunk = new Uint8Array(frame.length * count);
  for (let i = 0; i < count; i++) chunk.set(frame, i * frame.length);
  return chunk;
}

for (
  const [kind, opcode, payload] of [
    ["pongs nobody asked for", Opcode.pong, new Uint8Array(125)],
    ["pings", Opcode.ping, new Uint8Array(125)],
    ["empty binary frames", Opcode.binary, new Uint8Array(0)],
  ] as const
) {
  Deno.test(`WebSocketStream closes with 1008 a peer over its budget of ${kind}, and reads it no further`, async () => {
    const wire = new HeldWire();
    wire.release();
    const budget = { per_second: 1, burst: 10 };
    const stream = new WebSocketStream({ side: "server", controlBudget: budget });
    stream.on("error", () => {});
    stream.attach(wire as unknown as Socket);
    wire.push(framesOf(opcode, payload, 10)); // the burst: within the budget
    await tick();
    assert.equal(stream.wsClose, undefined, "at the budget");
    wire.push(framesOf(opcode, payload, 1)); // one over it
    await tick();
    assert.equal(closeOf(stream)?.code, 1008);
    assert.equal(closeOf(stream)?.reason, "Too many frames without data");
    const close = wire.frames().find((f) => f.opcode === Opcode.close)!;
    assert.equal(closeCodeOf(close.payload), 1008);
    assert.equal(wire.isPaused() || wire.destroyed, true, "read no further");
    stream.destroy();
  });
}

Deno.test("WebSocketStream does not count data frames against the budget", async () => {
  const wire = new HeldWire();
  wire.release();
  const stream = new WebSocketStream({
    side: "server",
    controlBudget: { per_second: 1, burst: 1 },
  });
  stream.on("error", () => {});
  stream.on("data", () => {});
  stream.attach(wire as unknown as Socket);
  wire.push(framesOf(Opcode.binary, Uint8Array.of(7), 50));
  await tick();
  assert.equal(stream.wsClose, undefined);
  stream.destroy();
});
