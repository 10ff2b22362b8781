/**
 * Collections paced by relayed bytes (src/request/relay_memory.ts): the young collection at each
 * `collect_every_bytes` (under, at and over it), the one full collection once the relays go quiet
 * after `quiet_collect_bytes` and none while they still move, both relays counting their bytes,
 * V8's own collector reached without a launch flag, and the config's `memory` block.
 *
 * @module
 */
import assert from "node:assert/strict";
import { PassThrough } from "node:stream";
import type http from "node:http";
import { loadConfig } from "../src/config/load.ts";
import { ConfigError } from "../src/config/problems.ts";
import { streamUpstream } from "../src/request/body_stream.ts";
import {
  type Collect,
  DEFAULT_PACING,
  QUIET_MS,
  relayed,
  relayPacing,
  setRelayPacing,
} from "../src/request/relay_memory.ts";
import { forwardBody } from "../src/proxy/forward_body.ts";
import { MINIMAL, writeConfigText } from "./fixtures/config_files.ts";
import { withEdge } from "./fixtures/in_process.ts";

const MIB = 1024 * 1024;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** A collector that records the kinds it was asked for. */
function recorder(): { calls: string[]; collect: Collect } {
  const calls: string[] = [];
  return { calls, collect: (options) => calls.push(options?.type ?? "full") };
}

/** Polls until `done()` or the deadline; returns whether it held. */
async function until(done: () => boolean, ms: number): Promise<boolean> {
  const deadline = Date.now() + ms;
  while (!done()) {
    if (Date.now() > deadline) return false;
    await sleep(50);
  }
  return true;
}

Deno.test("relay pacing: a young collection at every collect_every_bytes, none below it", () => {
  const { calls, collect } = recorder();
  setRelayPacing({ collectEvery: MIB, quietAfter: 0 }, collect);
  relayed(MIB - 1);
  assert.deepEqual(calls, [], "one byte under the pace");
  relayed(1);
  assert.deepEqual(calls, ["minor"], "exactly at the pace");
  for (let i = 0; i < 40; i++) relayed(64 * 1024); // 2.5 MiB more
  assert.deepEqual(calls, ["minor", "minor", "minor"]);
  setRelayPacing({ collectEvery: 0, quietAfter: 0 }, collect);
  relayed(64 * MIB);
  assert.equal(calls.length, 3, "collect_every_bytes: 0 never collects");
});

Deno.test("relay pacing: one full collection once quiet after quiet_collect_bytes, none while bytes move", async () => {
  const { calls, collect } = recorder();
  setRelayPacing({ collectEvery: 0, quietAfter: 2 * MIB }, collect);
  relayed(2 * MIB - 1);
  await sleep(QUIET_MS * 1.5);
  assert.deepEqual(calls, [], "under quiet_collect_bytes: nothing to return");
  relayed(1);
  // Still moving: a chunk every 200 ms for two quiet periods.
  for (let i = 0; i < (2 * QUIET_MS) / 200; i++) {
    await sleep(200);
    relayed(1024);
  }
  assert.deepEqual(calls, [], "no collection while the relays move");
  assert.ok(await until(() => calls.length > 0, QUIET_MS * 5), "the quiet collection came");
  assert.deepEqual(calls, ["major"]);
  await sleep(QUIET_MS * 1.5);
  assert.deepEqual(calls, ["major"], "once per burst");
  setRelayPacing({ collectEvery: 0, quietAfter: 0 }, collect);
});

