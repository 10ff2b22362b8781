/**
 * Kills operator-mutation survivors in src/proxy/ (hygiene.ts, inward.ts, owned_attempt.ts,
 * owned_body.ts): each test names the rule it guards. The owned attempt and its body relay run in
 * process against a scripted loopback upstream, with the pool and the client response as the
 * gateway has them, so what the upstream received, what the client got, how the failure was
 * classified and whether the connection went back to the pool are all seen from outside.
 *
 * @module
 */
import assert from "node:assert/strict";
import { EventEmitter } from "node:events";
import http from "node:http";
import type { LocalMachine } from "../src/egress/local_machine.ts";
import { OwnedConn, OwnedConns } from "../src/egress/owned_conns.ts";
import { inwardMessage, inwardProblems } from "../src/proxy/inward.ts";
import type { TenantRegistry } from "../src/proxy/tenants.ts";
import { downstreamHeaders, type ForwardContext, upstreamHeaders } from "../src/proxy/hygiene.ts";
import { AddressSet } from "../src/request/cidr.ts";
import type { Attempt, Forward } from "../src/proxy/attempt.ts";
import { AttemptFailure } from "../src/proxy/attempt_failure.ts";
import { canOwn, requestHead, sendOwnedAttempt } from "../src/proxy/owned_attempt.ts";
import type { RequestContext } from "../src/request/context.ts";
import { DEFAULT_PACING, relayCollections, setRelayPacing } from "../src/request/relay_memory.ts";
import { freePorts } from "./fixtures/free_ports.ts";

function latin1(bytes: Uint8Array): string {
  let text = "";
  for (let i = 0; i < bytes.length; i += 8192) {
    text += String.fromCharCode(...bytes.subarray(i, i + 8192));
  }
  return text;
}
const TCHARS = "!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

Deno.test("requestHead() writes the request line, each field and keep-alive, one byte per char", () => {
  const head = requestHead("GET", "/a?b=\xff", [
    "Host",
    "up:80",
    "X-Obs",
    "caf\xe9\t",
    "X-Empty",
    "",
  ]);
  assert.equal(
    latin1(head),
    "GET /a?b=\xff HTTP/1.1\r\nHost: up:80\r\nX-Obs: caf\xe9\t\r\nX-Empty: \r\n" +
      "Connection: keep-alive\r\n\r\n",
  );
  assert.equal(head[9], 0xff);
  assert.equal(
    latin1(requestHead("OPTIONS", "*", [])),
    "OPTIONS * HTTP/1.1\r\nConnection: keep-alive\r\n\r\n",
  );
});

Deno.test("requestHead() takes every tchar in a method and a name, and refuses any other byte anywhere", () => {
  assert.equal(latin1(requestHead(TCHARS, "/", [TCHARS, "v"])).split("\r\n")[1], `${TCHARS}: v`);
  for (let b = 0; b < 256; b++) {
    const c = String.fromCharCode(b);
    if (TCHARS.includes(c)) continue;
    for (const token of [`${c}X`, `X${c}Y`, `X${c}`, c]) {
      assert.throws(() => requestHead(token, "/", []), TypeError, `method byte ${b}`);
      assert.throws(() => requestHead("GET", "/", [token, "v"]), TypeError, `name byte ${b}`);
    }
  }
  assert.throws(() => requestHead("", "/", []), TypeError);
  assert.throws(() => requestHead("GET", "/", ["", "v"]), TypeError);
});

Deno.test("requestHead() takes visible bytes and obs-text in a target, never a space or a control", () => {
  for (let b = 0; b < 256; b++) {
    const c = String.fromCharCode(b);
    const visible = (b >= 0x21 && b <= 0x7e) || b >= 0x80;
    for (const target of [`${c}a`, `/${c}a`, `/a${c}`, c]) {
      if (visible) assert.equal(latin1(requestHead("GET", target, [])).split(" ")[1], target);
      else assert.throws(() => requestHead("GET", target, []), TypeError, `target byte ${b}`);
    }
  }
  assert.throws(() => requestHead("GET", "", []), TypeError);
  assert.throws(
    () => requestHead("GET", "/a b", []),
    (e) => e instanceof TypeError && e.message === 'Refused to write request line "GET /a b"',
  );
});

Deno.test("requestHead() takes tabs, visible bytes and obs-text in a value, never CR, LF, NUL or DEL", () => {
  for (let b = 0; b < 256; b++) {
    const c = String.fromCharCode(b);
    const field = b === 0x09 || (b >= 0x20 && b <= 0x7e) || b >= 0x80;
    for (const value of [`${c}a`, `a${c}b`, `a${c}`, c]) {
      const write = () => requestHead("GET", "/", ["X", value]);
      if (field) assert.equal(latin1(write()).split("\r\n")[1], `X: ${value}`);
      else assert.throws(write, TypeError, `value byte ${b}`);
    }
  }
  assert.throws(
    () => requestHead("GET", "/", ["X", "a\r\nEvil: 1"]),
    (e) => e instanceof TypeError && e.message === 'Refused to write header field "X"',
  );
});

/** What a scripted upstream connection does once a request head arrived: its reply pieces. */
type Reply = readonly (string | { readonly waitMs: number } | "close")[];

/**
 * A loopback upstream that answers the n-th request head (over all connections) with
 * `replies[n]`; records the heads and counts connections.
 */
