/**
 * WebSocket frames (RFC 6455 §5) for the `https_tunnel` transport: encoding, and an incremental
 * decoder that refuses what the tunnel never needs. Both ends are Portcullis (the edge's dial in
 * `tunnel_dial.ts`, the hub's endpoint in `hub/https_tunnel.ts`), so the subset is small: whole
 * messages only (a fragment — FIN clear, or a continuation frame — is refused), text, binary,
 * close, ping and pong; frames from a client must be masked and frames from a server must not be
 * (§5.1); no extension is negotiated, so a reserved bit set is a protocol error; a frame whose
 * payload is larger than the decoder's limit is refused before its payload is read.
 *
 * Hand-written, not an npm package: Deno's global `WebSocket` client cannot present a client
 * certificate, node has no WebSocket server, and the packages that have both (`ws`) bring their
 * own HTTP handling and extensions for what is here ~150 lines of framing the tests pin down.
 *
 * @module
 */
import { createHash } from "node:crypto";

/** The opcodes the tunnel speaks (RFC 6455 §5.2); continuation (0) is refused. */
export const Opcode = {
  text: 0x1,
  binary: 0x2,
  close: 0x8,
  ping: 0x9,
  pong: 0xa,
} as const;

/** One of {@link Opcode}'s values. */
export type OpcodeValue = typeof Opcode[keyof typeof Opcode];

/** Close codes used by the tunnel (RFC 6455 §7.4.1). */
export const CloseCode = {
  normal: 1000,
  goingAway: 1001,
  protocolError: 1002,
  unsupportedData: 1003,
  policyViolation: 1008,
  tooBig: 1009,
} as const;

/** A decoded frame: FIN was set (fragments are refused), payload unmasked. */
export interface Frame {
  readonly opcode: OpcodeValue;
  readonly payload: Uint8Array;
}

/** Why a stream of frames was refused: the close code to send and a reason. */
export interface FrameViolation {
  readonly code: number;
  readonly reason: string;
}

/** The GUID RFC 6455 §1.3 appends to `Sec-WebSocket-Key` before hashing. */
const ACCEPT_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

/**
 * The `Sec-WebSocket-Accept` value for a `Sec-WebSocket-Key` (RFC 6455 §4.2.2 item 5.4).
 *
 * @example
 * ```ts
 * import { acceptFor } from "./ws_frame.ts";
 * acceptFor("dGhlIHNhbXBsZSBub25jZQ=="); // "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
 * ```
 */
export function acceptFor(key: string): string {
  return createHash("sha1").update(key + ACCEPT_GUID).digest("base64");
}

/** True when `key` is a valid `Sec-WebSocket-Key`: 16 bytes in base64 (RFC 6455 §4.1 item 7). */
export function isWebSocketKey(key: string | undefined): boolean {
  return key !== undefined && /^[A-Za-z0-9+/]{22}==$/.test(key);
}

/**
 * Encodes one final frame.
 *
 * @param opcode what the frame carries
 * @param payload its bytes (a control frame takes at most 125)
 * @param mask a 4-byte masking key (a client's frames), or none (a server's)
 * @throws {RangeError} when a control frame's payload is longer than 125 bytes
 * @example
 * ```ts
 * import { encodeFrame, Opcode } from "./ws_frame.ts";
 * encodeFrame(Opcode.binary, Uint8Array.of(1, 2)); // Uint8Array [0x82, 0x02, 1, 2]
 * ```
 */
export function encodeFrame(
  opcode: OpcodeValue,
  payload: Uint8Array,
  mask?: Uint8Array,
): Uint8Array {
  const length = payload.length;
  if (opcode >= 0x8 && length > 125) {
    throw new RangeError(`Control frame payload of ${length} bytes is longer than 125`);
  }
  const extra = length < 126 ? 0 : length < 0x10000 ? 2 : 8;
  const head = 2 + extra + (mask ? 4 : 0);
  const frame = new Uint8Array(head + length);
  frame[0] = 0x80 | opcode;
  frame[1] = (mask ? 0x80 : 0) | (extra === 0 ? length : extra === 2 ? 126 : 127);
  const view = new DataView(frame.buffer);
  if (extra === 2) view.setUint16(2, length);
  if (extra === 8) view.setBigUint64(2, BigInt(length));
  if (!mask) {
    frame.set(payload, head);
    return frame;
  }
  frame.set(mask.subarray(0, 4), head - 4);
  for (let i = 0; i < length; i++) frame[head + i] = payload[i] ^ mask[i & 3];
  return frame;
}

/** A close frame's payload: the code, then a UTF-8 reason cut to fit 125 bytes. */
export function closePayload(code: number, reason = ""): Uint8Array {
  const text = new TextEncoder().encode(reason).subarray(0, 123);
  const payload = new Uint8Array(2 + text.length);
  new DataView(payload.buffer).setUint16(0, code);
  payload.set(text, 2);
  return payload;
}

