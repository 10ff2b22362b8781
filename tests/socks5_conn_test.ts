/**
 * `socksDialConn` (the SOCKS5 CONNECT on a `Deno.TcpConn`) against a real `microsocks`, and — the
 * main proof — side by side with `socksConnect` (the `node:net` client) against scripted SOCKS
 * servers on loopback: for every behaviour both must succeed with the same stream after the reply,
 * or fail with the same kind, blame, reply code and message.
 *
 * @module
 */
import assert from "node:assert/strict";
import type { Socket } from "node:net";
import {
  socksConnect,
  type SocksConnectOptions,
  SocksError,
  type SocksInstance,
} from "../src/egress/socks5.ts";
import { socksDialConn } from "../src/egress/socks5_conn.ts";
import { writeAll } from "./fixtures/http_client.ts";
import { peerTest } from "./fixtures/require.ts";

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** The destination every scripted attempt asks for; no failure message may repeat it. */
const SECRET = { host: "secret-destination.onion", port: 80 };
const CREDENTIALS = { username: "alice", password: "s3cret" };

/** Closes a conn or listener that may already be closed. */
function closeQuietly(closable: { close(): void }): void {
  try {
    closable.close();
  } catch { /* already closed */ }
}

function concat(parts: readonly Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((sum, part) => sum + part.length, 0));
  let offset = 0;
  for (const part of parts) {
    out.set(part, offset);
    offset += part.length;
  }
  return out;
}

function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** The scripted server's side of one connection: reads the client's messages, writes answers. */
class Peer {
  #pending: Uint8Array = new Uint8Array(0);
  constructor(readonly conn: Deno.Conn) {}

  /** Exactly `count` bytes; throws when the client closes first. */
  async read(count: number): Promise<Uint8Array> {
    const chunk = new Uint8Array(1024);
    while (this.#pending.length < count) {
      const n = await this.conn.read(chunk);
      if (n === null) throw new Error("The client closed");
      this.#pending = concat([this.#pending, chunk.subarray(0, n)]);
    }
    const out = this.#pending.slice(0, count);
    this.#pending = this.#pending.subarray(count);
    return out;
  }

  /** The greeting's offered methods. */
  async greeting(): Promise<number[]> {
    const [, count] = await this.read(2);
    return [...await this.read(count)];
  }

  /** The RFC 1929 request's credentials. */
  async auth(): Promise<{ username: string; password: string }> {
    const [, userLength] = await this.read(2);
    const username = decoder.decode(await this.read(userLength));
    const [passLength] = await this.read(1);
    return { username, password: decoder.decode(await this.read(passLength)) };
  }

  /** The CONNECT request's host, as sent. */
  async request(): Promise<string> {
    const [, , , atyp] = await this.read(4);
    const length = atyp === 0x01 ? 4 : atyp === 0x04 ? 16 : (await this.read(1))[0];
    const address = await this.read(length);
    await this.read(2);
    return atyp === 0x03 ? decoder.decode(address) : [...address].join(".");
  }

  write(...parts: (number[] | string)[]): Promise<void> {
    const bytes = parts.map((part) => typeof part === "string" ? encoder.encode(part) : part);
    return writeAll(this.conn, concat(bytes.map((part) => Uint8Array.from(part))));
  }

  /** Waits until the client closes (a server that never answers again). */
  async untilClosed(): Promise<void> {
    const chunk = new Uint8Array(1024);
    try {
      while (await this.conn.read(chunk) !== null) { /* discard */ }
    } catch { /* closed */ }
  }
}

/** What a scripted SOCKS server does with each connection. */
type Script = (peer: Peer) => Promise<void>;

/** A loopback SOCKS server that runs `script` per connection; `close()` waits for every one. */
function scripted(script: Script) {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const conns = new Set<Deno.Conn>();
  const tasks: Promise<void>[] = [];
  const loop = (async () => {
    for await (const conn of listener) {
      conns.add(conn);
      conn.setNoDelay(true);
      tasks.push(
        script(new Peer(conn)).catch(() => {}).finally(() => {
          conns.delete(conn);
          closeQuietly(conn);
        }),
      );
    }
  })().catch(() => {});
  return {
    port: listener.addr.port,
    async close(): Promise<void> {
      closeQuietly(listener);
      for (const conn of conns) closeQuietly(conn);
      await loop;
      await Promise.all(tasks);
    },
  };
}