function upstream(replies: readonly Reply[]) {
  const [port] = freePorts(1);
  const listener = Deno.listen({ hostname: "127.0.0.1", port });
  const heads: string[] = [];
  const conns: Deno.Conn[] = [];
  /** Reply pieces written (or closes done) so far, over all connections. */
  const done = { pieces: 0 };
  const serve = async (conn: Deno.Conn) => {
    const buf = new Uint8Array(65536);
    let pending = "";
    for (;;) {
      const n = await conn.read(buf).catch(() => null);
      if (n === null) break;
      pending += latin1(buf.subarray(0, n));
      for (let end = pending.indexOf("\r\n\r\n"); end >= 0; end = pending.indexOf("\r\n\r\n")) {
        heads.push(pending.slice(0, end + 4));
        pending = pending.slice(end + 4);
        for (const piece of replies[heads.length - 1] ?? ["close"]) {
          if (piece === "close") {
            done.pieces++;
            try {
              conn.close();
            } catch { /* closed by stop() */ }
            return;
          }
          if (typeof piece === "string") {
            await conn.write(Uint8Array.from(piece, (c) => c.charCodeAt(0))).catch(() => {});
          } else await new Promise((resolve) => setTimeout(resolve, piece.waitMs));
          done.pieces++;
        }
      }
    }
    try {
      conn.close();
    } catch { /* closed */ }
  };
  const accepting = (async () => {
    for await (const conn of listener) {
      conns.push(conn);
      serve(conn);
    }
  })();
  return {
    port,
    heads,
    done,
    connections: () => conns.length,
    async stop() {
      listener.close();
      for (const conn of conns) {
        try {
          conn.close();
        } catch { /* closed */ }
      }
      await accepting.catch(() => {});
    },
  };
}

/** An agent as owned_attempt.ts uses one: its pool, taking and dialling owned connections. */
function agentFor(port: number) {
  const owned = new OwnedConns(4, 0);
  const key = `127.0.0.1:${port}`;
  return {
    ownable: true,
    owned,
    takeOwned: (_target: unknown, owner?: object) => Promise.resolve(owned.take(key, owner)),
    async dialOwned() {
      const conn = await Deno.connect({ hostname: "127.0.0.1", port });
      return { conn: new OwnedConn(conn, key), head: new Uint8Array(0) };
    },
  };
}

/** One request's context: method, the client socket, and an abort the test can fire. */
function contextOf(method = "GET") {
  let listener: (() => void) | undefined;
  const context = {
    head: { method },
    request: { socket: {} },
    upgrade: undefined,
    abortedBy: undefined as string | undefined,
    onAbort(on: () => void) {
      listener = on;
      return () => listener = undefined;
    },
  };
  return {
    context: context as unknown as RequestContext,
    abort(by: string) {
      context.abortedBy = by;
      listener?.();
    },
  };
}

function forwardOf(firstByteMs?: number, hasBody = false): Forward {
  return { action: { firstByteMs }, target: "/t", hasBody } as unknown as Forward;
}

function attemptOf(agent: ReturnType<typeof agentFor>, port: number): Attempt {
  return {
    number: 1,
    backend: { hostname: "127.0.0.1", port, tls: undefined },
    way: { agent },
    headers: ["Host", `127.0.0.1:${port}`],
  } as unknown as Attempt;
}

/** How a {@link Sink} behaves. */
interface SinkOptions {
  /** The client leaves (its response closes) once this many bytes were delivered. */
  readonly closeAfter?: number;
  /** Each write reaches the client this long after it was handed over (default 0). */
  readonly delayMs?: number;
  /** Writes fail once this many bytes were delivered, and the response does not close. */
  readonly failAfter?: number;
  /** A response cut off never calls back its pending writes (the client's socket hung). */
  readonly hangOnClose?: boolean;
  /** The client leaves this long after the first write, whatever was delivered. */
  readonly closeAtMs?: number;
  /**
   * Writes complete at once but their bytes are read only at the end (a stream that queues what
   * it is handed, as an HTTP/2 stream does): a chunk must be the target's own, not a view.
   */
  readonly readLater?: boolean;
}

/**
 * The client side of a relayed body, as a socket behaves: a chunk reaches the client only when
 * its write completes (read from the memory handed over at that moment), a response that is cut
 * off drops what it had not sent yet, "close" comes a tick after the end or the cut.
 */
