import assert from "node:assert/strict";
import { request as httpRequest } from "node:http";
import { Agent } from "node:http";
import type { Socket } from "node:net";
import {
  socksConnect,
  SocksError,
  type SocksFailureKind,
  type SocksInstance,
} from "../src/egress/socks5.ts";
import { encodeConnect } from "../src/egress/socks5_wire.ts";
import { writeAll } from "./fixtures/http_client.ts";
import { SocksFixture, type SocksFixtureOptions } from "./fixtures/socks5.ts";

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** A loopback TCP server whose handler gets each conn; `close()` waits for every handler. */
function tcpServer(handle: (conn: Deno.Conn) => Promise<void>, hostname = "127.0.0.1") {
  const listener = Deno.listen({ hostname, port: 0 });
  const conns = new Set<Deno.Conn>();
  const tasks: Promise<void>[] = [];
  const loop = (async () => {
    for (;;) {
      let conn: Deno.Conn;
      try {
        conn = await listener.accept();
      } catch {
        return;
      }
      conns.add(conn);
      tasks.push(
        handle(conn).catch(() => {}).finally(() => {
          conns.delete(conn);
          try {
            conn.close();
          } catch { /* closed */ }
        }),
      );
    }
  })();
  return {
    port: listener.addr.port,
    async close() {
      listener.close();
      for (const conn of conns) conn.close();
      await loop;
      await Promise.all(tasks);
    },
  };
}

/** Echoes every byte back until the peer closes. */
async function echo(conn: Deno.Conn): Promise<void> {
  const buffer = new Uint8Array(4096);
  for (let n = await conn.read(buffer); n !== null; n = await conn.read(buffer)) {
    await writeAll(conn, buffer.subarray(0, n));
  }
}

/** Reads from a node socket until `n` bytes arrived or it ended (at most 2 s); returns what came. */
function readBytes(socket: Socket, n = Infinity): Promise<Uint8Array> {
  return new Promise((resolve, reject) => {
    const chunks: Uint8Array[] = [];
    let total = 0;
    const timer = setTimeout(done, 2000);
    function detach() {
      clearTimeout(timer);
      socket.off("data", onData).off("end", done).off("close", done).off("error", onError);
    }
    function done() {
      detach();
      resolve(new Uint8Array(chunks.flatMap((c) => [...c])));
    }
    function onError(error: Error) {
      detach();
      reject(error);
    }
    function onData(chunk: Uint8Array) {
      chunks.push(chunk);
      total += chunk.length;
      if (total >= n) done();
    }
    socket.on("data", onData).on("end", done).on("close", done).on("error", onError);
  });
}

/** Destroys a node socket and waits until it is closed. */
function destroy(socket: Socket): Promise<void> {
  return new Promise((resolve) => {
    if (socket.closed) return resolve();
    socket.once("close", () => resolve());
    socket.destroy();
  });
}

/** Asserts that a socksConnect attempt fails with a classified SocksError. */
async function assertFails(
  attempt: Promise<Socket>,
  kind: SocksFailureKind,
  blame: "instance" | "destination",
  reply?: number,
): Promise<SocksError> {
  const error = await attempt.then(
    () => assert.fail(`Expected ${kind}`),
    (e: unknown) => e,
  );
  assert.ok(error instanceof SocksError, `Not a SocksError: ${error}`);
  assert.equal(error.kind, kind, error.message);
  assert.equal(error.blame, blame);
  assert.equal(error.reply, reply);
  assert.match(error.message, /^[A-Z].*[^.]$/);
  return error;
}

/** Runs `body` against a fixture and stops it afterwards. */
async function withFixture(
  options: SocksFixtureOptions,
  body: (fixture: SocksFixture, instance: SocksInstance) => Promise<void>,
): Promise<void> {
  const fixture = await SocksFixture.start(options);
  try {
    await body(fixture, { hostname: "127.0.0.1", port: fixture.port });
  } finally {
    await fixture.stop();
  }
}

const QUICK = { timeoutMs: 2000 };

