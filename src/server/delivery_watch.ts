/**
 * Bounded delivery: a reply whose bytes the client does not take is cut off. Without it a client
 * that reads the response head and then stops reading held its public slot for ever (seen past
 * every head, idle, request and deadline limit: none of them covers sending).
 *
 * A reply is judged only while bytes wait for the client (the socket's write buffer is not
 * empty): an upstream that is slow to produce a body is the body-idle watch's business, not the
 * client's. Within any `send_ms` window in which bytes waited throughout, the client must take
 * something, and at least `min_send_rate` bytes per second; otherwise the reply is cut, its
 * reservation cancelled.
 *
 * Bytes in the kernel's send buffer count as taken, because nothing else can be seen: Deno 2.9.6
 * offers no `SO_SNDBUF`, `TCP_NOTSENT_LOWAT`, `SIOCOUTQ` or `TCP_INFO` (no FFI here), and reads of
 * `/proc/net/tcp` need `--allow-all` (measured: "Requires all access"). That buffer is large — on
 * loopback it took 3.9–4.2 MB of a reply from a reader that took nothing, 0.72 MB with a 1,500-byte
 * MTU, 0.13 MB with `net.ipv4.tcp_notsent_lowat=16384` — so a reply that fits in it counts as
 * delivered when the kernel has it (a 1.3 MB answer to a 256 B/s reader: after 0.3 s), and the
 * watch sees a reader only once the buffer is full. What the gateway does control is the cut: it
 * resets the connection, so the kernel drops what it still held for that client (closed gracefully,
 * the kernel went on sending it — a client cut after reading the head still received 4.1 MB).
 *
 * One periodic sweep per lane server (a quarter of `send_ms`, between 50 ms and 1 s) watches every
 * reply being delivered, as the deadline sweep does for replies being awaited.
 *
 * @module
 */

/** The delivery limits, from `timeouts.send_ms` and `timeouts.min_send_rate`. */
export interface DeliveryLimits {
  readonly sendMs: number;
  /** Bytes per second; 0 asks only for progress. */
  readonly minSendRate: number;
}

/** What the watch reads from a client socket. */
export interface SendingSocket {
  readonly writableLength: number;
  readonly bytesWritten: number;
  /** Closes with a reset (TCP only): the kernel drops what it still holds for the peer. */
  resetAndDestroy?(): unknown;
}

interface Delivery {
  /** The reply's socket, once it has one (a pipelined reply waits for the ones before it). */
  readonly socket: () => SendingSocket | null | undefined;
  readonly cut: () => void;
  /** When bytes started waiting, continuously; undefined while none wait. */
  since?: number;
  /** Bytes taken by the client when `since` was set. */
  mark: number;
}

/** The replies of one lane server being delivered. */
export class DeliveryWatch {
  readonly #limits: DeliveryLimits;
  readonly #now: () => number;
  readonly #intervalMs: number;
  readonly #deliveries = new Set<Delivery>();
  #timer: number | undefined;

  /**
   * @param limits the send limit and minimum rate
   * @param now a monotonic clock in milliseconds
   */
  constructor(limits: DeliveryLimits, now: () => number = () => performance.now()) {
    this.#limits = limits;
    this.#now = now;
    this.#intervalMs = Math.min(1000, Math.max(50, Math.floor(limits.sendMs / 4)));
  }

  /**
   * Watches one reply until the returned function is called.
   *
   * @param socket the reply's socket (read at each sweep)
   * @param cut what to do when the client is too slow: close the connection
   * @returns the function that stops watching
   */
  watch(socket: () => SendingSocket | null | undefined, cut: () => void): () => void {
    const delivery: Delivery = { socket, cut, mark: 0 };
    this.#deliveries.add(delivery);
    if (this.#timer === undefined) {
      const timer = setInterval(() => this.sweep(), this.#intervalMs) as unknown as number;
      Deno.unrefTimer(timer);
      this.#timer = timer;
    }
    return () => this.#deliveries.delete(delivery);
  }

  /** Judges every watched reply once (the timer calls this; tests may too). */
  sweep(): void {
    const now = this.#now();
    const { sendMs, minSendRate } = this.#limits;
    for (const delivery of this.#deliveries) {
      const socket = delivery.socket();
      const waiting = socket?.writableLength ?? 0;
      if (!socket || waiting === 0) {
        delivery.since = undefined;
        continue;
      }
      const taken = socket.bytesWritten - waiting;
      if (delivery.since === undefined) {
        delivery.since = now;
        delivery.mark = taken;
        continue;
      }
      const elapsed = now - delivery.since;
      if (elapsed < sendMs) continue;
      const moved = taken - delivery.mark;
      if (moved <= 0 || moved * 1000 < minSendRate * elapsed) {
        this.#deliveries.delete(delivery);
        reset(socket);
        delivery.cut();
        continue;
      }
      delivery.since = now;
      delivery.mark = taken;
    }
  }

  /** Stops the sweep (the server closed). */
  stop(): void {
    if (this.#timer !== undefined) clearInterval(this.#timer);
    this.#timer = undefined;
  }
}

/**
 * Resets a cut client's connection, so the kernel drops the reply's bytes it still held (a TLS
 * socket refuses: its wrap is not a TCP handle; the cut's destroy closes it instead).
 */
function reset(socket: SendingSocket): void {
  try {
    socket.resetAndDestroy?.();
  } catch {
    // Not a TCP handle: closed by the cut.
  }
}