/** A SOCKS5 CONNECT reply with an IPv4 BND.ADDR. */
function reply(code: number, bound = [0, 0, 0, 0]): number[] {
  return [0x05, code, 0x00, 0x01, ...bound, 0x04, 0x38];
}

/** `attempt`, or a failure when it has not settled within 5 s (a hung dial fails the test). */
async function settled<T>(attempt: Promise<T>): Promise<T> {
  let guard: ReturnType<typeof setTimeout> | undefined;
  const hung = new Promise<never>((_, reject) => {
    guard = setTimeout(() => reject(new Error("The dial did not settle within 5 s")), 5000);
  });
  try {
    return await Promise.race([attempt, hung]);
  } finally {
    clearTimeout(guard);
  }
}

/** How one attempt ended: the bytes read after the reply up to the server's close, or the error. */
type Outcome = { readonly stream: string } | { readonly error: SocksError };

/** Runs `socksDialConn` and reads the stream (leftover first) until the server closes it. */
async function viaConn(
  instance: SocksInstance,
  options: SocksConnectOptions,
  target = SECRET,
): Promise<Outcome> {
  let dialed;
  try {
    dialed = await settled(socksDialConn(instance, target, options));
  } catch (error) {
    if (error instanceof SocksError) return { error };
    throw error;
  }
  const { conn, leftover } = dialed;
  const chunks = [leftover];
  const buffer = new Uint8Array(1024);
  const guard = setTimeout(() => closeQuietly(conn), 2000);
  try {
    for (let n = await conn.read(buffer); n !== null; n = await conn.read(buffer)) {
      chunks.push(buffer.slice(0, n));
    }
  } finally {
    clearTimeout(guard);
    closeQuietly(conn);
  }
  return { stream: decoder.decode(concat(chunks)) };
}

/** Runs `socksConnect` and reads the stream until the server closes it. */
async function viaNode(
  instance: SocksInstance,
  options: SocksConnectOptions,
  target = SECRET,
): Promise<Outcome> {
  let socket: Socket;
  try {
    socket = await settled(socksConnect(instance, target, options));
  } catch (error) {
    if (error instanceof SocksError) return { error };
    throw error;
  }
  const chunks: Uint8Array[] = [];
  const ended = new Promise<void>((resolve, reject) => {
    const guard = setTimeout(() => reject(new Error("No end within 2 s")), 2000);
    socket.on("data", (chunk: Uint8Array) => chunks.push(chunk));
    socket.on("error", (error) => (clearTimeout(guard), reject(error)));
    socket.on("end", () => (clearTimeout(guard), resolve()));
  });
  try {
    await ended;
  } finally {
    await new Promise<void>((resolve) => {
      if (socket.closed) return resolve();
      socket.once("close", () => resolve());
      socket.destroy();
    });
  }
  return { stream: decoder.decode(concat(chunks)) };
}

/** What both clients must come to: a stream, or a failure's kind, blame and reply code. */
type Expected =
  | { readonly stream: string }
  | { readonly kind: string; readonly blame: "instance" | "destination"; readonly reply?: number };

/** A failure as compared: kind, blame, and the reply code when there is one. */
function failureOf(error: SocksError): Expected {
  const { kind, blame, reply } = error;
  return reply === undefined ? { kind, blame } : { kind, blame, reply };
}