class Sink extends EventEmitter {
  readonly delivered: string[] = [];
  ended = false;
  destroyed = false;
  readonly #options: SinkOptions;
  #bytes = 0;
  #pending = 0;
  readonly #queued: Uint8Array[] = [];
  constructor(options: SinkOptions = {}) {
    super();
    this.#options = options;
  }
  get text(): string {
    return this.delivered.join("");
  }
  write(chunk: Uint8Array, done: (error?: Error | null) => void): boolean {
    if (this.#options.readLater) {
      this.#queued.push(chunk);
      queueMicrotask(() => done(null));
      return true;
    }
    if (this.#options.closeAtMs !== undefined && this.#pending === 0 && this.#bytes === 0) {
      setTimeout(() => this.destroy(), this.#options.closeAtMs);
    }
    this.#pending++;
    setTimeout(() => {
      this.#pending--;
      if (this.destroyed) {
        if (!this.#options.hangOnClose) done(new Error("write after the response closed"));
        return;
      }
      if (this.#bytes >= (this.#options.failAfter ?? Infinity)) return done(new Error("EPIPE"));
      this.delivered.push(latin1(chunk));
      this.#bytes += chunk.byteLength;
      done(null);
      if (this.#bytes >= (this.#options.closeAfter ?? Infinity)) this.destroy();
      if (this.ended && this.#pending === 0) setTimeout(() => this.emit("close"), 0);
    }, this.#options.delayMs ?? 0);
    return true;
  }
  end(): void {
    this.ended = true;
    for (const chunk of this.#queued.splice(0)) this.delivered.push(latin1(chunk));
    if (this.#pending === 0) setTimeout(() => this.emit("close"), 0);
  }
  destroy(): void {
    if (this.destroyed) return;
    this.destroyed = true;
    queueMicrotask(() => this.emit("close")); // as a socket destroyed, on the next tick
  }
}

/** Relays an answer's body into a {@link Sink}; the sink and the settlement. */
async function drain(answer: Awaited<ReturnType<typeof sendOwnedAttempt>>, sink = new Sink()) {
  const settled = await new Promise<boolean>((resolve) => {
    answer.stream(resolve).pipeTo(sink as never);
  });
  return { sink, settled };
}

const HEAD_LENGTH = requestHead("GET", "/t", ["Host", "127.0.0.1:1"]).length;

Deno.test("owned attempt: interim 1xx heads are skipped, split anywhere, and the final one answered", async () => {
  const body = "HTTP/1.1 200 OK\r\nX: 1\r\nKeep-Alive: timeout=7\r\nConnection: keep-alive\r\n" +
    "Content-Length: 5\r\n\r\nhello";
  const interim = "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n" +
    "HTTP/1.1 199 Last Interim\r\n\r\n";
  const pieces: Reply = [
    interim.slice(0, 30),
    { waitMs: 20 },
    interim.slice(30) + body.slice(0, 20),
  ];
  const up = upstream([[...pieces, { waitMs: 20 }, body.slice(20)]]);
  const agent = agentFor(up.port);
  try {
    const { context } = contextOf();
    const answer = await sendOwnedAttempt(context, forwardOf(), attemptOf(agent, up.port), () => 0);
    assert.equal(answer.status, 200);
    assert.equal(answer.keepAlive, "timeout=7");
    assert.deepEqual(answer.rawHeaders, [
      "X",
      "1",
      "Keep-Alive",
      "timeout=7",
      "Connection",
      "keep-alive",
      "Content-Length",
      "5",
    ]);
    const { sink, settled } = await drain(answer);
    assert.deepEqual([sink.text, sink.ended, settled], ["hello", true, true]);
    assert.deepEqual(agent.owned.counts(), { active: 0, idle: 1 }, "kept for the next request");
    assert.equal(
      up.heads[0],
      `GET /t HTTP/1.1\r\nHost: 127.0.0.1:${up.port}\r\nConnection: keep-alive\r\n\r\n`,
    );
  } finally {
    agent.owned.closeAll();
    await up.stop();
  }
});

Deno.test("owned attempt: a 101 nobody asked for fails as the backend's framing, after the head went out", async () => {
  const up = upstream([["HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n\r\n"]]);
  const agent = agentFor(up.port);
  try {
    const { context } = contextOf();
    const failure = await sendOwnedAttempt(context, forwardOf(), attemptOf(agent, up.port), () => 0)
      .then(() => assert.fail("answered"), (e) => e);
    assert.ok(failure instanceof AttemptFailure);
    assert.equal(failure.kind, "upstream_failed");
    assert.equal((failure.cause as Error).message, "101 Switching Protocols unasked");
    assert.deepEqual([failure.instanceOk, failure.backendOk], [true, false]);
    assert.equal(failure.sentBytes, HEAD_LENGTH + String(up.port).length - 1);
    assert.deepEqual(agent.owned.counts(), { active: 0, idle: 0 }, "the connection is dropped");
  } finally {
    agent.owned.closeAll();
    await up.stop();
  }
});

/** A request from `peer` (10.0.0.0/8 is trusted), with no backend headers named. */
function forwardContext(overrides: Partial<ForwardContext> = {}): ForwardContext {
  return {
    peer: "203.0.113.7",
    trusted: AddressSet.of(["10.0.0.0/8"]),
    proto: "https",
    host: "demo.example",
    requestId: "req-1",
    tenant: "demo.example",
    route: "api",
    authority: "10.0.0.5:8080",
    upgrade: false,
    ...overrides,
  };
}

/** The values of every `name` field (any case) in a flat list. */
function valuesOf(list: readonly string[], name: string): string[] {
  return list.filter((_, i) => i % 2 === 1 && list[i - 1].toLowerCase() === name);
}

const INBOUND_TRACE = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
const OWN_TRACE = "00-11111111111111111111111111111111-2222222222222222-01";
const TRACED_RAW = [
  "traceparent",
  INBOUND_TRACE,
  "tracestate",
  "vendor=1",
  "Connection",
  "close",
  "TE",
  "trailers",
  "Accept",
  "*/*",
];

Deno.test("upstreamHeaders() with tracing on: a trusted peer's tracestate stays, its traceparent gives way", () => {
  const out = upstreamHeaders(
    TRACED_RAW,
    forwardContext({ peer: "10.0.0.1", traceparent: OWN_TRACE }),
  );
  assert.deepEqual(valuesOf(out, "traceparent"), [OWN_TRACE]);
  assert.deepEqual(valuesOf(out, "tracestate"), ["vendor=1"]);
  assert.deepEqual(valuesOf(out, "accept"), ["*/*"]);
  assert.deepEqual(
    [valuesOf(out, "connection"), valuesOf(out, "te")],
    [[], []],
    "hop-by-hop still goes",
  );
  assert.deepEqual(valuesOf(out, "via"), [], "trace context never joins Via");
  assert.equal(out.at(-2), "traceparent", "the gateway's own comes last");
});

Deno.test("upstreamHeaders() with tracing off: trace context passes from a trusted peer only", () => {
  const trusted = upstreamHeaders(TRACED_RAW, forwardContext({ peer: "10.0.0.1" }));
  assert.deepEqual(valuesOf(trusted, "traceparent"), [INBOUND_TRACE]);
  assert.deepEqual(valuesOf(trusted, "tracestate"), ["vendor=1"]);
  assert.deepEqual(valuesOf(trusted, "via"), []);
  const untrusted = upstreamHeaders(TRACED_RAW, forwardContext());
  assert.deepEqual(valuesOf(untrusted, "traceparent"), []);
  assert.deepEqual(valuesOf(untrusted, "tracestate"), []);
  assert.deepEqual(valuesOf(untrusted, "via"), []);
  const traced = upstreamHeaders(TRACED_RAW, forwardContext({ traceparent: OWN_TRACE }));
  assert.deepEqual(valuesOf(traced, "traceparent"), [OWN_TRACE]);
  assert.deepEqual(valuesOf(traced, "tracestate"), []);
});

Deno.test("downstreamHeaders() leaves a response's forwarding fields and trace context to the client", () => {
  const raw = [
    "Forwarded",
    "for=192.0.2.1",
    "X-Real-IP",
    "192.0.2.1",
    "X-Forwarded-For",
    "192.0.2.1",
    "traceparent",
    INBOUND_TRACE,
    "tracestate",
    "v=1",
    "Content-Length",
    "2",
  ];
  assert.deepEqual(downstreamHeaders(raw, "r"), [...raw, "X-Request-Id", "r"]);
});

/** Sends one owned attempt; the answer, or the failure it was classified as. */
async function attemptOn(
  up: ReturnType<typeof upstream>,
  agent: ReturnType<typeof agentFor>,
  options: { firstByteMs?: number; context?: ReturnType<typeof contextOf> } = {},
) {
  const { context } = options.context ?? contextOf();
  return await sendOwnedAttempt(
    context,
    forwardOf(options.firstByteMs),
    attemptOf(agent, up.port),
    () => 0,
  ).catch((e) => e as AttemptFailure);
}

Deno.test("owned attempt: an upstream that closes before a head fails as a connected failure", async () => {
  const up = upstream([["HTTP/1.1 200", "close"]]);
  const agent = agentFor(up.port);
  try {
    const failure = await attemptOn(up, agent);
    assert.ok(failure instanceof AttemptFailure);
    assert.equal(failure.kind, "upstream_failed");
    assert.equal(
      (failure.cause as Error).message,
      "The upstream closed the connection before a response head",
    );
    assert.equal(failure.unsent, false);
    assert.deepEqual(agent.owned.counts(), { active: 0, idle: 0 });
  } finally {
    agent.owned.closeAll();
    await up.stop();
  }
});

Deno.test("owned attempt: first_byte_ms cuts a silent upstream, counting the head as sent", async () => {
  // Were the timer not to fire, the upstream's close would end the attempt another way.
  const up = upstream([[{ waitMs: 5000 }, "close"]]);
  const agent = agentFor(up.port);
  try {
    const failure = await attemptOn(up, agent, { firstByteMs: 50 });
    assert.equal(up.done.pieces, 0, "cut by the timer, before the upstream closed");
    assert.ok(failure instanceof AttemptFailure);
    assert.equal(failure.kind, "upstream_timeout");
    assert.equal((failure.cause as Error).message, "No response head within first_byte_ms (50 ms)");
    assert.equal(failure.sentBytes, HEAD_LENGTH + String(up.port).length - 1);
    assert.deepEqual(agent.owned.counts(), { active: 0, idle: 0 });
  } finally {
    agent.owned.closeAll();
    await up.stop();
  }
});

Deno.test("owned attempt: a client that goes away ends the attempt at once, blamed on nobody", async () => {
  const up = upstream([[{ waitMs: 5000 }, "close"]]);
  const agent = agentFor(up.port);
  try {
    const request = contextOf();
    const pending = attemptOn(up, agent, { context: request, firstByteMs: 5000 });
    for (let i = 0; i < 200 && up.heads.length === 0; i++) {
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
    request.abort("client");
    const failure = await pending;
    assert.equal(
      up.done.pieces,
      0,
      "the connection was closed under the read, not by the upstream",
    );
    assert.ok(failure instanceof AttemptFailure);
    assert.equal(failure.kind, "upstream_timeout");
    assert.equal((failure.cause as Error).message, "Aborted: the client went away");
    assert.deepEqual([failure.instanceOk, failure.backendOk], [undefined, undefined]);
    assert.deepEqual(agent.owned.counts(), { active: 0, idle: 0 });
  } finally {
    agent.owned.closeAll();
    await up.stop();
  }
});

Deno.test("owned attempt: a pooled connection carries the next request; a failure counts only its own bytes", async () => {
  const ok = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
  const up = upstream([[ok], ["HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\ntwo"], [
    "HTTP/1.1 101 Switching Protocols\r\n\r\n",
  ]]);
  const agent = agentFor(up.port);
  try {
    const first = await attemptOn(up, agent);
    assert.ok(!(first instanceof AttemptFailure));
    assert.equal((await drain(first)).sink.text, "ok");
    const second = await attemptOn(up, agent);
    assert.ok(!(second instanceof AttemptFailure), String(second));
    assert.equal(second.status, 200);
    assert.equal((await drain(second)).sink.text, "two");
    const third = await attemptOn(up, agent);
    assert.equal(up.connections(), 1, "every request went on the first connection");
    assert.ok(third instanceof AttemptFailure);
    assert.equal(third.sentBytes, HEAD_LENGTH + String(up.port).length - 1);
  } finally {
    agent.owned.closeAll();
    await up.stop();
  }
});

Deno.test("owned attempt: a head that would break framing is never written, and nothing counts as sent", async () => {
  const up = upstream([]);
  const agent = agentFor(up.port);
  try {
    const { context } = contextOf();
    const attempt = { ...attemptOf(agent, up.port), headers: ["X", "a\r\nEvil: 1"] };
    const failure = await sendOwnedAttempt(context, forwardOf(), attempt, () => 0).catch((e) => e);
    assert.ok(failure instanceof AttemptFailure);
    assert.equal(failure.kind, "upstream_failed");
    assert.deepEqual([failure.sentBytes, failure.unsent], [0, true]);
    assert.deepEqual(up.heads, []);
    assert.deepEqual(agent.owned.counts(), { active: 0, idle: 0 });
  } finally {
    agent.owned.closeAll();
    await up.stop();
  }
});

Deno.test("owned attempt: a head refused on a pooled connection counts none of its earlier exchanges as sent", async () => {
  const up = upstream([["HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"]]);
  const agent = agentFor(up.port);
  try {
    const first = await attemptOn(up, agent);
    assert.ok(!(first instanceof AttemptFailure));
    await drain(first);
    assert.deepEqual(agent.owned.counts(), { active: 0, idle: 1 }, "the connection is pooled");
    const { context } = contextOf();
    const attempt = { ...attemptOf(agent, up.port), headers: ["X", "a\r\nEvil: 1"] };
    const failure = await sendOwnedAttempt(context, forwardOf(), attempt, () => 0).catch((e) => e);
    assert.ok(failure instanceof AttemptFailure);
    assert.deepEqual([failure.sentBytes, failure.unsent], [0, true]);
    assert.equal(up.heads.length, 1, "only the first request reached the upstream");
  } finally {
    agent.owned.closeAll();
    await up.stop();
  }
});

Deno.test("owned attempt: a fresh connection counts as busy while its body is read", async () => {
  const up = upstream([["HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"]]);
  const agent = agentFor(up.port);
  try {
    const answer = await attemptOn(up, agent);
    assert.ok(!(answer instanceof AttemptFailure));
    assert.deepEqual(agent.owned.counts(), { active: 1, idle: 0 });
    await drain(answer);
    assert.deepEqual(agent.owned.counts(), { active: 0, idle: 1 });
  } finally {
    agent.owned.closeAll();
    await up.stop();
  }
});

Deno.test("owned attempt: response bytes that came with the dial (a SOCKS reply's tail) are read first", async () => {
  // A status no other test answers: a stale buffer from an earlier exchange cannot pass for it.
  const wire = "HTTP/1.1 203 Non-Authoritative\r\nContent-Length: 5\r\n\r\nhello";
  const up = upstream([[wire.slice(12)]]);
  const agent = agentFor(up.port);
  const dial = agent.dialOwned;
  agent.dialOwned = async () => ({
    ...(await dial()),
    head: Uint8Array.from(wire.slice(0, 12), (c) => c.charCodeAt(0)),
  });
  try {
    const answer = await attemptOn(up, agent);
    assert.ok(!(answer instanceof AttemptFailure), String(answer));
    assert.equal(answer.status, 203);
    assert.equal((await drain(answer)).sink.text, "hello");
  } finally {
    agent.owned.closeAll();
    await up.stop();
  }
});

Deno.test("canOwn() takes only a bodiless, non-upgrade, plain-TCP attempt on an ownable way, when enabled", () => {
  const agent = agentFor(1);
  const attempt = attemptOf(agent, 1);
  const { context } = contextOf();
  assert.equal(canOwn(context, forwardOf(), attempt, true), true);
  assert.equal(canOwn(context, forwardOf(), attempt, false), false);
  assert.equal(canOwn(context, forwardOf(undefined, true), attempt, true), false);
  const upgrade = { ...context, upgrade: {} } as unknown as RequestContext;
  assert.equal(canOwn(upgrade, forwardOf(), attempt, true), false);
  const tls = { ...attempt, backend: { ...attempt.backend, tls: {} } } as unknown as Attempt;
  assert.equal(canOwn(context, forwardOf(), tls, true), false);
  const unowned = {
    ...attempt,
    way: { agent: { ...agent, ownable: false } },
  } as unknown as Attempt;
  assert.equal(canOwn(context, forwardOf(), unowned, true), false);
});

/** One owned exchange answered by `reply`; its body relayed into `sink`; the pool's counts after. */
async function relayOwned(reply: Reply, sink = new Sink()) {
  const up = upstream([reply]);
  const agent = agentFor(up.port);
  try {
    const answer = await attemptOn(up, agent);
    assert.ok(!(answer instanceof AttemptFailure), String(answer));
    const { settled } = await drain(answer, sink);
    const piecesSent = up.done.pieces;
    // A released connection is closed or parked in the same turn; give a close a moment to land.
    await new Promise((resolve) => setTimeout(resolve, 10));
    return { sink, settled, counts: agent.owned.counts(), piecesSent };
  } finally {
    agent.owned.closeAll();
    await up.stop();
  }
}

/** Numbered lines, so a byte out of place shows. */
function numbered(bytes: number): string {
  let text = "";
  for (let i = 0; text.length < bytes; i++) text += `${String(i).padStart(9, "0")}\n`;
  return text.slice(0, bytes);
}

Deno.test("owned body: a long body crosses both buffers byte for byte, kept as handed", async () => {
  const body = numbered(400_000);
  const pieces: (string | { waitMs: number })[] = [
    `HTTP/1.1 200 OK\r\nContent-Length: ${body.length}\r\n\r\n`,
  ];
  for (let at = 0; at < body.length; at += 50_000) {
    pieces.push(body.slice(at, at + 50_000), { waitMs: 2 });
  }
  const { sink, settled, counts } = await relayOwned(pieces);
  assert.equal(sink.text.length, body.length);
  assert.ok(sink.text === body, "the body arrived byte for byte");
  assert.deepEqual([sink.ended, sink.destroyed, settled], [true, false, true]);
  assert.deepEqual(counts, { active: 0, idle: 1 });
});

Deno.test("owned body: a chunked body across reads arrives whole and its connection is kept", async () => {
  const chunks = [
    "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel",
    { waitMs: 10 },
    "lo\r\n",
    { waitMs: 10 },
    "0\r\n\r\n",
  ];
  const { sink, settled, counts } = await relayOwned(chunks);
  assert.deepEqual([sink.text, sink.ended, settled], ["hello", true, true]);
  assert.deepEqual(counts, { active: 0, idle: 1 });
});

Deno.test("owned body: bytes after the body mean the connection is never reused", async () => {
  const { sink, settled, counts } = await relayOwned([
    "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokEXTRA",
  ]);
  assert.deepEqual([sink.text, sink.ended, settled], ["ok", true, true]);
  assert.deepEqual(counts, { active: 0, idle: 0 });
});

Deno.test("owned body: a response that closes the connection is not kept", async () => {
  const { sink, settled, counts } = await relayOwned([
    "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok",
  ]);
  assert.deepEqual([sink.text, sink.ended, settled], ["ok", true, true]);
  assert.deepEqual(counts, { active: 0, idle: 0 });
});

Deno.test("owned body: a close-delimited body ends whole at the upstream's close", async () => {
  const { sink, settled, counts } = await relayOwned([
    "HTTP/1.1 200 OK\r\n\r\nuntil",
    { waitMs: 10 },
    " the end",
    "close",
  ]);
  assert.deepEqual([sink.text, sink.ended, sink.destroyed, settled], [
    "until the end",
    true,
    false,
    true,
  ]);
  assert.deepEqual(counts, { active: 0, idle: 0 });
});

Deno.test("owned body: a body the upstream cuts short reaches the client cut short", async () => {
  const { sink, settled, counts } = await relayOwned([
    "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhal",
    { waitMs: 10 },
    "f",
    "close",
  ]);
  assert.deepEqual([sink.text, sink.ended, sink.destroyed, settled], ["half", false, true, false]);
  assert.deepEqual(counts, { active: 0, idle: 0 });
});

Deno.test("owned body: a chunked body that breaks framing is cut off after what came before it", async () => {
  const { sink, settled, counts } = await relayOwned([
    "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n",
    { waitMs: 10 },
    "zz\r\n",
  ]);
  assert.deepEqual([sink.text, sink.ended, sink.destroyed, settled], ["abc", false, true, false]);
  assert.deepEqual(counts, { active: 0, idle: 0 });
});

Deno.test("owned body: a client that leaves mid-body settles it as delivered and drops the upstream", async () => {
  const body = numbered(300_000);
  const pieces: (string | { waitMs: number })[] = [
    `HTTP/1.1 200 OK\r\nContent-Length: ${body.length}\r\n\r\n`,
  ];
  for (let at = 0; at < body.length; at += 30_000) {
    pieces.push(body.slice(at, at + 30_000), { waitMs: 5 });
  }
  const { sink, settled, counts } = await relayOwned(pieces, new Sink({ closeAfter: 60_000 }));
  assert.equal(settled, true);
  assert.ok(sink.text.length < body.length, "the relay stopped");
  assert.equal(sink.ended, false);
  assert.deepEqual(counts, { active: 0, idle: 0 });
});

Deno.test("owned body: a cancelled body settles as delivered and its connection is dropped", async () => {
  const up = upstream([["HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"]]);
  const agent = agentFor(up.port);
  try {
    const answer = await attemptOn(up, agent);
    assert.ok(!(answer instanceof AttemptFailure));
    const settled: boolean[] = [];
    answer.stream((ok) => settled.push(ok)).cancel();
    assert.deepEqual(settled, [true]);
    assert.deepEqual(agent.owned.counts(), { active: 0, idle: 0 });
  } finally {
    agent.owned.closeAll();
    await up.stop();
  }
});

Deno.test("upstreamHeaders() and downstreamHeaders() drop the one field a lone Connection token names", () => {
  const raw = ["Connection", "x-secret", "X-Secret", "s", "X-Other", "o"];
  for (const out of [upstreamHeaders(raw, forwardContext()), downstreamHeaders(raw, "r")]) {
    assert.deepEqual(valuesOf(out, "x-secret"), []);
    assert.deepEqual(valuesOf(out, "x-other"), ["o"]);
  }
});

/** A tenant set as inward.ts reads one: a respond route, a proxy route, a passthrough. */
function tenantsNaming(backend: { host: string; port: number }) {
  const target = `${backend.host}:${backend.port}`;
  const proxyBackend = { authority: target, hostname: backend.host, port: backend.port, target };
  return {
    tenants: [{
      file: "tenants/shop.yaml",
      routeList: [
        { index: 0, action: { kind: "respond" } },
        { index: 1, action: { kind: "proxy", backends: [proxyBackend] } },
      ],
      passthrough: { backends: [{ host: backend.host, port: backend.port, target }] },
    }],
  } as unknown as TenantRegistry;
}

const OWN_LISTENERS = [{ hostname: "127.0.0.1", port: 9901, name: "lanes.local_health.listen[0]" }];
const SNEAKY: LocalMachine = {
  hostname: "vm",
  hosts: new Map([["sneaky.test", ["127.0.0.1"]]]),
  addresses: new Set(["127.0.0.1"]),
  unread: [],
};

Deno.test("inwardProblems() names every proxy backend and passthrough target that reaches an own listener", () => {
  const problems = inwardProblems(
    tenantsNaming({ host: "sneaky.test", port: 9901 }),
    OWN_LISTENERS,
    SNEAKY,
  );
  const message = 'sneaky.test:9901 (/etc/hosts maps "sneaky.test" to 127.0.0.1) reaches this ' +
    "gateway's own listener lanes.local_health.listen[0] (127.0.0.1:9901): nothing may be sent " +
    "back into the gateway";
  assert.deepEqual(problems, [
    {
      file: "tenants/shop.yaml",
      path: ["routes", 1, "proxy", "backends", 0, "url"],
      value: "http://sneaky.test:9901",
      message,
    },
    {
      file: "tenants/shop.yaml",
      path: ["passthrough", "backends", 0],
      value: "sneaky.test:9901",
      message,
    },
  ]);
  assert.deepEqual(
    inwardProblems(tenantsNaming({ host: "sneaky.test", port: 9902 }), OWN_LISTENERS, SNEAKY),
    [],
  );
  assert.deepEqual(
    inwardProblems(tenantsNaming({ host: "shop.example", port: 9901 }), OWN_LISTENERS, SNEAKY),
    [],
  );
  assert.equal(
    inwardMessage("127.0.0.1:9901", OWN_LISTENERS[0]),
    "127.0.0.1:9901 reaches this gateway's own listener lanes.local_health.listen[0] " +
      "(127.0.0.1:9901): nothing may be sent back into the gateway",
  );
});

Deno.test("owned attempt: a dial that fails is unreachable and sent nothing", async () => {
  const [port] = freePorts(1);
  const agent = agentFor(port);
  const { context } = contextOf();
  const failure = await sendOwnedAttempt(context, forwardOf(), attemptOf(agent, port), () => 0)
    .catch((e) => e);
  assert.ok(failure instanceof AttemptFailure);
  assert.equal(failure.kind, "upstream_unreachable");
  assert.deepEqual([failure.sentBytes, failure.unsent], [0, true]);
  assert.deepEqual(agent.owned.counts(), { active: 0, idle: 0 });
});

Deno.test("owned attempt: a head within first_byte_ms is answered as without the limit", async () => {
  const up = upstream([["HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"]]);
  const agent = agentFor(up.port);
  try {
    const answer = await attemptOn(up, agent, { firstByteMs: 60_000 });
    assert.ok(!(answer instanceof AttemptFailure), String(answer));
    assert.equal((await drain(answer)).sink.text, "ok");
  } finally {
    agent.owned.closeAll();
    await up.stop();
  }
});

Deno.test("owned attempt: interim heads that add up to more than the read buffer are read through", async () => {
  const hint = `HTTP/1.1 103 Early Hints\r\nLink: </${"a".repeat(12_000)}>\r\n\r\n`;
  const pieces: (string | { waitMs: number })[] = [];
  for (let i = 0; i < 7; i++) pieces.push(hint, { waitMs: 2 });
  pieces.push("HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\ndone");
  const up = upstream([pieces]);
  const agent = agentFor(up.port);
  try {
    const answer = await attemptOn(up, agent, { firstByteMs: 5000 });
    assert.ok(!(answer instanceof AttemptFailure), String(answer));
    assert.equal(answer.status, 200);
    assert.equal((await drain(answer)).sink.text, "done");
  } finally {
    agent.owned.closeAll();
    await up.stop();
  }
});

Deno.test("owned body: every relayed byte counts toward the paced collections", async () => {
  let collections = 0;
  const before = relayCollections.young;
  // One collection once the body's 10,000 bytes (in however many reads) have been relayed.
  setRelayPacing({ collectEvery: 10_000, quietAfter: 0 }, () => collections++);
  try {
    const body = numbered(10_000);
    const head = `HTTP/1.1 200 OK\r\nContent-Length: ${body.length}\r\n\r\n`;
    await relayOwned([head + body.slice(0, 4000), { waitMs: 5 }, body.slice(4000, 9999), "close"]);
    assert.equal(collections, 0, "9,999 bytes: not yet");
  } finally {
    setRelayPacing(DEFAULT_PACING);
  }
  setRelayPacing({ collectEvery: 10_000, quietAfter: 0 }, () => collections++);
  try {
    const body = numbered(10_000);
    const head = `HTTP/1.1 200 OK\r\nContent-Length: ${body.length}\r\n\r\n`;
    await relayOwned([head + body.slice(0, 4000), { waitMs: 5 }, body.slice(4000)]);
    assert.equal(collections, 1);
    assert.equal(relayCollections.young - before, 1);
  } finally {
    setRelayPacing(DEFAULT_PACING);
  }
});

Deno.test("owned attempt: an answered attempt leaves no first-byte timer to hold the process open", async () => {
  // A child process answers one owned attempt with first_byte_ms 60 s, then has nothing left to
  // do: it must exit at once, not when a forgotten timer fires.
  const [port] = freePorts(1);
  const module = (path: string) => JSON.stringify(import.meta.resolve(path));
  const script = `
    import { OwnedConn, OwnedConns } from ${module("../src/egress/owned_conns.ts")};
    import { sendOwnedAttempt } from ${module("../src/proxy/owned_attempt.ts")};
    const listener = Deno.listen({ hostname: "127.0.0.1", port: ${port} });
    (async () => {
      const conn = await listener.accept();
      await conn.read(new Uint8Array(4096));
      await conn.write(new TextEncoder().encode("HTTP/1.1 204 No Content\\r\\n\\r\\n"));
      conn.close();
      listener.close();
    })();
    const owned = new OwnedConns(1, 0);
    const agent = {
      owned,
      takeOwned: () => Promise.resolve(undefined),
      dialOwned: async () => ({
        conn: new OwnedConn(await Deno.connect({ hostname: "127.0.0.1", port: ${port} }), "k"),
        head: new Uint8Array(0),
      }),
    };
    const context = {
      head: { method: "GET" },
      request: { socket: {} },
      onAbort: () => () => {},
    };
    const answer = await sendOwnedAttempt(
      context,
      { action: { firstByteMs: 60000 }, target: "/", hasBody: false },
      { backend: { hostname: "127.0.0.1", port: ${port} }, way: { agent }, headers: [] },
      () => 0,
    );
    answer.stream(() => {}).cancel();
    owned.closeAll();
    console.log(answer.status);
  `;
  const started = performance.now();
  const child = await new Deno.Command(Deno.execPath(), {
    args: ["eval", script],
    cwd: new URL("..", import.meta.url).pathname,
    stdout: "piped",
    stderr: "piped",
    signal: AbortSignal.timeout(30_000),
  }).output();
  const seconds = (performance.now() - started) / 1000;
  assert.equal(
    new TextDecoder().decode(child.stdout).trim(),
    "204",
    new TextDecoder().decode(child.stderr),
  );
  assert.ok(seconds < 25, `the process lived ${seconds.toFixed(1)} s after its only attempt`);
});

Deno.test("owned body: a slow client gets every byte sent before the upstream broke off or misframed", async () => {
  const cut = await relayOwned(
    ["HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhal", { waitMs: 10 }, "f", "close"],
    new Sink({ delayMs: 30 }),
  );
  assert.deepEqual([cut.sink.text, cut.sink.ended, cut.sink.destroyed, cut.settled], [
    "half",
    false,
    true,
    false,
  ]);
  const misframed = await relayOwned(
    ["HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n", { waitMs: 10 }, "zz\r\n"],
    new Sink({ delayMs: 30 }),
  );
  assert.deepEqual([misframed.sink.text, misframed.sink.destroyed, misframed.settled], [
    "abc",
    true,
    false,
  ]);
  assert.deepEqual(misframed.counts, { active: 0, idle: 0 });
  const whole = await relayOwned(
    ["HTTP/1.1 200 OK\r\n\r\nuntil", { waitMs: 10 }, " the end", "close"],
    new Sink({ delayMs: 30 }),
  );
  assert.deepEqual([whole.sink.text, whole.sink.ended, whole.settled], [
    "until the end",
    true,
    true,
  ]);
});

/** A body of `bytes` sent in pieces of `piece` bytes, `waitMs` apart. */
function slowBody(bytes: number, piece: number, waitMs: number): (string | { waitMs: number })[] {
  const body = numbered(bytes);
  const pieces: (string | { waitMs: number })[] = [
    `HTTP/1.1 200 OK\r\nContent-Length: ${bytes}\r\n\r\n`,
  ];
  for (let at = 0; at < bytes; at += piece) pieces.push(body.slice(at, at + piece), { waitMs });
  return pieces;
}

Deno.test("owned body: a client write that fails drops the upstream connection at once", async () => {
  const { sink, settled, counts } = await relayOwned(
    slowBody(200_000, 20_000, 5),
    new Sink({ failAfter: 30_000 }),
  );
  assert.equal(settled, true, "the client's failure says nothing about the upstream");
  assert.ok(sink.text.length < 200_000);
  assert.deepEqual(counts, { active: 0, idle: 0 }, "the upstream connection is not kept");
});

Deno.test("owned body: a client that leaves while the upstream is silent drops the upstream at once", async () => {
  const pieces = [...slowBody(4000, 2000, 0)];
  pieces.splice(2, 1, { waitMs: 3000 }); // after the first 2,000 bytes, three seconds of silence
  const { settled, counts, piecesSent } = await relayOwned(pieces, new Sink({ closeAfter: 1 }));
  assert.ok(piecesSent <= 2, "settled while the upstream was still silent");
  assert.equal(settled, true);
  assert.deepEqual(counts, { active: 0, idle: 0 });
});

Deno.test("owned body: a client that leaves with writes that never complete still ends the relay", async () => {
  const up = upstream([slowBody(300_000, 30_000, 5)]);
  const agent = agentFor(up.port);
  try {
    const answer = await attemptOn(up, agent);
    assert.ok(!(answer instanceof AttemptFailure));
    // Every write takes a second; the client leaves after 100 ms, its writes never called back.
    const sink = new Sink({ delayMs: 1000, closeAtMs: 100, hangOnClose: true });
    const settled = await Promise.race([
      drain(answer, sink).then((drained) => drained.settled),
      new Promise<string>((resolve) => setTimeout(() => resolve("still waiting"), 5000)),
    ]);
    assert.equal(settled, true);
    await new Promise((resolve) => setTimeout(resolve, 10));
    assert.deepEqual(agent.owned.counts(), { active: 0, idle: 0 });
  } finally {
    agent.owned.closeAll();
    await up.stop();
  }
});

Deno.test("owned body: a slow HTTP/1 client handed views of the read buffers gets every byte intact", async () => {
  const bytes = 2_000_000;
  const up = upstream([slowBody(bytes, 100_000, 1)]);
  const agent = agentFor(up.port);
  const [port] = freePorts(1);
  const settled: boolean[] = [];
  const server = http.createServer((_request, response) => {
    attemptOn(up, agent).then((answer) => {
      if (answer instanceof AttemptFailure) return response.destroy();
      response.writeHead(200, { "Content-Length": String(bytes) });
      answer.stream((ok) => settled.push(ok)).pipeTo(response);
    });
  });
  await new Promise<void>((resolve) => server.listen(port, "127.0.0.1", resolve));
  const client = await Deno.connect({ hostname: "127.0.0.1", port });
  try {
    await client.write(new TextEncoder().encode("GET / HTTP/1.1\r\nHost: x\r\n\r\n"));
    const buf = new Uint8Array(16384);
    let received = "";
    for (;;) {
      const n = await client.read(buf);
      if (n === null) break;
      received += latin1(buf.subarray(0, n));
      const at = received.indexOf("\r\n\r\n");
      if (at >= 0 && received.length - at - 4 >= bytes) break;
      await new Promise((resolve) => setTimeout(resolve, 1)); // a slow reader: writes pile up
    }
    const body = received.slice(received.indexOf("\r\n\r\n") + 4);
    assert.equal(body.length, bytes);
    assert.ok(body === numbered(bytes), "every byte as the upstream sent it");
    for (let i = 0; i < 100 && settled.length === 0; i++) {
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    assert.deepEqual(settled, [true]);
  } finally {
    client.close();
    await new Promise((resolve) => server.close(resolve));
    agent.owned.closeAll();
    await up.stop();
  }
});

Deno.test("owned body: a target that queues what it is handed gets its own copy of every chunk", async () => {
  const bytes = 400_000;
  const { sink, settled } = await relayOwned(
    slowBody(bytes, 50_000, 2),
    new Sink({ readLater: true }),
  );
  assert.equal(settled, true);
  assert.equal(sink.text.length, bytes);
  assert.ok(sink.text === numbered(bytes), "no chunk was overwritten by a later read");
});