Deno.test("socksConnect() relays bytes both ways to an IPv4 destination", async () => {
  const server = tcpServer(echo);
  await withFixture({}, async (fixture, instance) => {
    const socket = await socksConnect(instance, { host: "127.0.0.1", port: server.port }, QUICK);
    socket.write("ping through socks");
    assert.equal(decoder.decode(await readBytes(socket, 18)), "ping through socks");
    await destroy(socket);
    assert.deepEqual(fixture.connects, [{ host: "127.0.0.1", port: server.port, atyp: "ipv4" }]);
  });
  await server.close();
});

Deno.test("socksConnect() sends a domain name unresolved (ATYP 3)", async () => {
  const server = tcpServer(echo);
  const resolve = { "shop.example.onion": { hostname: "127.0.0.1", port: server.port } };
  await withFixture({ resolve }, async (fixture, instance) => {
    const socket = await socksConnect(instance, { host: "shop.example.onion", port: 80 }, QUICK);
    socket.write("hi");
    assert.equal(decoder.decode(await readBytes(socket, 2)), "hi");
    await destroy(socket);
    assert.deepEqual(fixture.connects[0], { host: "shop.example.onion", port: 80, atyp: "domain" });
  });
  await server.close();
});

Deno.test("socksConnect() sends an IPv6 literal as ATYP 4", async () => {
  await withFixture({ mode: "reply", replyCode: 0x04 }, async (fixture, instance) => {
    await assertFails(
      socksConnect(instance, { host: "[2001:db8::1]", port: 443 }, QUICK),
      "destination_unreachable",
      "destination",
      0x04,
    );
    assert.deepEqual(fixture.connects, [{ host: "2001:db8::1", port: 443, atyp: "ipv6" }]);
  });
});

Deno.test("encodeConnect() encodes IPv4, IPv6 and domain targets byte for byte", () => {
  assert.deepEqual([...encodeConnect("192.0.2.7", 8080)], [5, 1, 0, 1, 192, 0, 2, 7, 0x1f, 0x90]);
  const loopback6 = [5, 1, 0, 4, ...Array(15).fill(0), 1, 0x01, 0xbb];
  assert.deepEqual([...encodeConnect("::1", 443)], loopback6);
  assert.deepEqual([...encodeConnect("[::1]", 443)], loopback6);
  assert.deepEqual(
    [...encodeConnect("[2001:db8::ffff:1.2.3.4]", 80)],
    [5, 1, 0, 4, 0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 1, 2, 3, 4, 0, 80],
  );
  assert.deepEqual(
    [...encodeConnect("Ab.onion", 80)],
    [5, 1, 0, 3, 8, ...encoder.encode("Ab.onion"), 0, 80],
  );
  assert.equal(encodeConnect("a".repeat(255), 1).length, 4 + 1 + 255 + 2);
  assert.throws(() => encodeConnect("a".repeat(256), 1), RangeError);
  assert.throws(() => encodeConnect("", 1), RangeError);
  assert.throws(() => encodeConnect("[not-v6]", 1), RangeError);
  assert.throws(() => encodeConnect("x.onion", 65536), RangeError);
});

Deno.test("socksConnect() blames the instance when its port is closed", async () => {
  await withFixture({ mode: "refuse" }, async (fixture, instance) => {
    const target = { host: "127.0.0.1", port: 9 };
    const error = await assertFails(
      socksConnect(instance, target, QUICK),
      "instance_unreachable",
      "instance",
    );
    assert.match(error.message, new RegExp(`127\\.0\\.0\\.1:${fixture.port}`));
    assert.equal(fixture.accepted, 0);
  });
});

Deno.test("socksConnect() times out a hung instance within timeoutMs", async () => {
  await withFixture({ mode: "hang" }, async (fixture, instance) => {
    const started = performance.now();
    const target = { host: "shop.example.onion", port: 80 };
    const error = await assertFails(
      socksConnect(instance, target, { timeoutMs: 200 }),
      "timeout",
      "instance",
    );
    const elapsed = performance.now() - started;
    assert.ok(elapsed >= 190 && elapsed < 1000, `Took ${elapsed} ms`);
    assert.equal(fixture.accepted, 1);
    assert.doesNotMatch(error.message, /shop/);
  });
});