/** Asserts that both clients came to `expected`, with the same message on a failure. */
function assertAgree(node: Outcome, conn: Outcome, expected: Expected, where: string): void {
  for (const [who, outcome] of [["socksConnect", node], ["socksDialConn", conn]] as const) {
    const seen = "error" in outcome ? failureOf(outcome.error) : outcome;
    assert.deepEqual(seen, expected, `${who}: ${"error" in outcome ? outcome.error.message : ""}`);
    if (!("error" in outcome)) continue;
    assert.match(outcome.error.message, /^[A-Z].*[^.]$/);
    // A refusal's message is the onBound judge's own.
    const named = outcome.error.kind === "refused" || outcome.error.message.includes(where);
    assert.ok(named, outcome.error.message);
    assert.ok(!outcome.error.message.includes(SECRET.host), outcome.error.message);
  }
  if ("error" in node && "error" in conn) assert.equal(conn.error.message, node.error.message);
}

/** Runs both clients against one scripted server and asserts they agree. */
async function differential(
  script: Script,
  expected: Expected,
  options: {
    credentials?: boolean;
    timeoutMs?: number;
    onBound?: (a: string) => string | undefined;
  } = {},
): Promise<void> {
  const server = scripted(script);
  try {
    const instance: SocksInstance = {
      hostname: "127.0.0.1",
      port: server.port,
      ...(options.credentials ? CREDENTIALS : {}),
    };
    const limits = { timeoutMs: options.timeoutMs ?? 2000, onBound: options.onBound };
    const node = await viaNode(instance, limits);
    const conn = await viaConn(instance, limits);
    assertAgree(node, conn, expected, `127.0.0.1:${server.port}`);
  } finally {
    await server.close();
  }
}

/** Answers the greeting with no-auth and the CONNECT with `code`, then waits for the client. */
function answersWith(code: number): Script {
  return async function answerConnect(peer) {
    await peer.greeting();
    await peer.write([0x05, 0x00]);
    await peer.request();
    await peer.write(reply(code));
    await peer.untilClosed();
  };
}

const REPLY_KINDS: readonly [number, string, "instance" | "destination"][] = [
  [0x01, "rejected", "instance"],
  [0x02, "rejected", "instance"],
  [0x03, "destination_unreachable", "destination"],
  [0x04, "destination_unreachable", "destination"],
  [0x05, "destination_refused", "destination"],
  [0x06, "destination_unreachable", "destination"],
  [0x07, "rejected", "instance"],
  [0x08, "rejected", "instance"],
  ...[0xf0, 0xf1, 0xf2, 0xf3, 0xf4, 0xf5, 0xf6, 0xf7].map((code) =>
    [code, "destination_unreachable", "destination"] as [number, string, "destination"]
  ),
  [0x09, "rejected", "instance"],
  [0xab, "rejected", "instance"],
];

for (const [code, kind, blame] of REPLY_KINDS) {
  const name = `0x${code.toString(16).padStart(2, "0")}`;
  Deno.test(`socksDialConn() and socksConnect() classify CONNECT reply ${name} as ${kind}`, () =>
    differential(answersWith(code), { kind, blame, reply: code }));
}

