/**
 * Adversarial upstream: an upstream that sends a second, unsolicited response a few milliseconds
 * after a complete one. On a pooled keep-alive connection those bytes would be read as the answer
 * to whichever request is written on it next — another client's — and every later answer on it
 * would be one behind (seen on the owned reads: `b` got `UNSOLICITED`, the next `a` got `b`'s
 * answer). The gateway must never hand such bytes to anyone: a connection that just came back to
 * the pool is not given to the next request until it has stayed quiet for a while, and one that
 * speaks while idle is dropped.
 *
 * The scripted upstream answers each request with a body naming its path; after the first answer
 * on a connection it sends `UNSOLICITED` 5 ms later, and holds any request that arrived meanwhile
 * until then (as an upstream whose surplus bytes were already on the wire would). Two clients take
 * turns on keep-alive connections: B writes its request the moment A's answer arrived, so B's
 * request reaches the gateway inside those 5 ms. Both ways out are tried: the owned reads (a GET)
 * and node's client (a POST with a body).
 *
 * @module
 */
import assert from "node:assert/strict";
import { freePorts } from "../fixtures/gateway.ts";
import { parseResponses, type RawResponse } from "../fixtures/http_client.ts";
import { arenaTest, pause, RawClient, SHOP } from "./arena.ts";

/** What the upstream sends unasked, 5 ms after a connection's first answer. */
const UNSOLICITED = "UNSOLICITED";
const SURPLUS_DELAY_MS = 5;
const ROUNDS = 12;
const DEADLINE_MS = 5000;

/** A raw upstream that sends one unsolicited response after each connection's first answer. */
class SurplusUpstream {
  port = 0;
  /** Connections accepted. */
  connections = 0;
  /** False: no surplus (a well-behaved upstream, for the cost side). */
  surplus = true;
  #listener?: Deno.Listener;

  /** Reserves the port and lets the egress reach it (an `ArenaOptions.edit`). */
  reserve(config: Record<string, unknown>): void {
    this.port = freePorts(1)[0];
    (config.egress as { direct: string[] }).direct.push(`127.0.0.1:${this.port}`);
  }

  /** Serves while `run` runs. */
  async serve(run: () => Promise<void>): Promise<void> {
    const listener = Deno.listen({ hostname: "127.0.0.1", port: this.port });
    this.#listener = listener;
    const conns = new Set<Deno.Conn>();
    const accepting = (async () => {
      for await (const conn of listener) {
        this.connections++;
        conns.add(conn);
        this.#answer(conn).catch(() => {}).finally(() => conns.delete(conn));
      }
    })().catch(() => {});
    try {
      await run();
    } finally {
      listener.close();
      for (const conn of conns) conn.close();
      await accepting;
    }
  }

  /** Answers each request on `conn` in turn; the first answer is followed by the surplus. */
  async #answer(conn: Deno.Conn): Promise<void> {
    const buffer = new Uint8Array(16 * 1024);
    let text = "";
    let surplusSent: Promise<void> | undefined;
    for (;;) {
      const n = await conn.read(buffer);
      if (n === null) return;
      text += new TextDecoder().decode(buffer.subarray(0, n));
      for (let request = takeRequest(text); request; request = takeRequest(text)) {
        text = request.rest;
        // Whatever arrived before the surplus went out is answered after it.
        await surplusSent;
        await write(conn, response(`answer to ${request.path}`));
        if (!this.surplus) continue;
        surplusSent ??= pause(SURPLUS_DELAY_MS)
          .then(() => write(conn, response(UNSOLICITED)))
          .catch(() => {});
      }
    }
  }
}

/** One whole request at the start of `text` (a head, and a `Content-Length` body), if there is. */
function takeRequest(text: string): { path: string; rest: string } | undefined {
  const end = text.indexOf("\r\n\r\n");
  if (end === -1) return undefined;
  const head = text.slice(0, end);
  const length = Number(/\r\ncontent-length:\s*(\d+)/i.exec(head)?.[1] ?? 0);
  if (text.length < end + 4 + length) return undefined;
  return { path: head.split(" ")[1], rest: text.slice(end + 4 + length) };
}

