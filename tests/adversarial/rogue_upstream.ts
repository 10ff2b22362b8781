/**
 * The arena's rogue upstream: raw TCP, one request per connection, answering wrongly on purpose.
 *
 * @module
 */
import { writeText } from "./raw_client.ts";

/**
 * An upstream that misbehaves by path, over raw TCP (each connection serves one request):
 *
 * - `/reset`: promises 100,000 bytes, sends 1,000, waits for {@link RogueUpstream.resume}, then
 *   closes;
 * - `/hang`: reads the request and never answers;
 * - `/clte`: answers with both `Content-Length` and `Transfer-Encoding: chunked`;
 * - `/badchunk`: a chunked body whose first chunk size is not hexadecimal (sent with the head);
 * - `/badchunk-later`: a chunked body whose first chunk (`hello`) is fine; after
 *   {@link RogueUpstream.resume}, a chunk size that is not hexadecimal;
 * - `/twolengths`: two different `Content-Length` fields;
 * - anything else: 200 `rogue`.
 */
export class RogueUpstream {
  /** Request lines received, in order. */
  readonly heads: string[] = [];
  readonly port: number;
  readonly #listener: Deno.Listener;
  readonly #conns = new Set<Deno.Conn>();
  readonly #accepting: Promise<void>;
  #resume = Promise.withResolvers<void>();

  private constructor() {
    this.#listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
    this.port = (this.#listener.addr as Deno.NetAddr).port;
    this.#accepting = this.#accept();
  }

  /** Starts listening on a free loopback port. */
  static start(): RogueUpstream {
    return new RogueUpstream();
  }

  /**
   * Lets every answer waiting at its pause point (`/reset`, `/badchunk-later`) go on: a case first
   * reads what came before the pause, so what the client saw does not depend on timing.
   */
  resume(): void {
    this.#resume.resolve();
    this.#resume = Promise.withResolvers<void>();
  }

  async #accept(): Promise<void> {
    for (;;) {
      let conn: Deno.Conn;
      try {
        conn = await this.#listener.accept();
      } catch {
        return;
      }
      this.#conns.add(conn);
      this.#serve(conn).catch(() => {}).finally(() => {
        this.#conns.delete(conn);
        try {
          conn.close();
        } catch { /* closed */ }
      });
    }
  }

  async #serve(conn: Deno.Conn): Promise<void> {
    const buffer = new Uint8Array(16384);
    let head = "";
    while (!head.includes("\r\n\r\n")) {
      const n = await conn.read(buffer);
      if (n === null) return;
      head += new TextDecoder().decode(buffer.subarray(0, n));
    }
    const line = head.slice(0, head.indexOf("\r\n"));
    this.heads.push(line);
    const path = line.split(" ")[1] ?? "/";
    const write = (text: string) => writeText(conn, text);
    if (path === "/hang") {
      // Never answer; the connection is closed by the gateway or by stop().
      while (await conn.read(buffer) !== null) { /* discard */ }
      return;
    }
    if (path === "/reset") {
      const resumed = this.#resume.promise;
      await write("HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n" + "r".repeat(1000));
      await resumed;
      return;
    }
    if (path === "/clte") {
      await write(
        "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n" +
          "5\r\nhello\r\n0\r\n\r\n",
      );
      return;
    }
    if (path === "/badchunk") {
      await write("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n");
      return;
    }
    if (path === "/badchunk-later") {
      const resumed = this.#resume.promise;
      await write("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n");
      await resumed;
      await write("zz\r\nworld\r\n0\r\n\r\n");
      return;
    }
    if (path === "/twolengths") {
      await write("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 7\r\n\r\nhello..");
      return;
    }
    await write("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nrogue");
  }

  /** Closes the listener and every connection. */
  async stop(): Promise<void> {
    this.resume();
    this.#listener.close();
    for (const conn of this.#conns) {
      try {
        conn.close();
      } catch { /* closed */ }
    }
    await this.#accepting;
  }
}