/** Scripted behaviours other than a reply code, and what both clients must make of them. */
const BEHAVIOURS: readonly {
  name: string;
  script: Script;
  expected: Expected;
  credentials?: boolean;
  timeoutMs?: number;
  onBound?: (address: string) => string | undefined;
}[] = [
  {
    name: "succeed and hand over the bytes after the reply",
    script: async (peer) => {
      assert.deepEqual(await peer.greeting(), [0x00]);
      await peer.write([0x05, 0x00]);
      assert.equal(await peer.request(), SECRET.host);
      await peer.write(reply(0x00), "hello");
    },
    expected: { stream: "hello" },
  },
  {
    name: "authenticate with RFC 1929 credentials",
    credentials: true,
    script: async (peer) => {
      assert.deepEqual(await peer.greeting(), [0x00, 0x02]);
      await peer.write([0x05, 0x02]);
      assert.deepEqual(await peer.auth(), CREDENTIALS);
      await peer.write([0x01, 0x00]);
      await peer.request();
      await peer.write(reply(0x00), "authed");
    },
    expected: { stream: "authed" },
  },
  {
    name: "read answers split byte by byte (a name as BND.ADDR)",
    credentials: true,
    script: async (peer) => {
      await peer.greeting();
      const bound = [0x05, 0x00, 0x00, 0x03, 10, ...encoder.encode("bound.test"), 0x00, 0x50];
      const answers = [[0x05, 0x02], [0x01, 0x00], bound];
      for (const [i, answer] of answers.entries()) {
        if (i === 1) await peer.auth();
        if (i === 2) await peer.request();
        for (const byte of answer) {
          await peer.write([byte]);
          await delay(3);
        }
      }
      await peer.write("split");
    },
    expected: { stream: "split" },
  },
  {
    name: "take answers coalesced with the destination's first bytes",
    credentials: true,
    script: async (peer) => {
      await peer.greeting();
      await peer.write([0x05, 0x02, 0x01, 0x00], reply(0x00), "early");
      await peer.auth();
      await peer.request();
      await peer.write("+late");
    },
    expected: { stream: "early+late" },
  },
  {
    name: "blame the instance for a greeting answer that is not SOCKS5",
    script: async (peer) => {
      await peer.greeting();
      await peer.write([0x04, 0x00]);
      await peer.untilClosed();
    },
    expected: { kind: "instance_protocol", blame: "instance" },
  },
  {
    name: "blame the instance for an HTTP answer",
    script: async (peer) => {
      await peer.greeting();
      await peer.write("HTTP/1.1 400 Bad Request\r\n\r\n");
      await peer.untilClosed();
    },
    expected: { kind: "instance_protocol", blame: "instance" },
  },
  {
    name: "blame the instance for no acceptable method (0xFF)",
    credentials: true,
    script: async (peer) => {
      await peer.greeting();
      await peer.write([0x05, 0xff]);
      await peer.untilClosed();
    },
    expected: { kind: "instance_protocol", blame: "instance" },
  },
  {
    name: "blame the instance for choosing username/password that was not offered",
    script: async (peer) => {
      await peer.greeting();
      await peer.write([0x05, 0x02]);
      await peer.untilClosed();
    },
    expected: { kind: "instance_protocol", blame: "instance" },
  },
  {
    name: "blame the instance for refusing the credentials",
    credentials: true,
    script: async (peer) => {
      await peer.greeting();
      await peer.write([0x05, 0x02]);
      await peer.auth();
      await peer.write([0x01, 0x01]);
      await peer.untilClosed();
    },
    expected: { kind: "instance_protocol", blame: "instance" },
  },
  {
    name: "blame the instance for closing after the greeting",
    script: async (peer) => void await peer.greeting(),
    expected: { kind: "instance_protocol", blame: "instance" },
  },
  {
    name: "blame the instance for closing in the middle of the reply",
    script: async (peer) => {
      await peer.greeting();
      await peer.write([0x05, 0x00]);
      await peer.request();
      await peer.write([0x05, 0x00, 0x00, 0x01, 127]);
    },
    expected: { kind: "instance_protocol", blame: "instance" },
  },
  {
    name: "blame the instance for a CONNECT reply that is not SOCKS5",
    script: async (peer) => {
      await peer.greeting();
      await peer.write([0x05, 0x00]);
      await peer.request();
      await peer.write([0x04, ...reply(0x00).slice(1)]);
      await peer.untilClosed();
    },
    expected: { kind: "instance_protocol", blame: "instance" },
  },
  {
    name: "blame the instance for an unknown address type in the reply",
    script: async (peer) => {
      await peer.greeting();
      await peer.write([0x05, 0x00]);
      await peer.request();
      await peer.write([0x05, 0x00, 0x00, 0x09, 1, 2, 3, 4, 0, 80]);
      await peer.untilClosed();
    },
    expected: { kind: "instance_protocol", blame: "instance" },
  },
  {
    name: "classify a refusal whose code comes in a later segment",
    script: async (peer) => {
      await peer.greeting();
      await peer.write([0x05, 0x00]);
      await peer.request();
      await peer.write([0x05]);
      await delay(20);
      await peer.write([0x04]);
      await peer.untilClosed();
    },
    expected: { kind: "destination_unreachable", blame: "destination", reply: 0x04 },
  },
  {
    name: "time out on an instance that never answers the greeting",
    timeoutMs: 300,
    script: async (peer) => {
      await peer.greeting();
      await peer.untilClosed();
    },
    expected: { kind: "timeout", blame: "instance" },
  },
  {
    name: "time out on an instance that never answers the CONNECT",
    timeoutMs: 300,
    script: async (peer) => {
      await peer.greeting();
      await peer.write([0x05, 0x00]);
      await peer.request();
      await peer.untilClosed();
    },
    expected: { kind: "timeout", blame: "instance" },
  },
  {
    name: "refuse a tunnel whose bound address onBound rejects",
    onBound: (address) => address === "127.0.0.1" ? "The instance reached this machine" : undefined,
    script: async (peer) => {
      await peer.greeting();
      await peer.write([0x05, 0x00]);
      await peer.request();
      await peer.write(reply(0x00, [127, 0, 0, 1]));
      await peer.untilClosed();
    },
    expected: { kind: "refused", blame: "instance" },
  },
];

