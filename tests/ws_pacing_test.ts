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

Deno.test("WebSocketStream answers every ping of a peer that reads", async () => {
  const wire = new HeldWire();
  wire.release();
  const stream = new WebSocketStream({ side: "server", controlBoundBytes: 1024 });
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
  const stream = new WebSocketStream({ side: "server", controlBoundBytes: 1024 });
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
