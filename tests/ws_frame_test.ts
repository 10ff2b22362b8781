/**
 * The `https_tunnel` transport's WebSocket framing (src/egress/ws_frame.ts) and the stream over it
 * (src/egress/ws_stream.ts): masking, the three length forms, frames split across reads, and the
 * closes — a frame over the limit (1009), an unmasked client frame (1002), a fragment (1002) —
 * and a ping answered with a pong.
 *
 * @module
 */
import assert from "node:assert/strict";
import type { Socket } from "node:net";
import { Duplex } from "node:stream";
import {
  acceptFor,
  closeCodeOf,
  encodeFrame,
  FrameDecoder,
  Opcode,
} from "../src/egress/ws_frame.ts";
import { WebSocketStream } from "../src/egress/ws_stream.ts";

const MASK = Uint8Array.of(0x37, 0xfa, 0x21, 0x3d);

function bytes(length: number): Uint8Array {
  return Uint8Array.from({ length }, (_, i) => (i * 7) & 0xff);
}

Deno.test("acceptFor() gives RFC 6455 §1.3's example answer", () => {
  assert.equal(acceptFor("dGhlIHNhbXBsZSBub25jZQ=="), "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
});

Deno.test("encodeFrame() masks a client's payload as RFC 6455 §5.7's example does", () => {
  const frame = encodeFrame(Opcode.text, new TextEncoder().encode("Hello"), MASK);
  assert.deepEqual(
    [...frame],
    [0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51, 0x58],
  );
  const server = new FrameDecoder({ side: "server", maxPayload: 1024 });
  const { frames } = server.push(frame);
  assert.equal(new TextDecoder().decode(frames[0].payload), "Hello");
});

Deno.test("FrameDecoder reads the 7-bit, 16-bit and 64-bit length forms", () => {
  for (const [length, head] of [[125, 2], [126, 4], [65_535, 4], [65_536, 10]] as const) {
    const payload = bytes(length);
    const frame = encodeFrame(Opcode.binary, payload);
    assert.equal(frame.length, head + length, `${length} bytes take a ${head}-byte head`);
    const decoder = new FrameDecoder({ side: "client", maxPayload: 1 << 20 });
    const { frames, violation } = decoder.push(frame);
    assert.equal(violation, undefined);
    assert.deepEqual(frames[0].payload, payload);
    const masked = encodeFrame(Opcode.binary, payload, MASK);
    const server = new FrameDecoder({ side: "server", maxPayload: 1 << 20 });
    assert.deepEqual(server.push(masked).frames[0].payload, payload, `${length} masked`);
  }
});

Deno.test("FrameDecoder joins a frame split across reads, byte by byte, and two frames in one read", () => {
  const first = encodeFrame(Opcode.binary, bytes(300), MASK);
  const second = encodeFrame(Opcode.ping, Uint8Array.of(1, 2, 3), MASK);
  const decoder = new FrameDecoder({ side: "server", maxPayload: 1024 });
  const seen = [];
  for (const byte of first) seen.push(...decoder.push(Uint8Array.of(byte)).frames);
  assert.equal(seen.length, 1);
  assert.deepEqual(seen[0].payload, bytes(300));
  const both = new Uint8Array([...first, ...second]);
  const { frames } = decoder.push(both);
  assert.deepEqual(frames.map((f) => f.opcode), [Opcode.binary, Opcode.ping]);
  assert.deepEqual(frames[1].payload, Uint8Array.of(1, 2, 3));
});

Deno.test("FrameDecoder refuses an oversize frame (1009) before its payload, an unmasked client frame and a fragment (1002)", () => {
  const decoder = new FrameDecoder({ side: "server", maxPayload: 1024 });
  // The head alone says 2 MiB: refused without waiting for the payload.
  const head = encodeFrame(Opcode.binary, new Uint8Array(2 << 20), MASK).subarray(0, 14);
  assert.equal(decoder.push(head).violation?.code, 1009);
  assert.equal(decoder.push(encodeFrame(Opcode.binary, bytes(1), MASK)).violation?.code, 1009);

  const unmasked = new FrameDecoder({ side: "server", maxPayload: 1024 });
  const refused = unmasked.push(encodeFrame(Opcode.binary, bytes(4)));
  assert.deepEqual(refused, {
    frames: [],
    violation: { code: 1002, reason: "A client's frame is not masked" },
  });
  const client = new FrameDecoder({ side: "client", maxPayload: 1024 });
  assert.equal(client.push(encodeFrame(Opcode.binary, bytes(4), MASK)).violation?.code, 1002);

  const fragment = encodeFrame(Opcode.binary, bytes(4), MASK);
  fragment[0] &= 0x7f; // FIN clear
  const fragments = new FrameDecoder({ side: "server", maxPayload: 1024 });
  assert.equal(fragments.push(fragment).violation?.reason, "Fragmented messages are not accepted");
});

/** A transport that records what the stream writes and lets a test feed it bytes. */
class Wire extends Duplex {
  readonly written: Uint8Array[] = [];
  override _read(): void {}
  override _write(chunk: Uint8Array, _encoding: string, callback: () => void): void {
    this.written.push(new Uint8Array(chunk));
    callback();
  }
  /** Frames written so far, decoded as a client reads a server's. */
  frames(side: "client" | "server") {
    const decoder = new FrameDecoder({ side, maxPayload: 1 << 20 });
    return this.written.flatMap((chunk) => decoder.push(chunk).frames);
  }
  setNoDelay() {}
}

function serverStream(maxFrameBytes = 1024): { stream: WebSocketStream; wire: Wire } {
  const wire = new Wire();
  const stream = new WebSocketStream({ side: "server", maxFrameBytes });
  stream.on("error", () => {});
  stream.attach(wire as unknown as Socket);
  return { stream, wire };
}

Deno.test("WebSocketStream answers a ping with a pong and hands binary payloads on as data", async () => {
  const { stream, wire } = serverStream();
  const received: number[] = [];
  stream.on("data", (chunk: Uint8Array) => received.push(...chunk));
  wire.push(encodeFrame(Opcode.ping, Uint8Array.of(9, 8), MASK));
  wire.push(encodeFrame(Opcode.binary, Uint8Array.of(1, 2, 3), MASK));
  await new Promise((resolve) => setTimeout(resolve, 10));
  stream.write(Uint8Array.of(4, 5));
  await new Promise((resolve) => setTimeout(resolve, 10));
  const frames = wire.frames("client");
  assert.deepEqual(frames.map((f) => [f.opcode, [...f.payload]]), [
    [Opcode.pong, [9, 8]],
    [Opcode.binary, [4, 5]],
  ]);
  assert.deepEqual(received, [1, 2, 3]);
  assert.equal(stream.bytesRead, 3);
  stream.destroy();
});

Deno.test("WebSocketStream closes with 1009 on an oversize frame and with 1002 on an unmasked one", async () => {
  for (
    const [frame, code] of [
      [encodeFrame(Opcode.binary, bytes(2048), MASK), 1009],
      [encodeFrame(Opcode.binary, bytes(8)), 1002],
    ] as const
  ) {
    const { stream, wire } = serverStream();
    const received: number[] = [];
    stream.on("data", (chunk: Uint8Array) => received.push(...chunk));
    wire.push(frame);
    await new Promise((resolve) => setTimeout(resolve, 10));
    const frames = wire.frames("client");
    assert.equal(frames.length, 1);
    assert.equal(frames[0].opcode, Opcode.close);
    assert.equal(closeCodeOf(frames[0].payload), code);
    assert.deepEqual(received, [], "nothing of the refused frame was passed on");
    assert.equal(stream.wsClose?.refused, true);
    stream.destroy();
  }
});

Deno.test("WebSocketStream on the client side masks what it writes", async () => {
  const wire = new Wire();
  const stream = new WebSocketStream({ side: "client" });
  stream.write(Uint8Array.of(1, 2, 3)); // waits for the transport
  stream.attach(wire as unknown as Socket);
  await new Promise((resolve) => setTimeout(resolve, 10));
  assert.equal(wire.written.length, 1);
  assert.equal(wire.written[0][1] & 0x80, 0x80, "the mask bit is set");
  assert.deepEqual([...wire.frames("server")[0].payload], [1, 2, 3]);
  stream.destroy();
});
