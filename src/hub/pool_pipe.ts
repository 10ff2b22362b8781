/**
 * One relayed stream from an edge to a pool instance, as both transports carry it (the
 * `socks5_tls` relay and the `https_tunnel` endpoint): connect to the instance within the timeout,
 * pipe both ways, count the stream while it lasts, and end both sides together. A connect that
 * fails is told to the caller, which answers the edge its own way (a closed TLS connection, or a
 * WebSocket close frame).
 *
 * Both directions are paced by the pipe: a side whose writes are full pauses the other's reads.
 * That holds only if pausing the client stops its reads: on Deno 2.9.6 a paused `node:tls` socket
 * goes on reading its TCP socket into memory (measured: a client sending to a pool destination
 * that does not read had 864 MB buffered after 3 s; 8 MB with `tls_reads.ts`), so each carrier
 * holds its TLS socket's reads (the relay at accept, the WebSocket stream at attach).
 *
 * @module
 */
import net from "node:net";
import type { Duplex } from "node:stream";
import type { PoolPorts } from "./socks_relay.ts";

/** What a relayed stream tells its carrier. */
export interface PipeHooks {
  /** The instance accepted the connection. */
  connected(): void;
  /** A stream through `port` started (+1) or ended (−1). */
  change(delta: 1 | -1): void;
  /** The instance could not be reached; the carrier answers the edge and closes it. */
  unreachable(error: Error): void;
}

/**
 * Pipes `client` to `host:port` and back.
 *
 * @param client the edge's stream (a TLS socket, or a WebSocket as a Duplex)
 * @param timeoutMs the most the connect to the instance may take
 */
export function pipeToPool(
  client: Duplex & { setNoDelay?(noDelay: boolean): unknown },
  target: { readonly host: string; readonly port: number },
  timeoutMs: number,
  hooks: PipeHooks,
): void {
  const upstream = net.connect({ host: target.host, port: target.port });
  client.setNoDelay?.(true);
  upstream.setNoDelay(true);
  const timer = setTimeout(function onConnectTimeout() {
    upstream.destroy(new Error(`No connect within ${timeoutMs} ms`));
  }, timeoutMs);
  let connected = false;
  upstream.once("connect", () => {
    connected = true;
    clearTimeout(timer);
    hooks.connected();
  });
  hooks.change(+1);
  let ended = false;
  const end = (upstreamError?: Error) => {
    if (ended) return;
    ended = true;
    clearTimeout(timer);
    hooks.change(-1);
    upstream.destroy();
    if (upstreamError && !connected) hooks.unreachable(upstreamError);
    else client.destroy();
  };
  client.on("error", () => end()).on("close", () => end());
  upstream.on("error", (error) => end(error)).on("close", () => end());
  client.pipe(upstream);
  upstream.pipe(client);
}

/**
 * The streams a carrier relays, per pool port: what it reports to the pool (its scaler reads it)
 * and what its status shows.
 */
export class PortStreams {
  readonly #pool: PoolPorts;
  readonly #active = new Map<number, number>();
  #relayed = 0;

  constructor(pool: PoolPorts) {
    this.#pool = pool;
  }

  /** Streams relayed to `port` right now. */
  active(port: number): number {
    return this.#active.get(port) ?? 0;
  }

  /** The hooks of one stream through `port` (for {@link pipeToPool}, minus `unreachable`). */
  hooks(port: number): Omit<PipeHooks, "unreachable"> {
    return {
      connected: () => void this.#relayed++,
      change: (delta) => {
        const active = this.active(port) + delta;
        if (active === 0) this.#active.delete(port);
        else this.#active.set(port, active);
        this.#pool.report?.(port, { active });
      },
    };
  }

  /** Streams per port now, and streams relayed since start (their pool connect succeeded). */
  counts(): { active: Record<string, number>; relayed: number } {
    return { active: Object.fromEntries(this.#active), relayed: this.#relayed };
  }
}
