import assert from "node:assert/strict";
import net from "node:net";
import type { Duplex } from "node:stream";
import tls from "node:tls";
import { readClientHello } from "../src/tls/client_hello.ts";
import {
  type PassthroughBackend,
  type PassthroughOptions,
  type PassthroughRoute,
  servePassthrough,
} from "../src/tls/passthrough.ts";
import { boundedTest } from "./fixtures/bounded_test.ts";

/** A sanitized test bounded to 3000 ms (a broken pipe fails instead of hanging). */
function strictTest(name: string, fn: () => void | Promise<void>): void {
  boundedTest(name, fn, 3000);
}

const encoder = new TextEncoder();
const u16 = (n: number) => [(n >> 8) & 255, n & 255];
const vec16 = (bytes: readonly number[]) => [...u16(bytes.length), ...bytes];

/**
 * A one-record TLS 1.3-style ClientHello (RFC 8446 §4.1.2) with `name` as its SNI and `padding`
 * bytes of padding extension (RFC 7685).
 */
function clientHello(name: string, padding = 0): Uint8Array {
  const sni = [...u16(0), ...vec16(vec16([0, ...vec16([...encoder.encode(name)])]))];
  const pad = padding > 0 ? [...u16(21), ...vec16(new Array(padding).fill(0))] : [];
  const extensions = vec16([...sni, ...pad]);
  const body = [3, 3, ...new Array(32).fill(1), 0, ...vec16([0x13, 0x01]), 1, 0, ...extensions];
  const message = [1, 0, ...u16(body.length), ...body];
  return new Uint8Array([22, 3, 1, ...u16(message.length), ...message]);
}