Deno.test("relay pacing: the response relay and the request body pump both count their bytes", async () => {
  const { calls, collect } = recorder();
  setRelayPacing({ collectEvery: 256 * 1024, quietAfter: 0 }, collect);
  const chunk = new Uint8Array(64 * 1024);

  const upstream = new PassThrough();
  const client = new PassThrough();
  client.resume();
  let settled: boolean | undefined;
  streamUpstream(upstream as unknown as http.IncomingMessage, (ok) => settled = ok)
    .pipeTo(client as never);
  for (let i = 0; i < 8; i++) upstream.write(chunk);
  upstream.end();
  assert.ok(await until(() => calls.length === 2, 5000), `response: ${calls.length} of 2`);

  const body = new PassThrough();
  const sink = new PassThrough();
  sink.resume();
  forwardBody(body as unknown as http.IncomingMessage, sink as unknown as http.ClientRequest, {
    declared: 8 * chunk.byteLength,
    overflow: () => {},
  });
  for (let i = 0; i < 8; i++) body.write(chunk);
  body.end();
  assert.ok(await until(() => calls.length === 4, 5000), `request body: ${calls.length} of 4`);
  assert.deepEqual(calls, ["minor", "minor", "minor", "minor"]);
  void settled;
  setRelayPacing({ collectEvery: 0, quietAfter: 0 }, collect);
});

Deno.test("relay pacing: V8's collector is reached without --expose-gc and frees dead buffers", async () => {
  const command = new Deno.Command(Deno.execPath(), {
    args: [
      "eval",
      `import { relayed, setRelayPacing } from "${
        new URL("../src/request/relay_memory.ts", import.meta.url).href
      }";
      const external = () => Deno.memoryUsage().external;
      setRelayPacing({ collectEvery: 64 * 1024 * 1024, quietAfter: 0 });
      let held = [];
      for (let i = 0; i < 1024; i++) held.push(new Uint8Array(64 * 1024));
      const before = external();
      held = undefined;
      relayed(64 * 1024 * 1024);
      console.log(JSON.stringify({ before, after: external(), gc: typeof globalThis.gc }));`,
    ],
    stdout: "piped",
    stderr: "piped",
  });
  const out = await command.output();
  assert.equal(out.code, 0, new TextDecoder().decode(out.stderr));
  const { before, after } = JSON.parse(new TextDecoder().decode(out.stdout));
  assert.ok(before >= 64 * MIB, `64 MiB of buffers were held: ${before}`);
  assert.ok(after < before - 48 * MIB, `a young collection freed them: ${before} → ${after}`);
});

Deno.test("config: memory defaults; a pace under 1 MiB (but not 0) or negative is refused, naming its field", async () => {
  const config = await loadConfig(await writeConfigText(MINIMAL));
  assert.deepEqual(config.memory, DEFAULT_PACING);
  const set = await loadConfig(
    await writeConfigText(
      `${MINIMAL}memory: { collect_every_bytes: 16777216, quiet_collect_bytes: 0 }\n`,
    ),
  );
  assert.deepEqual(set.memory, { collectEvery: 16 * MIB, quietAfter: 0 });
  for (
    const [field, value] of [["collect_every_bytes", -1], ["collect_every_bytes", 1], [
      "quiet_collect_bytes",
      1048575,
    ]] as const
  ) {
    const file = await writeConfigText(`${MINIMAL}memory: { ${field}: ${value} }\n`);
    const error = await loadConfig(file).then(() => undefined, (e) => e);
    assert.ok(error instanceof ConfigError, `${field}: ${value} was accepted`);
    assert.deepEqual(error.problems.map((p) => [p.file, p.path.join("."), p.value]), [
      [file, `memory.${field}`, value],
    ]);
  }
  const atFloor = await loadConfig(
    await writeConfigText(`${MINIMAL}memory: { collect_every_bytes: 1048576 }\n`),
  );
  assert.equal(atFloor.memory.collectEvery, MIB, "exactly 1 MiB is allowed");
});

Deno.test("edge: a booted edge paces its isolate by its config's memory block", async () => {
  setRelayPacing(DEFAULT_PACING);
  const memory = { collect_every_bytes: 1048576, quiet_collect_bytes: 2097152 };
  await withEdge({ lanes: ["public"], edit: (config) => config.memory = memory }, () => {
    assert.deepEqual(relayPacing(), { collectEvery: MIB, quietAfter: 2 * MIB });
    return Promise.resolve();
  });
  setRelayPacing({ collectEvery: 0, quietAfter: 0 });
});