for (const { name, script, expected, ...options } of BEHAVIOURS) {
  Deno.test(`socksDialConn() and socksConnect() ${name}`, () =>
    differential(script, expected, options));
}

Deno.test("socksDialConn() returns the bytes coalesced with the reply as leftover", async () => {
  const server = scripted(async (peer) => {
    await peer.greeting();
    await peer.write([0x05, 0x00]);
    await peer.request();
    await peer.write(reply(0x00), "GET-ahead");
    await peer.untilClosed();
  });
  const instance = { hostname: "127.0.0.1", port: server.port };
  const { conn, leftover } = await socksDialConn(instance, SECRET, { timeoutMs: 2000 });
  conn.close();
  await server.close();
  assert.equal(decoder.decode(leftover), "GET-ahead");
});

Deno.test("socksDialConn() leaves the conn open past its timeout and a later abort", async () => {
  const server = scripted(async (peer) => {
    await peer.greeting();
    await peer.write([0x05, 0x00]);
    await peer.request();
    await peer.write(reply(0x00));
    assert.equal(decoder.decode(await peer.read(2)), "go");
    await peer.write("still open");
  });
  const controller = new AbortController();
  const instance = { hostname: "127.0.0.1", port: server.port };
  const options = { timeoutMs: 100, signal: controller.signal };
  const { conn, leftover } = await settled(socksDialConn(instance, SECRET, options));
  // A timer or abort listener left behind would close the conn once the timeout passes.
  await delay(250);
  controller.abort();
  await writeAll(conn, encoder.encode("go"));
  const chunks = [leftover];
  const buffer = new Uint8Array(64);
  for (let n = await conn.read(buffer); n !== null; n = await conn.read(buffer)) {
    chunks.push(buffer.slice(0, n));
  }
  conn.close();
  await server.close();
  assert.equal(decoder.decode(concat(chunks)), "still open");
});

Deno.test("socksDialConn() and socksConnect() are aborted mid-handshake alike", async () => {
  let greeted = Promise.withResolvers<void>();
  const server = scripted(async (peer) => {
    await peer.greeting();
    greeted.resolve();
    await peer.untilClosed();
  });
  const instance = { hostname: "127.0.0.1", port: server.port };
  const outcomes: Outcome[] = [];
  const reasons: Error[] = [];
  for (const run of [viaNode, viaConn]) {
    greeted = Promise.withResolvers<void>();
    const controller = new AbortController();
    const outcome = run(instance, { timeoutMs: 5000, signal: controller.signal });
    await greeted.promise;
    reasons.push(new Error("The client went away"));
    controller.abort(reasons.at(-1));
    outcomes.push(await outcome);
  }
  await server.close();
  assertAgree(
    outcomes[0],
    outcomes[1],
    { kind: "aborted", blame: "instance" },
    `127.0.0.1:${server.port}`,
  );
  assert.equal("error" in outcomes[1] && outcomes[1].error.cause, reasons[1]);
});