function response(body: string): string {
  return `HTTP/1.1 200 OK\r\nContent-Length: ${body.length}\r\n\r\n${body}`;
}

async function write(conn: Deno.Conn, text: string): Promise<void> {
  const bytes = new TextEncoder().encode(text);
  for (let at = 0; at < bytes.length;) at += await conn.write(bytes.subarray(at));
}

/** The whole responses `client` received so far (none while one is still partial). */
function responsesOf(client: RawClient): RawResponse[] {
  try {
    return parseResponses(client.text);
  } catch {
    return [];
  }
}

/**
 * Rounds of A then B on their own keep-alive connections, B's request written the moment A's
 * answer arrived; every answer must be the one to its own request.
 */
async function takeTurns(port: number, method: "GET" | "POST"): Promise<void> {
  const [a, b] = [await RawClient.open(port), await RawClient.open(port)];
  const body = method === "POST" ? "Content-Length: 4\r\n\r\nbody" : "\r\n";
  try {
    for (let round = 0; round < ROUNDS; round++) {
      for (const [client, name] of [[a, "a"], [b, "b"]] as const) {
        await client.write(
          `${method} /surplus/${name}${round} HTTP/1.1\r\nHost: ${SHOP}\r\n${body}`,
        );
        const arrived = await client.until(
          () => responsesOf(client).length === round + 1,
          DEADLINE_MS,
        );
        assert.ok(arrived, `${name} round ${round}: no answer in time:\n${client.text}`);
        const answer = responsesOf(client)[round];
        assert.ok(!answer.body.includes(UNSOLICITED), `${name} round ${round} got the surplus`);
        assert.equal(answer.body, `answer to /surplus/${name}${round}`, `${name} round ${round}`);
      }
      // The next round's A may take the connections back once they are quiet.
      await pause(50);
    }
  } finally {
    a.close();
    b.close();
  }
}

const upstream = new SurplusUpstream();

arenaTest("adversarial: upstream surplus bytes", {
  edit: (config) => upstream.reserve(config),
  routes: () => [{
    name: "surplus",
    match: { prefix: "/surplus/" },
    proxy: { backends: [{ url: `http://127.0.0.1:${upstream.port}` }], attempts: 1 },
  }],
}, {
  "the owned reads never hand an unsolicited response to the next request": async (arena) => {
    await upstream.serve(() => takeTurns(arena.ports.public, "GET"));
  },

  "node's client never hands an unsolicited response to the next request": async (arena) => {
    await upstream.serve(() => takeTurns(arena.ports.public, "POST"));
  },

  "a keep-alive client's back-to-back requests keep one upstream connection, either way out":
    async (arena) => {
      upstream.surplus = false;
      try {
        for (const method of ["GET", "POST"] as const) {
          upstream.connections = 0;
          await upstream.serve(() => backToBack(arena.ports.public, method));
          assert.equal(upstream.connections, 1, `${method}: the client takes its own back at once`);
        }
      } finally {
        upstream.surplus = true;
      }
    },
});

/** Ten requests on one keep-alive connection, each written the moment the answer before came. */
async function backToBack(port: number, method: "GET" | "POST"): Promise<void> {
  const client = await RawClient.open(port);
  const body = method === "POST" ? "Content-Length: 4\r\n\r\nbody" : "\r\n";
  try {
    for (let i = 0; i < 10; i++) {
      await client.write(`${method} /surplus/c${i} HTTP/1.1\r\nHost: ${SHOP}\r\n${body}`);
      assert.ok(await client.until(() => responsesOf(client).length === i + 1, DEADLINE_MS));
      assert.equal(responsesOf(client)[i].body, `answer to /surplus/c${i}`);
    }
  } finally {
    client.close();
  }
}