Deno.test("socksConnect() reports reset and garbage answers as instance_protocol", async () => {
  for (const mode of ["reset", "garbage"] as const) {
    await withFixture({ mode }, async (_fixture, instance) => {
      const target = { host: "127.0.0.1", port: 9 };
      await assertFails(socksConnect(instance, target, QUICK), "instance_protocol", "instance");
    });
  }
});

Deno.test("socksConnect() classifies CONNECT reply codes", async () => {
  const cases: [number, SocksFailureKind, "instance" | "destination"][] = [
    [0x04, "destination_unreachable", "destination"],
    [0x05, "destination_refused", "destination"],
    [0x01, "rejected", "instance"],
    [0x02, "rejected", "instance"],
    [0xf1, "destination_unreachable", "destination"],
    [0x99, "rejected", "instance"],
  ];
  for (const [replyCode, kind, blame] of cases) {
    await withFixture({ mode: "reply", replyCode }, async (_fixture, instance) => {
      const target = { host: "secret-name.onion", port: 80 };
      const error = await assertFails(
        socksConnect(instance, target, QUICK),
        kind,
        blame,
        replyCode,
      );
      assert.doesNotMatch(error.message, /secret-name/);
    });
  }
});

Deno.test("socksConnect() passes on the instance's own resolve and connect failures", async () => {
  const closed = tcpServer(echo);
  const closedPort = closed.port;
  await closed.close();
  await withFixture({}, async (_fixture, instance) => {
    const unknown = { host: "nowhere.onion", port: 80 };
    await assertFails(
      socksConnect(instance, unknown, QUICK),
      "destination_unreachable",
      "destination",
      0x04,
    );
    const refused = { host: "127.0.0.1", port: closedPort };
    await assertFails(
      socksConnect(instance, refused, QUICK),
      "destination_refused",
      "destination",
      0x05,
    );
  });
});

Deno.test("socksConnect() stops when the caller's signal aborts", async () => {
  await withFixture({ mode: "hang" }, async (fixture, instance) => {
    const target = { host: "127.0.0.1", port: 9 };
    const already = AbortSignal.abort();
    await assertFails(
      socksConnect(instance, target, { timeoutMs: 2000, signal: already }),
      "aborted",
      "instance",
    );
    assert.equal(fixture.accepted, 0);
    const controller = new AbortController();
    const attempt = socksConnect(instance, target, { timeoutMs: 2000, signal: controller.signal });
    while (fixture.accepted === 0) await new Promise((r) => setTimeout(r, 5));
    controller.abort();
    const started = performance.now();
    await assertFails(attempt, "aborted", "instance");
    assert.ok(performance.now() - started < 100);
  });
});

Deno.test("socksConnect() authenticates with username and password (RFC 1929)", async () => {
  const server = tcpServer(echo);
  const requireAuth = { username: "alice", password: "s3cret" };
  await withFixture({ requireAuth }, async (fixture, instance) => {
    const target = { host: "127.0.0.1", port: server.port };
    const socket = await socksConnect({ ...instance, ...requireAuth }, target, QUICK);
    socket.write("ok");
    assert.equal(decoder.decode(await readBytes(socket, 2)), "ok");
    await destroy(socket);
    assert.equal(fixture.connects[0].username, "alice");
    const wrong = { ...instance, username: "alice", password: "guess" };
    await assertFails(socksConnect(wrong, target, QUICK), "instance_protocol", "instance");
    await assertFails(socksConnect(instance, target, QUICK), "instance_protocol", "instance");
    assert.equal(fixture.connects.length, 1);
  });
  await server.close();
});

