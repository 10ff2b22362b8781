/**
 * Kills operator-mutation survivors in the gates: the admin gate (`src/pipeline/admin_gate.ts`),
 * the parse gate (`src/server/parse_gate.ts`) and the delivery watch
 * (`src/server/delivery_watch.ts`). Each test names the rule it guards and checks both sides of
 * it, at the boundary, as an operator (the boot message) or a client (the answer) sees it.
 *
 * @module
 */
import assert from "node:assert/strict";
import type { Ledger } from "../src/ledger/ledger.ts";
import {
  AdminGate,
  adminGateAnswer,
  firstSegments,
  loadAdminGate,
} from "../src/pipeline/admin_gate.ts";
import type { Reply } from "../src/request/reply.ts";
import type { Arrival } from "../src/server/arrival.ts";
import { ParseGate, preferListeners, SLICE } from "../src/server/parse_gate.ts";
import {
  type DeliveryLimits,
  DeliveryWatch,
  type SendingSocket,
} from "../src/server/delivery_watch.ts";

const SLUG = "slug-0123456789abcdef";
const T1 = "t1_ABCDEFGHIJKLMNOPq";
const T2 = "t2-qrstuvwxyz0123456";

/** The message `AdminGate.fromLine(line)` refuses `line` with. */
function refusal(line: string): string {
  try {
    AdminGate.fromLine(line);
  } catch (error) {
    assert.ok(error instanceof TypeError);
    return error.message;
  }
  assert.fail(`${JSON.stringify(line)} was accepted`);
}

// ---- The admin gate's line.

Deno.test("admin gate line: a lone / is not a line that starts and ends with /; // is one with 1 segment", () => {
  assert.equal(refusal("/"), "Its line does not start and end with /");
  assert.equal(refusal("/\n"), "Its line does not start and end with /");
  assert.equal(refusal("//"), "Its line has 1 segments, not 3");
  assert.equal(refusal("///"), "Its line has 2 segments, not 3");
});

Deno.test("admin gate line: a segment of 16 and of 128 characters is a length the gate takes, 15 and 129 are not", () => {
  const sized = (length: number, last = "a") => "s".repeat(length - 1) + last;
  // Exactly at each end: the length is right, so a bad character is what is named.
  assert.equal(
    refusal(`/${sized(16, ".")}/${T1}/${T2}/`),
    "Segment 1 (slug) holds a character outside A-Z a-z 0-9 _ -",
  );
  assert.equal(
    refusal(`/${SLUG}/${sized(128, ".")}/${T2}/`),
    "Segment 2 (t1) holds a character outside A-Z a-z 0-9 _ -",
  );
  // One past each end: the length is named, whatever the characters.
  assert.equal(
    refusal(`/${SLUG}/${T1}/${sized(15)}/`),
    "Segment 3 (t2) is 15 characters long, not 16 to 128",
  );
  assert.equal(
    refusal(`/${SLUG}/${T1}/${sized(15, ".")}/`),
    "Segment 3 (t2) is 15 characters long, not 16 to 128",
  );
  assert.equal(
    refusal(`/${sized(129, ".")}/${T1}/${T2}/`),
    "Segment 1 (slug) is 129 characters long, not 16 to 128",
  );
  // And both ends are gates that work.
  const line = `/${sized(16)}/${sized(128)}/${T2}/`;
  assert.equal(AdminGate.fromLine(line).matches(line), true);
});

