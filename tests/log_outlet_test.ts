import assert from "node:assert/strict";
import { type LogEpisode, LogOutlet, PIPE_BUF } from "../src/observe/log_outlet.ts";

/** A destination whose writes wait until the test lets them through. */
function gatedWriter() {
  const written: Uint8Array[] = [];
  let open = false;
  let waiting: (() => void)[] = [];
  const write = async (bytes: Uint8Array) => {
    while (!open) await new Promise<void>((resolve) => waiting.push(resolve));
    written.push(bytes.slice());
    return bytes.byteLength;
  };
  return {
    write,
    written,
    open() {
      open = true;
      const wake = waiting;
      waiting = [];
      for (const resolve of wake) resolve();
    },
    text: () => new TextDecoder().decode(concat(written)),
  };
}

function concat(parts: readonly Uint8Array[]): Uint8Array {
  const all = new Uint8Array(parts.reduce((n, p) => n + p.byteLength, 0));
  let at = 0;
  for (const part of parts) {
    all.set(part, at);
    at += part.byteLength;
  }
  return all;
}

async function until(condition: () => boolean, what: string, ms = 5000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

Deno.test("LogOutlet.push() never waits for a stalled reader: lines past the bound are dropped and counted", async () => {
  const sink = gatedWriter();
  const episodes: LogEpisode[] = [];
  const outlet = new LogOutlet({
    stream: "stdout",
    write: sink.write,
    queueBytes: 1000,
    onEpisode: (e) => episodes.push(e),
  });
  const line = "x".repeat(99); // 100 bytes with its newline
  const started = performance.now();
  for (let i = 0; i < 50; i++) outlet.push(line);
  const took = performance.now() - started;
  // The first line went to the (stalled) write; 10 more fit the 1000-byte queue; 39 dropped.
  assert.equal(outlet.stats.dropped, 39);
  assert.equal(outlet.stats.queuedBytes, 1000);
  assert.ok(took < 1000, `push took ${took} ms`);
  assert.deepEqual(episodes.map((e) => [e.state, e.cause, e.dropped]), [[
    "dropping",
    "stalled",
    1,
  ]]);
  sink.open();
  await until(() => episodes.length === 2, "the episode to end");
  assert.deepEqual(episodes[1], {
    stream: "stdout",
    state: "resumed",
    cause: "stalled",
    dropped: 39,
  });
  assert.equal(outlet.stats.written, 11);
  assert.equal(sink.text(), `${line}\n`.repeat(11));
});

Deno.test("LogOutlet writes whole lines in batches of at most PIPE_BUF bytes, a longer line alone", async () => {
  const sink = gatedWriter();
  sink.open();
  const outlet = new LogOutlet({ stream: "stdout", write: sink.write });
  const lines = Array.from({ length: 200 }, (_, i) => `${i}:`.padEnd(60 + (i % 7), "y"));
  const long = "z".repeat(PIPE_BUF * 2);
  for (const line of lines.slice(0, 100)) outlet.push(line);
  outlet.push(long);
  for (const line of lines.slice(100)) outlet.push(line);
  await outlet.flush(5000);
  assert.equal(sink.text(), [...lines.slice(0, 100), long, ...lines.slice(100)].join("\n") + "\n");
  for (const batch of sink.written) {
    const text = new TextDecoder().decode(batch);
    assert.ok(text.endsWith("\n"), "a batch ends at a line's end");
    if (batch.byteLength > PIPE_BUF) assert.equal(text, `${long}\n`);
  }
  assert.ok(sink.written.length > 2, "several batches");
});

Deno.test("LogOutlet counts the lines of a failed write, reports the episode once, and writes again after", async () => {
  let fail = true;
  const written: string[] = [];
  const episodes: LogEpisode[] = [];
  const outlet = new LogOutlet({
    stream: "stdout",
    write: (bytes) => {
      if (fail) return Promise.reject(new Error("Broken pipe (os error 32)"));
      written.push(new TextDecoder().decode(bytes));
      return Promise.resolve(bytes.byteLength);
    },
    onEpisode: (e) => episodes.push(e),
  });
  // A dead reader: lines arrive one by one, each written (and failing) on its own.
  for (let i = 0; i < 5; i++) {
    outlet.push(`lost ${i}`);
    await outlet.flush(5000);
  }
  assert.equal(outlet.stats.dropped, 5);
  assert.equal(outlet.stats.written, 0);
  assert.deepEqual(episodes.map((e) => e.state), ["dropping"], "one episode, not yet over");
  assert.equal(episodes[0].cause, "failed");
  assert.equal(episodes[0].error, "Broken pipe (os error 32)");
  fail = false;
  outlet.push("kept");
  await outlet.flush(5000);
  assert.deepEqual(written, ["kept\n"]);
  assert.deepEqual(episodes.map((e) => e.state), ["dropping", "resumed"], "over once written");
  assert.equal(episodes[1].dropped, 5);
  assert.equal(outlet.stats.episodes, 1);
});

Deno.test("LogOutlet.flush() gives up after its bound when the reader never comes back", async () => {
  const sink = gatedWriter();
  const outlet = new LogOutlet({ stream: "stdout", write: sink.write });
  outlet.push("stuck");
  const started = performance.now();
  await outlet.flush(50);
  assert.ok(performance.now() - started < 3000);
  assert.equal(outlet.stats.written, 0);
  sink.open();
  await outlet.flush(5000);
  assert.equal(outlet.stats.written, 1);
});