Deno.test("socksConnect() reads a reply split across segments and keeps the bytes after it", async () => {
  const pause = () => new Promise((r) => setTimeout(r, 15));
  const server = tcpServer(async (conn) => {
    const buffer = new Uint8Array(512);
    await conn.read(buffer); // greeting
    for (const byte of [0x05, 0x00]) {
      await writeAll(conn, Uint8Array.of(byte));
      await pause();
    }
    await conn.read(buffer); // CONNECT
    const bound = [0x05, 0x00, 0x00, 0x03, 9, ...encoder.encode("relay.tor"), 0x1f, 0x90];
    await writeAll(conn, Uint8Array.from(bound.slice(0, 3)));
    await pause();
    await writeAll(conn, Uint8Array.from(bound.slice(3, 6)));
    await pause();
    await writeAll(conn, Uint8Array.from([...bound.slice(6), ...encoder.encode("early bytes")]));
    await conn.read(buffer); // until the client closes
  });
  const instance = { hostname: "127.0.0.1", port: server.port };
  const socket = await socksConnect(instance, { host: "x.onion", port: 80 }, QUICK);
  await new Promise((r) => setTimeout(r, 20)); // no listener yet: nothing may be lost
  assert.equal(decoder.decode(await readBytes(socket, 11)), "early bytes");
  await destroy(socket);
  await server.close();
});

Deno.test("SocksFixture die_mid_stream cuts the stream after dieAfterBytes", async () => {
  const server = tcpServer((conn) => writeAll(conn, new Uint8Array(5000).fill(0x61)));
  await withFixture({ mode: "die_mid_stream", dieAfterBytes: 100 }, async (_fixture, instance) => {
    const socket = await socksConnect(instance, { host: "127.0.0.1", port: server.port }, QUICK);
    const got = await readBytes(socket);
    assert.equal(got.length, 100);
    await destroy(socket);
  });
  await server.close();
});

Deno.test('SocksFixture kill()/restart() and mode "refuse" take the instance down and up', async () => {
  const server = tcpServer(echo);
  await withFixture({}, async (fixture, instance) => {
    const target = { host: "localhost", port: server.port };
    const socket = await socksConnect(instance, target, QUICK);
    const ended = readBytes(socket);
    fixture.kill();
    assert.equal((await ended).length, 0);
    await assertFails(socksConnect(instance, target, QUICK), "instance_unreachable", "instance");
    await fixture.restart();
    const again = await socksConnect(instance, target, QUICK);
    await destroy(again);
    assert.equal(fixture.accepted, 2);
    fixture.mode = "refuse";
    await assertFails(socksConnect(instance, target, QUICK), "instance_unreachable", "instance");
    fixture.mode = "normal";
    await destroy(await socksConnect(instance, target, QUICK));
    assert.equal(fixture.accepted, 3);
  });
  await server.close();
});

Deno.test("socksConnect() serves a node:http Agent's createConnection", async () => {
  const http = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen() {} },
    () => new Response("hello over socks"),
  );
  const resolve = { "shop.onion": { hostname: "127.0.0.1", port: http.addr.port } };
  await withFixture({ resolve }, async (fixture, instance) => {
    const agent = new Agent({ keepAlive: false });
    // deno-lint-ignore no-explicit-any
    (agent as any).createConnection = function socksConnection(
      options: { host: string; port: number },
      callback: (error: Error | null, socket?: Socket) => void,
    ) {
      socksConnect(instance, { host: options.host, port: options.port }, QUICK).then(
        (socket) => callback(null, socket),
        (error) => callback(error),
      );
    };
    const body = await new Promise<string>((resolve, reject) => {
      const req = httpRequest({ host: "shop.onion", port: 80, path: "/", agent }, (res) => {
        let text = "";
        res.setEncoding("utf8");
        res.on("data", (chunk: string) => (text += chunk));
        res.on("end", () => resolve(text));
        res.on("error", reject);
      });
      req.on("error", reject);
      req.end();
    });
    assert.equal(body, "hello over socks");
    assert.deepEqual(fixture.connects[0], { host: "shop.onion", port: 80, atyp: "domain" });
    agent.destroy();
  });
  await http.shutdown();
});