Deno.test("admin gate file: a file of 1024 bytes is read (and refused for its line), one of 1025 is too large", async () => {
  const dir = await Deno.makeTempDir({ prefix: "portcullis-gate-kill-" });
  try {
    const file = `${dir}/admin.gate`;
    const padded = (size: number) => `/${SLUG}/${T1}/${T2}/`.padEnd(size - 1, "x") + "\n";
    await Deno.writeTextFile(file, padded(1024), { mode: 0o600 });
    await assert.rejects(loadAdminGate(file), (error: Error) => {
      assert.match(error.message, /: its line does not start and end with \/$/);
      assert.doesNotMatch(error.message, /bytes/);
      return true;
    });
    await Deno.writeTextFile(file, padded(1025), { mode: 0o600 });
    await assert.rejects(loadAdminGate(file), /is 1025 bytes, more than 1024/);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("firstSegments(): a target that is all query has no segments, whatever follows the ?", () => {
  assert.deepEqual(firstSegments("?/a/b"), ["", "", ""]);
  assert.deepEqual(firstSegments(`?/${SLUG}/${T1}/${T2}/`), ["", "", ""]);
  assert.deepEqual(firstSegments("/?a/b"), ["", "", ""]);
});

Deno.test("admin gate answer: a hit while public admission is stopped is refused as draining, never admitted", () => {
  const gate = AdminGate.fromLine(`/${SLUG}/${T1}/${T2}/`);
  /** Answers one hit; what the client was sent, and whether the ledger was asked. */
  const answer = (drains: boolean, admissionStopped: boolean) => {
    const asked: string[] = [];
    const ledger = {
      admit: (lane: string) => (asked.push(lane), { overload: "rate_budget" }),
    } as unknown as Ledger;
    const refused: Reply[] = [];
    const arrival = {
      request: { url: `/${SLUG}/${T1}/${T2}/`, headers: { "x-request-id": "hit-1" } },
      connection: {},
      refuse: (reply: Reply) => refused.push(reply),
    } as unknown as Arrival;
    const hit = adminGateAnswer({
      gate,
      services: { ledger, state: { admissionStopped } },
      lane: "public",
      drains,
    });
    assert.equal(hit(arrival), true, "a hit is answered by the gate");
    assert.equal(refused.length, 1, "exactly one answer");
    return { status: refused[0].status, code: refused[0].failure, asked };
  };
  assert.deepEqual(answer(true, true), { status: 503, code: "draining", asked: [] });
  // Admission open: the ledger decides (here it refuses), the drain does not.
  assert.deepEqual(answer(true, false), { status: 429, code: "rate_budget", asked: ["public"] });
  // A lane that does not drain is never refused as draining.
  assert.deepEqual(answer(false, true), { status: 429, code: "rate_budget", asked: ["public"] });
});

// ---- The delivery watch, with an injected clock and a socket whose reader is exact to the byte.

/** A reply's socket: `waiting` bytes queued for the client, `taken` bytes it has taken. */
class ReplySocket implements SendingSocket {
  taken = 0;
  waiting = 0;
  resets = 0;

  get writableLength(): number {
    return this.waiting;
  }

  get bytesWritten(): number {
    return this.taken + this.waiting;
  }

  resetAndDestroy(): void {
    this.resets++;
  }
}

/** A watch over one reply, with a clock the test moves; `cuts` counts the cuts. */
function watched(limits: DeliveryLimits) {
  const clock = { now: 10_000 };
  const watch = new DeliveryWatch(limits, () => clock.now);
  const socket = new ReplySocket();
  const state = { cuts: 0 };
  const unwatch = watch.watch(() => socket, () => state.cuts++);
  /** Moves the clock to `at` ms after the start and sweeps once. */
  const sweepAt = (at: number) => {
    clock.now = 10_000 + at;
    watch.sweep();
    return state.cuts;
  };
  return { watch, socket, state, sweepAt, unwatch };
}

Deno.test("delivery watch: a client that takes nothing is cut exactly when send_ms has passed, not a sweep later", () => {
  const { watch, socket, sweepAt } = watched({ sendMs: 1000, minSendRate: 0 });
  try {
    socket.taken = 50_000; // the head and the body so far went out at once
    socket.waiting = 4096;
    assert.equal(sweepAt(0), 0, "bytes start waiting");
    assert.equal(sweepAt(999), 0, "under send_ms: not judged yet");
    assert.equal(sweepAt(1000), 1, "at send_ms: judged, nothing taken, cut");
    assert.equal(socket.resets, 1, "the connection is reset");
  } finally {
    watch.stop();
  }
});

Deno.test("delivery watch: a client taking exactly min_send_rate in every window is never cut; one byte less is", () => {
  for (const [taken, cuts] of [[10_000, 0], [9_999, 1]]) {
    const { watch, socket, sweepAt } = watched({ sendMs: 1000, minSendRate: 10_000 });
    try {
      socket.waiting = 1 << 20;
      sweepAt(0);
      for (let window = 1; window <= 5; window++) {
        socket.taken += taken;
        const cut = sweepAt(window * 1000);
        if (cut) break;
      }
      assert.equal(socket.resets, cuts, `${taken} bytes a 1000 ms window against 10000 B/s`);
    } finally {
      watch.stop();
    }
  }
});

Deno.test("delivery watch: each window is judged on its own: a fast first window does not carry a slow second", () => {
  const { watch, socket, sweepAt } = watched({ sendMs: 1000, minSendRate: 10_000 });
  try {
    socket.waiting = 1 << 20;
    sweepAt(0);
    socket.taken += 30_000; // three times the rate
    assert.equal(sweepAt(1000), 0);
    socket.taken += 1_000; // a tenth of it
    assert.equal(sweepAt(2000), 1, "the second window alone is under the rate");
  } finally {
    watch.stop();
  }
});

Deno.test("delivery watch: time with nothing waiting (a slow upstream) is never held against the client", () => {
  const { watch, socket, sweepAt } = watched({ sendMs: 1000, minSendRate: 1_000 });
  try {
    socket.waiting = 500;
    sweepAt(0);
    socket.taken += 500; // the client takes it all: nothing waits
    socket.waiting = 0;
    assert.equal(sweepAt(100), 0);
    assert.equal(sweepAt(5_000), 0, "nothing waits: not judged");
    socket.waiting = 500; // the upstream sends more, 10 s later
    assert.equal(sweepAt(10_000), 0, "a new window starts: the idle 10 s do not count");
    socket.taken += 1_000;
    socket.waiting = 1 << 20;
    assert.equal(sweepAt(11_000), 0, "1000 bytes in its own 1000 ms window is the rate");
  } finally {
    watch.stop();
  }
});

Deno.test("delivery watch: a cut reply is cut once; an unwatched one never", () => {
  const { watch, socket, sweepAt } = watched({ sendMs: 1000, minSendRate: 0 });
  try {
    socket.waiting = 4096;
    sweepAt(0);
    assert.equal(sweepAt(1000), 1);
    assert.equal(sweepAt(2000), 1, "no second cut");
    assert.equal(sweepAt(5000), 1);
    assert.equal(socket.resets, 1);
  } finally {
    watch.stop();
  }
  const other = watched({ sendMs: 1000, minSendRate: 0 });
  try {
    other.socket.waiting = 4096;
    other.sweepAt(0);
    other.unwatch();
    assert.equal(other.sweepAt(5000), 0, "no longer watched: never cut");
  } finally {
    other.watch.stop();
  }
});

Deno.test("delivery watch: with min_send_rate 0 a single byte taken in a window is progress enough", () => {
  const { watch, socket, sweepAt } = watched({ sendMs: 1000, minSendRate: 0 });
  try {
    socket.waiting = 4096;
    sweepAt(0);
    for (let window = 1; window <= 5; window++) {
      socket.taken += 1;
      assert.equal(sweepAt(window * 1000), 0, `window ${window}: one byte taken`);
    }
    assert.equal(sweepAt(6000), 1, "then a window with none: cut");
  } finally {
    watch.stop();
  }
});

/** One interval timer as the watch asked for it. */
interface FakeTimer {
  readonly ms: number;
  readonly tick: () => void;
  cleared: boolean;
  unref: boolean;
}

/** Runs `body` with setInterval, clearInterval and Deno.unrefTimer recorded instead of real. */
function withFakeTimers(body: (timers: FakeTimer[]) => void): void {
  const timers: FakeTimer[] = [];
  const real = {
    setInterval: globalThis.setInterval,
    clearInterval: globalThis.clearInterval,
    unrefTimer: Deno.unrefTimer,
  };
  const at = (id: number) => timers[id - 1];
  Object.assign(globalThis, {
    setInterval: (tick: () => void, ms: number) =>
      timers.push({ ms, tick, cleared: false, unref: false }),
    clearInterval: (id?: number) => id !== undefined && (at(id).cleared = true),
  });
  Object.assign(Deno, { unrefTimer: (id: number) => at(id).unref = true });
  try {
    body(timers);
  } finally {
    Object.assign(globalThis, { setInterval: real.setInterval, clearInterval: real.clearInterval });
    Object.assign(Deno, { unrefTimer: real.unrefTimer });
  }
}

Deno.test("delivery watch: it sweeps every quarter of send_ms, at least 50 ms and at most 1 s, never holding the process open", () => {
  const cases: [number, number][] = [
    [100, 50],
    [200, 50],
    [204, 51],
    [399, 99],
    [2_000, 500],
    [3_999, 999],
    [4_000, 1000],
    [10_000, 1000],
    [3_600_000, 1000],
  ];
  for (const [sendMs, expected] of cases) {
    withFakeTimers((timers) => {
      const watch = new DeliveryWatch({ sendMs, minSendRate: 0 });
      watch.watch(() => null, () => {});
      watch.stop();
      assert.equal(timers.length, 1);
      assert.equal(timers[0].ms, expected, `send_ms ${sendMs}`);
      assert.equal(timers[0].unref, true, "an idle sweep never keeps the process alive");
    });
  }
});

Deno.test("delivery watch: one sweep timer drives every reply; stop ends it, and a later reply starts another", () => {
  withFakeTimers((timers) => {
    let now = 0;
    const watch = new DeliveryWatch({ sendMs: 1000, minSendRate: 0 }, () => now);
    const socket = new ReplySocket();
    socket.waiting = 4096;
    let cuts = 0;
    watch.watch(() => socket, () => cuts++);
    watch.watch(() => null, () => {});
    assert.equal(timers.length, 1, "one timer for the lane server, not one per reply");
    timers[0].tick();
    now = 1000;
    timers[0].tick();
    assert.equal(cuts, 1, "the timer's sweep cut the stalled reply");
    watch.stop();
    assert.equal(timers[0].cleared, true, "stop clears the timer");
    watch.watch(() => null, () => {});
    assert.equal(timers.length, 2, "a reply after stop starts a new timer");
    watch.stop();
    assert.equal(timers[1].cleared, true);
  });
});

// ---- The parse gate, over a socket that records what the parser was fed.

/** A socket as node's HTTP server leaves it: one `data` and one `end` listener (the parser's). */
class FedSocket {
  destroyed = false;
  parser: object | null = {};
  _handle: { _consumed?: boolean } = {};
  /** What the parser's listeners got, in order: byte counts, and "end". */
  readonly fed: (number | "end")[] = [];
  readonly unshifted: Uint8Array[] = [];
  pauses = 0;
  resumes = 0;
  /** The parser lets go of the socket (an upgrade) once it was fed this many slices. */
  upgradeAfter = Infinity;
  /** What the parser does after each slice (e.g. answer a request, which pumps). */
  onFeed?: () => void;
  /** How deep the parser's feeding went (1: never one slice inside another). */
  deepest = 0;
  #depth = 0;
  // deno-lint-ignore ban-types
  readonly #listeners = new Map<string, Function[]>([
    ["data", [(chunk: Uint8Array) => {
      this.deepest = Math.max(this.deepest, ++this.#depth);
      if (this.fed.push(chunk.byteLength) >= this.upgradeAfter) this.parser = null;
      this.onFeed?.();
      this.#depth--;
    }]],
    ["end", [() => this.fed.push("end")]],
  ]);

  // deno-lint-ignore ban-types
  listeners(event: "data" | "end"): Function[] {
    return [...(this.#listeners.get(event) ?? [])];
  }
  // deno-lint-ignore ban-types
  removeListener(event: string, listener: Function): void {
    this.#listeners.set(event, (this.#listeners.get(event) ?? []).filter((l) => l !== listener));
  }
  // deno-lint-ignore ban-types
  on(event: string, listener: Function): void {
    this.#listeners.set(event, [...(this.#listeners.get(event) ?? []), listener]);
  }
  /** The socket receives `chunk` (or its end, or its close). */
  emit(event: "data" | "end" | "close", chunk?: Uint8Array): void {
    for (const listener of this.#listeners.get(event) ?? []) listener(chunk);
  }
  pause(): void {
    this.pauses++;
  }
  resume(): void {
    this.resumes++;
  }
  unshift(chunk: Uint8Array): void {
    this.unshifted.push(chunk);
  }
}

Deno.test("parse gate: the parser gets at most 2048 bytes at a time, and the end only after the last slice", () => {
  assert.equal(SLICE, 2048);
  const socket = new FedSocket();
  const gate = new ParseGate(socket, () => false);
  socket.emit("data", new Uint8Array(2048));
  assert.deepEqual(socket.fed, [2048], "fed as it arrives, not at the end");
  socket.emit("data", new Uint8Array(5000));
  socket.emit("data", new Uint8Array(2049));
  socket.emit("end");
  assert.deepEqual(socket.fed, [2048, 2048, 2048, 904, 2048, 1, "end"]);
  assert.equal(gate.holding, false);
  assert.equal(socket.pauses, 0);
});

Deno.test("parse gate: while the connection is held nothing more is parsed and the socket pauses; a pump goes on", () => {
  const socket = new FedSocket();
  let held = true;
  const gate = new ParseGate(socket, () => held);
  socket.emit("data", new Uint8Array(3000));
  socket.emit("data", new Uint8Array(10));
  socket.emit("end");
  assert.deepEqual(socket.fed, [], "held: not a byte parsed");
  assert.equal(gate.holding, true);
  assert.equal(socket.pauses, 1, "paused once, however many chunks wait");
  gate.pump();
  assert.deepEqual(socket.fed, []);
  assert.equal(socket.pauses, 1);
  held = false;
  gate.pump();
  assert.deepEqual(socket.fed, [2048, 952, 10, "end"]);
  assert.equal(gate.holding, false);
  assert.equal(socket.resumes, 1, "resumed once the hold lifted");
  gate.pump();
  assert.deepEqual(socket.fed, [2048, 952, 10, "end"], "the end is delivered once");
  assert.equal(socket.resumes, 1);
});

Deno.test("parse gate: after an upgrade the bytes still held go back to the socket in order, never to the parser", () => {
  const socket = new FedSocket();
  let held = true;
  const gate = new ParseGate(socket, () => held);
  socket.emit("data", new Uint8Array(2048).fill(1));
  socket.emit("data", new Uint8Array(3000).fill(2));
  socket.emit("data", new Uint8Array(7).fill(3));
  // The parser lets go of the socket with the first slice (an Upgrade's head).
  socket.upgradeAfter = 1;
  held = false;
  gate.pump();
  assert.deepEqual(socket.fed, [2048], "only the upgrade's slice was parsed");
  assert.deepEqual(
    socket.unshifted.map((chunk) => [chunk.byteLength, chunk[0]]),
    [[7, 3], [3000, 2]],
    "unshifted last first, so the socket reads them in their order",
  );
  assert.equal(gate.holding, false);
  socket.emit("data", new Uint8Array(5));
  gate.pump();
  assert.deepEqual(socket.fed, [2048], "the gate no longer takes the socket's bytes");
  assert.equal(gate.holding, false, "nor keeps them: the tunnel's bytes are the tunnel's");
});

Deno.test("parse gate: a closed or destroyed connection drops what it held; preferListeners turns off direct reads", () => {
  const socket = new FedSocket();
  let held = true;
  const gate = new ParseGate(socket, () => held);
  socket.emit("data", new Uint8Array(100));
  assert.equal(gate.holding, true);
  socket.emit("close");
  assert.equal(gate.holding, false, "close drops the held bytes");
  socket.emit("data", new Uint8Array(100));
  socket.destroyed = true;
  held = false;
  gate.pump();
  assert.deepEqual(socket.fed, [], "a destroyed socket's bytes are never parsed");
  assert.equal(gate.holding, false);
  const fresh = new FedSocket();
  preferListeners(fresh);
  assert.equal(fresh._handle._consumed, true);
  const bare = { ...new FedSocket(), _handle: undefined } as unknown as FedSocket;
  preferListeners(bare);
});

Deno.test("parse gate: a pump asked for while the parser is being fed never feeds it a slice inside another", () => {
  const socket = new FedSocket();
  const gate = new ParseGate(socket, () => false);
  // The parser answers a request synchronously, and the answer asks the gate to go on.
  socket.onFeed = () => gate.pump();
  socket.emit("data", new Uint8Array(5000));
  assert.deepEqual(socket.fed, [2048, 2048, 904], "every slice once, in order");
  assert.equal(socket.deepest, 1, "never a slice fed while the parser is still in another");
});
