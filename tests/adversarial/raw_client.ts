/**
 * Raw client connections for the adversarial suite: a client that writes when a case likes and
 * reads in the background, so a case can wait for what it expects to have arrived, tell a close by
 * the gateway from its own give-up, and see whether its writes were still taken.
 *
 * @module
 */

/** What a client read on one connection, and how the connection ended. */
export interface Talk {
  /** Every byte read, as latin1 text. */
  readonly text: string;
  /** True when the gateway closed the connection; false when the client gave up first. */
  readonly closed: boolean;
  /** Milliseconds from connecting until the end. */
  readonly ms: number;
}

/**
 * A raw client connection that reads in the background: a case writes when it likes and waits
 * for what it expects to have arrived, or for the gateway to close.
 */
export class RawClient {
  /** Every byte received so far, as latin1 text. */
  text = "";
  /** True once the gateway closed the connection (or reset it). */
  closed = false;
  /** Writes that failed because the connection was gone. */
  failedWrites = 0;
  readonly #conn: Deno.Conn;
  readonly #started = performance.now();
  readonly #reading: Promise<void>;
  #closedAt = 0;
  #wake: () => void = () => {};

  private constructor(conn: Deno.Conn) {
    this.#conn = conn;
    this.#reading = this.#read();
  }

  /** Connects to `port` on loopback. */
  static async open(port: number): Promise<RawClient> {
    return new RawClient(await Deno.connect({ hostname: "127.0.0.1", port }));
  }

  /** Milliseconds from connecting until the gateway closed (or until now while open). */
  get ms(): number {
    return (this.closed ? this.#closedAt : performance.now()) - this.#started;
  }

  /** Writes text (UTF-8); false when the connection was gone. */
  async write(text: string): Promise<boolean> {
    try {
      await writeText(this.#conn, text);
      return true;
    } catch {
      this.failedWrites++;
      return false;
    }
  }

  /**
   * Waits until `done(text)` holds, the gateway closes, or `ms` pass.
   *
   * @returns whether `done` held
   */
  async until(done: (text: string) => boolean, ms: number): Promise<boolean> {
    const deadline = performance.now() + ms;
    while (!done(this.text) && !this.closed && performance.now() < deadline) {
      const woken = new Promise<void>((resolve) => this.#wake = resolve);
      await settledWithin(woken, Math.max(1, deadline - performance.now()));
    }
    return done(this.text);
  }

  /** Waits up to `ms` for the gateway to close; closes the connection either way. */
  async end(ms: number): Promise<Talk> {
    await this.until(() => false, ms);
    this.close();
    await this.#reading;
    return { text: this.text, closed: this.closed, ms: this.ms };
  }

  /** Closes the connection (the client side). */
  close(): void {
    try {
      this.#conn.close();
    } catch { /* closed */ }
  }

  async #read(): Promise<void> {
    const buffer = new Uint8Array(65536);
    try {
      for (;;) {
        const n = await this.#conn.read(buffer);
        if (n === null) break;
        this.text += latin1(buffer.subarray(0, n));
        this.#wake();
      }
      this.#markClosed();
    } catch (error) {
      // Closed by this side (BadResource, Interrupted) is not the gateway closing.
      if (!(error instanceof Deno.errors.BadResource || error instanceof Deno.errors.Interrupted)) {
        this.#markClosed();
      }
    }
    this.#wake();
  }

  #markClosed(): void {
    if (this.closed) return;
    this.closed = true;
    this.#closedAt = performance.now();
  }
}

/** Writes `bytes` on a new connection to `port` and reads until it closes or `timeoutMs` passes. */
export async function talk(port: number, bytes: string, timeoutMs: number): Promise<Talk> {
  const client = await RawClient.open(port);
  await client.write(bytes);
  return await client.end(timeoutMs);
}

function latin1(bytes: Uint8Array): string {
  let text = "";
  for (const byte of bytes) text += String.fromCharCode(byte);
  return text;
}

/** Writes every byte of `text` (UTF-8). */
export async function writeText(conn: Deno.Conn, text: string): Promise<void> {
  const bytes = new TextEncoder().encode(text);
  let offset = 0;
  while (offset < bytes.byteLength) offset += await conn.write(bytes.subarray(offset));
}

/** The value of `promise` if it settles within `ms` milliseconds, else undefined. */
export async function settledWithin<T>(promise: Promise<T>, ms: number): Promise<T | undefined> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<undefined>((resolve) =>
    timer = setTimeout(() => resolve(undefined), ms)
  );
  try {
    return await Promise.race([promise, late]);
  } finally {
    clearTimeout(timer);
  }
}

/** Waits `ms` milliseconds. */
export function pause(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
