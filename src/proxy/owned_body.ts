/**
 * Relaying a response body the gateway reads itself (owned_attempt.ts) down to the client, through
 * two reused read buffers: bytes are read into one while the client's writes of the other finish,
 * and a buffer is read into again only after every write of its bytes completed. Nothing is
 * allocated per chunk but the write's callback, so a long download holds about two buffers
 * (128 KiB) however fast the upstream is (docs/decisions.md §19).
 *
 * The client response is a view of the buffer when it is an HTTP/1 `ServerResponse` (its write
 * callback runs once the bytes reached the socket); any other target gets a copy of each chunk.
 * The stream settles like `body_stream.ts`: true when the body arrived whole or the client left
 * first, false when the upstream broke it off, went idle (the idle watch closes the connection),
 * or framed it wrongly — then the client response is cut off, never completed.
 *
 * @module
 */
import http from "node:http";
import type { BodyDecoder } from "../egress/h1_body.ts";
import { giveBuffer, type OwnedConn, type OwnedConns, takeBuffer } from "../egress/owned_conns.ts";
import { settleOnce, type StreamedBody } from "../request/body_stream.ts";
import { relayed } from "../request/relay_memory.ts";

/** What a body stream needs: its connection, the bytes already read, and how it is framed. */
export interface OwnedBodySource {
  readonly conn: OwnedConn;
  readonly pool: OwnedConns;
  readonly decoder: BodyDecoder;
  /** The read buffer, holding `[start, end)`: body bytes that arrived with the head. */
  readonly buffer: Uint8Array;
  readonly start: number;
  readonly end: number;
  /** The response lets the connection carry another request once its body ended. */
  readonly keepAlive: boolean;
  readonly clock: () => number;
}

type Target = Parameters<StreamedBody["pipeTo"]>[0];

/**
 * Wraps an owned response body for streaming.
 *
 * @param source the connection and what was read with the head
 * @param settle called once: true when the body arrived whole (or the client left first), false
 *   when the upstream broke it off
 */
export function streamOwned(source: OwnedBodySource, settle: (ok: boolean) => void): StreamedBody {
  const finish = settleOnce(settle);
  return {
    pipeTo(target) {
      relay(source, target).then(finish);
    },
    cancel() {
      source.pool.release(source.conn, false);
      giveBuffer(source.buffer);
      finish(true);
    },
  };
}

/** Pumps the body into `target`; resolves the settlement. */
async function relay(source: OwnedBodySource, target: Target): Promise<boolean> {
  const { conn, pool, decoder, clock } = source;
  const copy = !(target instanceof http.ServerResponse);
  const writes = new Writes(target, () => pool.release(conn, false));
  const buffers = [source.buffer, takeBuffer()];
  let slot = 0;
  let [start, end] = [source.start, source.end];
  try {
    for (;;) {
      const used = decoder.feed(buffers[slot], start, end, (view) => {
        relayed(view.byteLength);
        writes.write(copy ? view.slice() : view, slot);
      });
      if (decoder.done) {
        await writes.drained();
        // Bytes after the body are not an answer to anything: such a connection is not reused.
        pool.release(conn, source.keepAlive && used === end - start);
        target.end();
        return true;
      }
      // The other buffer is read into next: every write of its bytes must have completed.
      slot = 1 - slot;
      await writes.drained(slot);
      const n = await conn.read(buffers[slot], clock);
      if (n === null) {
        const whole = decoder.eof();
        await writes.drained();
        pool.release(conn, false);
        if (whole) target.end();
        else target.destroy();
        return whole;
      }
      [start, end] = [0, n];
    }
  } catch {
    pool.release(conn, false);
    if (writes.left) return true;
    // What the upstream sent before it broke reaches the client, then the response is cut off.
    await writes.drained().catch(() => {});
    target.destroy();
    return false;
  } finally {
    writes.stop();
    // A buffer the client's socket may still refer to is left to the collector.
    if (!writes.left) buffers.forEach(giveBuffer);
  }
}

/**
 * The client writes of each buffer still in flight, counted, with one waiter at a time: nothing is
 * allocated per write but node's own bookkeeping (no promise per chunk, no race against a
 * promise that lives as long as the stream, whose reactions would pile up with every chunk).
 */
class Writes {
  /** True once the client response closed before the relay ended it. */
  left = false;
  readonly #target: Target;
  readonly #pending = [0, 0];
  readonly #done: ((error?: Error | null) => void)[];
  #waiter?: { slot?: number; resolve(): void; reject(error: unknown): void };
  #error?: unknown;
  readonly #onClose: () => void;

  /** @param onLeft called when the client leaves mid-body (the upstream side is closed with it) */
  constructor(target: Target, onLeft: () => void) {
    this.#target = target;
    this.#done = [0, 1].map((slot) => (error?: Error | null) => {
      this.#pending[slot]--;
      // A write the client's socket refused means the client went away, whichever of this and
      // the response's close comes first: it says nothing about the upstream.
      if (error) this.#leave(error, onLeft);
      this.#wake();
    });
    this.#onClose = () => {
      this.#leave(new Error("The client left"), onLeft);
      this.#wake();
    };
    target.once("close", this.#onClose);
  }

  /** Writes one chunk of buffer `slot`. */
  write(chunk: Uint8Array, slot: number): void {
    this.#pending[slot]++;
    this.#target.write(chunk, this.#done[slot]);
  }

  /** Resolves once every write of `slot` (default: of both) completed; rejects if one failed. */
  drained(slot?: number): Promise<void> {
    if (this.#idle(slot)) return this.#error ? Promise.reject(this.#error) : Promise.resolve();
    return new Promise((resolve, reject) => this.#waiter = { slot, resolve, reject });
  }

  /** Stops watching the client response. */
  stop(): void {
    this.#target.removeListener("close", this.#onClose);
  }

  #leave(error: unknown, onLeft: () => void): void {
    if (this.left) return;
    this.left = true;
    this.#error ??= error;
    onLeft();
  }

  #idle(slot?: number): boolean {
    if (this.#error) return true;
    return slot === undefined
      ? this.#pending[0] + this.#pending[1] === 0
      : this.#pending[slot] === 0;
  }

  #wake(): void {
    const waiter = this.#waiter;
    if (!waiter || !this.#idle(waiter.slot)) return;
    this.#waiter = undefined;
    if (this.#error) waiter.reject(this.#error);
    else waiter.resolve();
  }
}