/** The code of a close frame's payload (1005, "no status", when it carries none). */
export function closeCodeOf(payload: Uint8Array): number {
  return payload.length >= 2 ? (payload[0] << 8) | payload[1] : 1005;
}

/** What a decoder accepts. */
export interface DecoderOptions {
  /** `"server"`: frames come from a client and must be masked; `"client"`: must not be. */
  readonly side: "server" | "client";
  /** The largest payload accepted, in bytes. */
  readonly maxPayload: number;
}

/**
 * Reads frames from bytes as they arrive, in any split. After a violation it accepts nothing.
 *
 * @example
 * ```ts
 * import { FrameDecoder } from "./ws_frame.ts";
 * const decoder = new FrameDecoder({ side: "client", maxPayload: 1024 });
 * decoder.push(Uint8Array.of(0x82, 0x01)); // { frames: [] } (the payload has not arrived)
 * decoder.push(Uint8Array.of(7)); // { frames: [{ opcode: 2, payload: Uint8Array [7] }] }
 * ```
 */
export class FrameDecoder {
  readonly #options: DecoderOptions;
  #buffer: Uint8Array = new Uint8Array(0);
  #failed?: FrameViolation;

  /** @param options which side decodes, and the payload limit */
  constructor(options: DecoderOptions) {
    this.#options = options;
  }

  /** Bytes taken but not yet returned as a frame (a frame's part still arriving). */
  get buffered(): number {
    return this.#buffer.length;
  }

  /**
   * Takes the next bytes.
   *
   * @returns every whole frame they complete, and the violation that stopped decoding, if any
   */
  push(chunk: Uint8Array): { frames: Frame[]; violation?: FrameViolation } {
    const frames: Frame[] = [];
    if (this.#failed) return { frames, violation: this.#failed };
    this.#buffer = this.#buffer.length === 0 ? chunk : concat(this.#buffer, chunk);
    while (this.#buffer.length >= 2) {
      const next = this.#next();
      if (next === undefined) break;
      if ("code" in next) {
        this.#failed = next;
        this.#buffer = new Uint8Array(0);
        return { frames, violation: next };
      }
      frames.push(next);
    }
    return { frames };
  }

  /** The first whole frame of the buffer (consumed), a violation, or none yet. */
  #next(): Frame | FrameViolation | undefined {
    const buffer = this.#buffer;
    const [first, second] = buffer;
    const fin = (first & 0x80) !== 0;
    const opcode = first & 0x0f;
    const masked = (second & 0x80) !== 0;
    if ((first & 0x70) !== 0) return protocol("Reserved bits set without an extension");
    if (!isOpcode(opcode)) {
      return opcode === 0 || !fin
        ? protocol("Fragmented messages are not accepted")
        : protocol(`Unknown opcode ${opcode}`);
    }
    if (!fin) return protocol("Fragmented messages are not accepted");
    if (masked !== (this.#options.side === "server")) {
      return protocol(masked ? "A server's frame is masked" : "A client's frame is not masked");
    }
    const short = second & 0x7f;
    const extra = short < 126 ? 0 : short === 126 ? 2 : 8;
    const head = 2 + extra + (masked ? 4 : 0);
    if (buffer.length < head) return undefined;
    const view = new DataView(buffer.buffer, buffer.byteOffset, buffer.byteLength);
    const length = extra === 0
      ? short
      : extra === 2
      ? view.getUint16(2)
      : Number(view.getBigUint64(2) & 0xffffffffffffffffn);
    if (opcode >= 0x8 && length > 125) return protocol("A control frame is longer than 125 bytes");
    if (length > this.#options.maxPayload) {
      return {
        code: CloseCode.tooBig,
        reason: `Frame of ${length} bytes is larger than ${this.#options.maxPayload}`,
      };
    }
    if (buffer.length < head + length) return undefined;
    const payload = buffer.slice(head, head + length);
    if (masked) {
      const mask = buffer.subarray(head - 4, head);
      for (let i = 0; i < length; i++) payload[i] ^= mask[i & 3];
    }
    this.#buffer = buffer.subarray(head + length);
    return { opcode, payload };
  }
}

function isOpcode(opcode: number): opcode is OpcodeValue {
  return opcode === 0x1 || opcode === 0x2 || opcode === 0x8 || opcode === 0x9 || opcode === 0xa;
}

function protocol(reason: string): FrameViolation {
  return { code: CloseCode.protocolError, reason };
}

function concat(a: Uint8Array, b: Uint8Array): Uint8Array {
  const joined = new Uint8Array(a.length + b.length);
  joined.set(a);
  joined.set(b, a.length);
  return joined;
}