/** A loopback node:net server; `close()` destroys its connections and waits for it to stop. */
async function listen(onConnection: (socket: net.Socket) => void) {
  const sockets = new Set<net.Socket>();
  const server = net.createServer((socket) => {
    sockets.add(socket);
    socket.once("close", () => sockets.delete(socket));
    onConnection(socket);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    port: (server.address() as net.AddressInfo).port,
    async close() {
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

/** A TCP echo backend that records, per connection, every byte it received. */
async function echoBackend() {
  const received: Uint8Array[] = [];
  const server = await listen((socket) => {
    const index = received.push(new Uint8Array(0)) - 1;
    socket.on("error", () => {});
    socket.on("data", (chunk: Uint8Array) => {
      received[index] = new Uint8Array([...received[index], ...chunk]);
      socket.write(chunk);
    });
  });
  return { ...server, received };
}

/** Fake gateway hooks that record every call; `released` settles on the first release. */
function fakeOptions(routes: Record<string, readonly PassthroughBackend[]>, admit = true) {
  const calls = {
    lookups: [] as string[],
    admits: 0,
    connects: [] as PassthroughBackend[],
    releases: [] as boolean[],
    logs: [] as string[],
  };
  let onRelease!: () => void;
  const released = new Promise<void>((resolve) => onRelease = resolve);
  const options = {
    helloTimeoutMs: 2000,
    lookup(name: string): PassthroughRoute | undefined {
      calls.lookups.push(name);
      const backends = routes[name];
      return backends === undefined ? undefined : { backends };
    },
    admit() {
      calls.admits++;
      if (!admit) return undefined;
      return (ok: boolean) => {
        calls.releases.push(ok);
        onRelease();
      };
    },
    connect(target: PassthroughBackend): Promise<Duplex> {
      calls.connects.push(target);
      return new Promise((resolve, reject) => {
        const socket = net.connect(target.port, target.host);
        socket.once("error", reject);
        socket.once("connect", () => {
          socket.off("error", reject);
          resolve(socket);
        });
      });
    },
    log: (line: string) => calls.logs.push(line),
  } satisfies PassthroughOptions;
  return { options, calls, released };
}

/** A gateway listener that hands each connection to servePassthrough; `accepted` lists them. */
async function gateway(options: PassthroughOptions) {
  const accepted: net.Socket[] = [];
  const server = await listen((socket) => {
    accepted.push(socket);
    servePassthrough(socket, options);
  });
  return { ...server, accepted };
}

/** A client connection that records what it receives and when it closed. */
async function client(port: number) {
  const socket = net.connect(port, "127.0.0.1");
  let received = new Uint8Array(0);
  const waiters: (() => void)[] = [];
  socket.on("data", (chunk: Uint8Array) => {
    received = new Uint8Array([...received, ...chunk]);
    for (const wake of waiters.splice(0)) wake();
  });
  socket.on("error", () => {});
  const closed = new Promise<number>((resolve) => socket.once("close", () => resolve(Date.now())));
  await new Promise((resolve) => socket.once("connect", resolve));
  return {
    socket,
    closed,
    received: () => received,
    /** Resolves once `length` bytes have arrived in total. */
    async until(length: number): Promise<Uint8Array> {
      while (received.length < length) await new Promise<void>((wake) => waiters.push(wake));
      return received;
    },
  };
}

/** A backend address that refuses connections: a port just freed. */
async function refusingBackend(): Promise<PassthroughBackend> {
  const server = await listen(() => {});
  await server.close();
  return { host: "127.0.0.1", port: server.port };
}

strictTest("servePassthrough() pipes the ClientHello, then every byte both ways", async () => {
  const backend = await echoBackend();
  const target = { host: "127.0.0.1", port: backend.port };
  const { options, calls, released } = fakeOptions({ "shop.example": [target] });
  const front = await gateway(options);
  const hello = clientHello("Shop.Example", 5000);
  const peer = await client(front.port);
  for (const [from, to] of [[0, 20], [20, 3000], [3000, hello.length]]) {
    await new Promise((resolve) => peer.socket.write(hello.subarray(from, to), resolve));
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
  assert.deepEqual(await peer.until(hello.length), hello);
  const after = encoder.encode("application bytes after the hello");
  peer.socket.write(after);
  const expected = new Uint8Array([...hello, ...after]);
  assert.deepEqual(await peer.until(expected.length), expected);
  // The hello phase's listeners are gone: only the pipe reads the client now.
  assert.equal(front.accepted[0].listenerCount("data"), 1);
  peer.socket.end();
  await peer.closed;
  await released;
  await front.close();
  await backend.close();
  assert.deepEqual(backend.received, [expected]);
  assert.deepEqual(calls.lookups, ["shop.example"]);
  assert.deepEqual(calls.connects, [target]);
  assert.deepEqual(calls.releases, [true]);
});

strictTest("servePassthrough() forwards bytes that arrive with the ClientHello", async () => {
  const backend = await echoBackend();
  const { options, released } = fakeOptions({
    "shop.example": [{ host: "127.0.0.1", port: backend.port }],
  });
  const front = await gateway(options);
  const bytes = new Uint8Array([...clientHello("shop.example"), 20, 3, 3, 0, 1, 1]);
  const peer = await client(front.port);
  peer.socket.write(bytes);
  assert.deepEqual(await peer.until(bytes.length), bytes);
  peer.socket.destroy();
  await released;
  assert.deepEqual(backend.received, [bytes]);
  await front.close();
  await backend.close();
});

strictTest(
  "servePassthrough() closes the client when the backend ends, releasing once",
  async () => {
    const backend = await listen((socket) => socket.end("bye"));
    const { options, calls, released } = fakeOptions({
      "shop.example": [{ host: "127.0.0.1", port: backend.port }],
    });
    const front = await gateway(options);
    const peer = await client(front.port);
    peer.socket.write(clientHello("shop.example"));
    await peer.closed;
    await released;
    await front.close();
    await backend.close();
    assert.deepEqual(peer.received(), encoder.encode("bye"));
    assert.deepEqual(calls.releases, [true]);
  },
);

strictTest(
  "servePassthrough() closes on an unknown SNI without admitting or connecting",
  async () => {
    const { options, calls } = fakeOptions({ "shop.example": [] });
    const front = await gateway(options);
    const peer = await client(front.port);
    peer.socket.write(clientHello("secret.example"));
    await peer.closed;
    assert.equal(peer.received().length, 0);
    assert.deepEqual(calls.lookups, ["secret.example"]);
    assert.equal(calls.admits, 0);
    assert.deepEqual(calls.connects, []);
    assert.deepEqual(calls.logs, ["passthrough: closed: unknown SNI"]);
    await front.close();
  },
);

strictTest("servePassthrough() holds bytes sent while the backend connect is pending", async () => {
  const backend = await echoBackend();
  const { options, released } = fakeOptions({
    "shop.example": [{ host: "127.0.0.1", port: backend.port }],
  });
  const slowConnect = async (target: PassthroughBackend) => {
    await new Promise((resolve) => setTimeout(resolve, 100));
    return options.connect(target);
  };
  const front = await gateway({ ...options, connect: slowConnect });
  const peer = await client(front.port);
  const bytes = new Uint8Array([...clientHello("shop.example"), ...encoder.encode("early")]);
  peer.socket.write(bytes.subarray(0, -5));
  await new Promise((resolve) => setTimeout(resolve, 20));
  peer.socket.write(bytes.subarray(-5));
  assert.deepEqual(await peer.until(bytes.length), bytes);
  peer.socket.end();
  await released;
  await front.close();
  await backend.close();
  assert.deepEqual(backend.received, [bytes]);
});

strictTest("servePassthrough() closes on bytes that are not a ClientHello", async () => {
  const { options, calls } = fakeOptions({});
  const front = await gateway(options);
  const peer = await client(front.port);
  peer.socket.write("GET / HTTP/1.1\r\nHost: shop.example\r\n\r\n");
  await peer.closed;
  assert.deepEqual(calls.lookups, []);
  assert.match(calls.logs.join("\n"), /invalid ClientHello \(Not a TLS handshake record\)/);
  await front.close();
});

strictTest("servePassthrough() closes after helloTimeoutMs without a complete hello", async () => {
  const { options, calls } = fakeOptions({ "shop.example": [] });
  const front = await gateway({ ...options, helloTimeoutMs: 200 });
  const peer = await client(front.port);
  const started = Date.now();
  peer.socket.write(clientHello("shop.example").subarray(0, 30));
  const elapsed = (await peer.closed) - started;
  assert.ok(elapsed >= 180 && elapsed < 1500, `closed after ${elapsed} ms`);
  assert.deepEqual(calls.lookups, []);
  assert.equal(calls.admits, 0);
  assert.deepEqual(calls.logs, ["passthrough: closed: no ClientHello within 200 ms"]);
  await front.close();
});

strictTest("servePassthrough() closes when admission is refused, never connecting", async () => {
  const { options, calls } = fakeOptions(
    { "shop.example": [{ host: "127.0.0.1", port: 9 }] },
    false,
  );
  const front = await gateway(options);
  const peer = await client(front.port);
  peer.socket.write(clientHello("shop.example"));
  await peer.closed;
  assert.equal(calls.admits, 1);
  assert.deepEqual(calls.connects, []);
  assert.deepEqual(calls.logs, ["passthrough: closed: admission refused"]);
  await front.close();
});

strictTest("servePassthrough() tries the next backend when one fails to connect", async () => {
  const dead = await refusingBackend();
  const backend = await echoBackend();
  const live = { host: "127.0.0.1", port: backend.port };
  const { options, calls, released } = fakeOptions({ "shop.example": [dead, live] });
  const front = await gateway(options);
  const peer = await client(front.port);
  const hello = clientHello("shop.example");
  peer.socket.write(hello);
  assert.deepEqual(await peer.until(hello.length), hello);
  peer.socket.end();
  await released;
  await front.close();
  await backend.close();
  assert.deepEqual(calls.connects, [dead, live]);
  assert.deepEqual(backend.received, [hello]);
  assert.deepEqual(calls.releases, [true]);
  assert.match(calls.logs[0], /^passthrough: backend 1 of 2 failed: ECONNREFUSED$/);
});

strictTest("servePassthrough() releases false and closes when no backend connects", async () => {
  const dead = await refusingBackend();
  const { options, calls, released } = fakeOptions({ "shop.example": [dead, dead] });
  const front = await gateway(options);
  const peer = await client(front.port);
  peer.socket.write(clientHello("shop.example"));
  await peer.closed;
  await released;
  await front.close();
  assert.equal(calls.connects.length, 2);
  assert.deepEqual(calls.releases, [false]);
  assert.equal(calls.logs.at(-1), "passthrough: closed: no backend reachable");
});

strictTest(
  "servePassthrough() routes a real TLS client and hands its hello to the backend",
  async () => {
    let onHello!: (bytes: Uint8Array) => void;
    const seen = new Promise<Uint8Array>((resolve) => onHello = resolve);
    const backend = await listen((socket) => {
      let bytes = new Uint8Array(0);
      socket.on("error", () => {});
      socket.on("data", (chunk: Uint8Array) => {
        bytes = new Uint8Array([...bytes, ...chunk]);
        if (readClientHello(bytes).kind !== "incomplete") onHello(bytes);
      });
    });
    const { options, calls, released } = fakeOptions({
      "shop.example": [{ host: "127.0.0.1", port: backend.port }],
    });
    const front = await gateway(options);
    const tlsClient = tls.connect({
      host: "127.0.0.1",
      port: front.port,
      servername: "shop.example",
      rejectUnauthorized: false,
    });
    tlsClient.on("error", () => {});
    const clientClosed = new Promise((resolve) => tlsClient.once("close", resolve));
    assert.deepEqual(readClientHello(await seen), { kind: "hello", serverName: "shop.example" });
    tlsClient.destroy();
    await clientClosed;
    await released;
    await front.close();
    await backend.close();
    assert.deepEqual(calls.releases, [true]);
    assert.ok(calls.logs.every((line) => !line.includes("shop.example")));
  },
);