Deno.test("socksDialConn() does not connect when the signal was aborted already", async () => {
  let accepted = 0;
  const server = scripted(() => Promise.resolve(void accepted++));
  const signal = AbortSignal.abort(new Error("Gone"));
  const instance = { hostname: "127.0.0.1", port: server.port };
  const outcome = await viaConn(instance, { timeoutMs: 2000, signal });
  await server.close();
  assert.equal("error" in outcome && outcome.error.kind, "aborted");
  assert.equal(accepted, 0);
});

Deno.test("socksDialConn() and socksConnect() blame a closed instance port alike", async () => {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const instance = { hostname: "127.0.0.1", port: listener.addr.port };
  listener.close();
  const node = await viaNode(instance, { timeoutMs: 2000 });
  const conn = await viaConn(instance, { timeoutMs: 2000 });
  const expected = { kind: "instance_unreachable", blame: "instance" } as const;
  assertAgree(node, conn, expected, `127.0.0.1:${instance.port}`);
  assert.ok("error" in conn && conn.error.cause instanceof Deno.errors.ConnectionRefused);
});

Deno.test("socksDialConn() throws RangeError for a bad timeout or target, before connecting", async () => {
  const instance = { hostname: "127.0.0.1", port: 9 };
  await assert.rejects(socksDialConn(instance, SECRET, { timeoutMs: 0 }), RangeError);
  await assert.rejects(
    socksDialConn(instance, { host: "x", port: 0 }, { timeoutMs: 1 }),
    RangeError,
  );
  await assert.rejects(
    socksDialConn(instance, { host: "", port: 80 }, { timeoutMs: 1 }),
    RangeError,
  );
});

Deno.test("socksDialConn() and socksConnect() keep Deno's NotCapable as the cause", async () => {
  const url = (path: string) => JSON.stringify(new URL(path, import.meta.url).href);
  const code = `
    import { socksConnect } from ${url("../src/egress/socks5.ts")};
    import { socksDialConn } from ${url("../src/egress/socks5_conn.ts")};
    const seen = [];
    for (const dial of [socksConnect, socksDialConn]) {
      const instance = { hostname: "127.0.0.1", port: 1 };
      const error = await dial(instance, { host: "x.test", port: 80 }, { timeoutMs: 2000 })
        .then(() => ({}), (error) => error);
      seen.push({ kind: error.kind, denied: error.cause instanceof Deno.errors.NotCapable });
    }
    console.log(JSON.stringify(seen));`;
  const script = await Deno.makeTempFile({ suffix: ".ts" });
  await Deno.writeTextFile(script, code);
  // Net access to another port only: the instance's port is denied by Deno, not by the kernel.
  const output = await new Deno.Command(Deno.execPath(), {
    args: ["run", "--no-prompt", "--allow-net=127.0.0.1:2", script],
    stdin: "null",
  }).output().finally(() => Deno.remove(script));
  assert.equal(output.code, 0, decoder.decode(output.stderr));
  const denied = { kind: "instance_unreachable", denied: true };
  assert.deepEqual(JSON.parse(decoder.decode(output.stdout)), [denied, denied]);
});

/**
 * A loopback port free right now, drawn below Linux's ephemeral range so the kernel does not hand
 * it out as a source port meanwhile (`tests/fixtures/gateway.ts` freePorts, which imports the
 * whole gateway).
 */
function freePort(): number {
  for (let tries = 0; tries < 100; tries++) {
    const port = 20_000 + Math.floor(Math.random() * 12_000);
    try {
      Deno.listen({ hostname: "127.0.0.1", port }).close();
      return port;
    } catch { /* taken: draw again */ }
  }
  throw new Error("No free loopback port in 20000-31999");
}

