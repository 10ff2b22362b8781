/**
 * Upstream bodies that go quiet: one periodic sweep compares each watched socket's byte count with
 * the previous sweep, instead of a timer refreshed on every chunk. A body is declared idle after
 * between `idleMs` and 1.5 × `idleMs` without a byte.
 *
 * @module
 */

/** What the watch reads: a socket's running byte count. */
export interface ByteCounter {
  readonly bytesRead: number;
}

interface Watched {
  readonly socket: ByteCounter;
  readonly onIdle: () => void;
  seen: number;
  quietSweeps: number;
}

/** Watches streaming upstream bodies for silence. */
export class IdleWatch {
  readonly #watched = new Set<Watched>();
  readonly #intervalMs: number;
  readonly #sweepsToIdle: number;
  #timer: number | undefined;

  /** @param idleMs the longest silence allowed */
  constructor(idleMs: number) {
    this.#intervalMs = Math.max(5, Math.floor(idleMs / 2));
    this.#sweepsToIdle = Math.max(1, Math.round(idleMs / this.#intervalMs));
  }

  /**
   * Watches `socket` until the returned function is called; calls `onIdle` once if it goes quiet.
   */
  watch(socket: ByteCounter, onIdle: () => void): () => void {
    const entry: Watched = { socket, onIdle, seen: socket.bytesRead, quietSweeps: 0 };
    this.#watched.add(entry);
    if (this.#timer === undefined) {
      // Deno's timers are numbers (node's types say Timeout); unref: it must not keep a process up.
      const timer = setInterval(() => this.#sweep(), this.#intervalMs) as unknown as number;
      Deno.unrefTimer(timer);
      this.#timer = timer;
    }
    return () => this.#watched.delete(entry);
  }

  /** Stops watching everything. */
  stop(): void {
    if (this.#timer !== undefined) clearInterval(this.#timer);
    this.#timer = undefined;
    this.#watched.clear();
  }

  #sweep(): void {
    for (const entry of this.#watched) {
      const now = entry.socket.bytesRead;
      if (now !== entry.seen) {
        entry.seen = now;
        entry.quietSweeps = 0;
      } else if (++entry.quietSweeps >= this.#sweepsToIdle) {
        this.#watched.delete(entry);
        entry.onIdle();
      }
    }
  }
}