/** Starts microsocks on a free loopback port with `args` and waits until it accepts. */
async function startMicrosocks(binary: string, args: readonly string[] = []) {
  const port = freePort();
  const child = new Deno.Command(binary, {
    // -b 127.0.0.1: connect out from loopback, and pick the IPv4 address of `localhost`.
    args: ["-i", "127.0.0.1", "-p", String(port), "-b", "127.0.0.1", ...args],
    stdin: "null",
    stdout: "null",
    stderr: "null",
  }).spawn();
  async function stop(): Promise<void> {
    try {
      child.kill("SIGTERM");
    } catch { /* already gone */ }
    await child.status;
  }
  const accepts = async () => {
    try {
      (await Deno.connect({ hostname: "127.0.0.1", port })).close();
      return true;
    } catch {
      return false;
    }
  };
  const deadline = Date.now() + 3000;
  while (!await accepts()) {
    if (Date.now() > deadline) {
      await stop();
      throw new Error(`microsocks did not listen on 127.0.0.1:${port} within 3 s`);
    }
    await delay(20);
  }
  return { port, stop };
}

/** A tiny HTTP server on loopback: answers each request with its request line, then closes. */
function httpServer() {
  return scripted(async (peer) => {
    let head = "";
    while (!head.endsWith("\r\n\r\n")) head += decoder.decode(await peer.read(1));
    const line = head.split("\r\n")[0];
    await peer.write(`HTTP/1.1 200 OK\r\nContent-Length: ${line.length}\r\n\r\n${line}`);
  });
}

peerTest(
  "socksDialConn() reaches a named destination through microsocks, with and without auth",
  ["microsocks"],
  async ({ microsocks }, t) => {
    const upstream = httpServer();
    const open = await startMicrosocks(microsocks);
    const authed = await startMicrosocks(microsocks, ["-u", "alice", "-P", "s3cret"]);
    try {
      const target = { host: "localhost", port: upstream.port };
      const request = "GET /through-socks HTTP/1.1\r\nHost: localhost\r\n\r\n";
      const cases = [
        ["without credentials", { hostname: "127.0.0.1", port: open.port }],
        ["with credentials", { hostname: "127.0.0.1", port: authed.port, ...CREDENTIALS }],
      ] as const;
      for (const [name, instance] of cases) {
        await t.step(name, async () => {
          const { conn, leftover } = await socksDialConn(instance, target, { timeoutMs: 3000 });
          assert.equal(leftover.length, 0);
          await writeAll(conn, encoder.encode(request));
          const chunks: Uint8Array[] = [];
          const buffer = new Uint8Array(512);
          for (let n = await conn.read(buffer); n !== null; n = await conn.read(buffer)) {
            chunks.push(buffer.slice(0, n));
          }
          conn.close();
          assert.match(
            decoder.decode(concat(chunks)),
            /^HTTP\/1\.1 200 OK\r\n.*GET \/through-socks/s,
          );
        });
      }
      const wrong = { hostname: "127.0.0.1", port: authed.port, username: "alice", password: "x" };
      const where = `127.0.0.1:${authed.port}`;
      await t.step("a wrong password fails alike", async () => {
        const node = await viaNode(wrong, { timeoutMs: 3000 }, target);
        const conn = await viaConn(wrong, { timeoutMs: 3000 }, target);
        assertAgree(node, conn, { kind: "instance_protocol", blame: "instance" }, where);
      });
      await t.step("no credentials offered to an instance that insists fails alike", async () => {
        const bare = { hostname: "127.0.0.1", port: authed.port };
        const node = await viaNode(bare, { timeoutMs: 3000 }, target);
        const conn = await viaConn(bare, { timeoutMs: 3000 }, target);
        assertAgree(node, conn, { kind: "instance_protocol", blame: "instance" }, where);
      });
      await t.step("a closed destination port is the destination's refusal for both", async () => {
        const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
        const closed = { host: "localhost", port: listener.addr.port };
        listener.close();
        const instance = { hostname: "127.0.0.1", port: open.port };
        const node = await viaNode(instance, { timeoutMs: 3000 }, closed);
        const conn = await viaConn(instance, { timeoutMs: 3000 }, closed);
        const expected = {
          kind: "destination_refused",
          blame: "destination",
          reply: 0x05,
        } as const;
        assertAgree(node, conn, expected, `127.0.0.1:${open.port}`);
      });
    } finally {
      await open.stop();
      await authed.stop();
      await upstream.close();
    }
  },
);
