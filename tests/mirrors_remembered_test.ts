/**
 * The rules of the hub's remembered probe results (src/hub/mirrors/remembered.ts), each at and
 * beside its boundary: what a file must be to be loaded (format, this hub, its checksum, no result
 * from the future, each host once), which results are dropped at boot (older than three intervals,
 * mirrors gone from the registry, regions no longer probed), and that a write that fails is logged
 * once and leaves the last good file. The same service in-process with a scripted client shows a
 * restarted service publishing the remembered verdicts first.
 */
import assert from "node:assert/strict";
import {
  decodeResults,
  encodeResults,
  RememberedResults,
  RESULTS_FILE,
} from "../src/hub/mirrors/remembered.ts";
import { DoorService } from "../src/hub/mirrors/service.ts";
import type { ProbeResult, RegionAnswer } from "../src/hub/mirrors/verdict.ts";
import { startDoorHub } from "./fixtures/door.ts";

const HOUR = 3_600_000;
const NOW = Date.parse("2026-12-07T12:00:00Z");

function result(at: number, said: Record<string, RegionAnswer>): ProbeResult {
  return { at, regions: new Map(Object.entries(said)) };
}

const CONTEXT = {
  now: NOW,
  intervalMs: HOUR,
  regions: ["r1", "r2"],
  hosts: new Set(["a.example", "b.example"]),
};

/** The hosts loaded from a file holding `results`, written by hub-1. */
function loaded(results: Record<string, ProbeResult>, context = CONTEXT): string[] {
  const text = encodeResults("hub-1", new Map(Object.entries(results)), NOW);
  return [...decodeResults(text, "hub-1", context).results.keys()];
}

Deno.test("remembered results: a result is kept up to three intervals old, dropped after", () => {
  const said = { r1: "ok", r2: "failed" } as const;
  assert.deepEqual(loaded({ "a.example": result(NOW - 3 * HOUR, said) }), ["a.example"]);
  assert.deepEqual(loaded({ "a.example": result(NOW - 3 * HOUR - 1, said) }), []);
  const text = encodeResults("hub-1", new Map([["a.example", result(NOW - HOUR, said)]]), NOW);
  const decoded = decodeResults(text, "hub-1", CONTEXT);
  assert.equal(decoded.dropped, 0);
  const regions = decoded.results.get("a.example")!.regions;
  assert.deepEqual([...regions], [["r1", "ok"], ["r2", "failed"]]);
  assert.equal(decoded.results.get("a.example")!.at, NOW - HOUR);
});

Deno.test("remembered results: mirrors gone and regions no longer probed are dropped", () => {
  const both = { r1: "ok", r2: "ok" } as const;
  assert.deepEqual(loaded({ "gone.example": result(NOW, both) }), []);
  // Only r1 is probed now: r2's word is dropped, and a result of r3 alone says nothing.
  const context = { ...CONTEXT, regions: ["r1"] };
  const text = encodeResults(
    "hub-1",
    new Map([["a.example", result(NOW, { r1: "failed", r2: "ok" })], [
      "b.example",
      result(NOW, { r3: "ok" }),
    ]]),
    NOW,
  );
  const decoded = decodeResults(text, "hub-1", context);
  assert.deepEqual([...decoded.results.get("a.example")!.regions], [["r1", "failed"]]);
  assert.equal(decoded.results.has("b.example"), false);
  assert.equal(decoded.dropped, 1);
});

Deno.test("remembered results: a file that is damaged, foreign or odd is refused whole", () => {
  const good = encodeResults(
    "hub-1",
    new Map([["a.example", result(NOW, { r1: "ok", r2: "ok" })]]),
    NOW,
  );
  const refusals: [string, string, RegExp][] = [
    ["not JSON", good.slice(0, good.length / 2), /not JSON/],
    ["a verdict flipped", good.replace('"r2": "ok"', '"r2": "failed"'), /SHA-256 does not match/],
    ["a time moved", good.replace("12:00:00.000Z", "11:00:00.000Z"), /SHA-256 does not match/],
    ["another format", good.replace("mirror-probe-results/1", "mirror-probe-results/2"), /format/],
    ["a field added", good.replace('"hub":', '"extra": 1, "hub":'), /format/],
    ["an unknown word", good.replace('"r2": "ok"', '"r2": "maybe"'), /format .*results\.0/],
  ];
  for (const [what, text, reason] of refusals) {
    assert.throws(() => decodeResults(text, "hub-1", CONTEXT), reason, what);
  }
  assert.throws(
    () => decodeResults(good, "hub-2", CONTEXT),
    /written by hub "hub-1", not by this hub "hub-2"/,
  );
  assert.equal(decodeResults(good, "hub-1", CONTEXT).results.size, 1);
});

Deno.test("remembered results: a result dated after now (beyond a minute) is refused", () => {
  const said = { r1: "ok", r2: "ok" } as const;
  assert.deepEqual(loaded({ "a.example": result(NOW + 60_000, said) }), ["a.example"]);
  assert.throws(
    () => loaded({ "a.example": result(NOW + 60_001, said) }),
    /a\.example is dated 2026-12-07T12:01:00\.001Z, after now/,
  );
});

Deno.test("RememberedResults: refuses a damaged file with one line naming it, then replaces it", async () => {
  const dir = await Deno.makeTempDir({ prefix: "portcullis-remembered-" });
  try {
    const lines: string[] = [];
    const memory = new RememberedResults({
      dir,
      hub: "hub-1",
      log: (line) => lines.push(line),
      now: () => NOW,
    });
    await Deno.writeTextFile(`${dir}/${RESULTS_FILE}`, '{"format":');
    assert.equal((await memory.load(CONTEXT)).size, 0);
    assert.equal(lines.length, 1);
    assert.match(lines[0], /^portcullis: error: hub doors: remembered probe results /);
    assert.ok(lines[0].includes(`${dir}/${RESULTS_FILE} refused: not JSON (10 bytes)`), lines[0]);
    assert.deepEqual(memory.status().at_boot, { state: "refused", reason: "not JSON (10 bytes)" });
    await memory.save(new Map([["a.example", result(NOW, { r1: "ok", r2: "ok" })]]));
    const again = new RememberedResults({ dir, hub: "hub-1", log: () => {}, now: () => NOW });
    assert.deepEqual([...(await again.load(CONTEXT)).keys()], ["a.example"]);
    assert.equal((await Deno.stat(`${dir}/${RESULTS_FILE}`)).mode! & 0o777, 0o600);
    // Nothing but the file is left in the folder (no temporary file).
    assert.deepEqual([...Deno.readDirSync(dir)].map((e) => e.name), [RESULTS_FILE]);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("RememberedResults: a failing write is logged once, and its end once", async () => {
  const tmp = await Deno.makeTempDir({ prefix: "portcullis-remembered-" });
  try {
    const lines: string[] = [];
    // The state folder's parent is a file: the folder cannot be made (ENOTDIR), even by root.
    await Deno.writeTextFile(`${tmp}/blocker`, "");
    const memory = new RememberedResults({
      dir: `${tmp}/blocker/state`,
      hub: "hub-1",
      log: (line) => lines.push(line),
      now: () => NOW,
    });
    const results = new Map([["a.example", result(NOW, { r1: "ok", r2: "ok" })]]);
    await memory.save(results);
    await memory.save(results);
    const failed = lines.filter((l) => /cannot remember probe results in /.test(l));
    assert.equal(failed.length, 1, lines.join("\n"));
    assert.ok(failed[0].includes(`${tmp}/blocker/state/${RESULTS_FILE}`), failed[0]);
    assert.match(failed[0], /verdicts will not survive a restart$/);
    assert.equal(memory.status().writes, 0);
    assert.notEqual(memory.status().last_write_error, null);
    await Deno.remove(`${tmp}/blocker`);
    await Deno.mkdir(`${tmp}/blocker`);
    await memory.save(results);
    assert.match(lines.at(-1)!, /probe-results\.json written again$/);
    assert.equal(memory.status().writes, 1);
    assert.equal(memory.status().last_write_error, null);
  } finally {
    await Deno.remove(tmp, { recursive: true });
  }
});

Deno.test("DoorService restarted on the same state folder publishes the remembered verdicts first", async () => {
  const mirrors = [{ host: "a.example", region: "NL" }, { host: "b.example", region: "NL" }];
  const slugs = [{ slug: "garden-path-0123", strategy: "first" }];
  const hub = await startDoorHub({ mirrors, slugs });
  const state = await Deno.makeTempDir({ prefix: "portcullis-remembered-" });
  try {
    // The harness's service has no state folder: this test makes its own two services on one.
    const config = {
      mirrorsDir: `${hub.dir}/mirrors`,
      slugsFile: `${hub.dir}/slugs.yaml`,
      stateDir: state,
      watch: false,
      debounceMs: 50,
      history: 4,
      prober: {
        enabled: true,
        client: "check_host" as const,
        intervalMs: HOUR,
        regions: ["r1", "r2"],
        timeoutMs: 5000,
      },
    };
    hub.client.set("a.example", { r1: "ok", r2: "ok" });
    hub.client.set("b.example", { r1: "failed", r2: "failed" });
    const options = { log: () => {}, client: hub.client, holdMs: 0, hubId: "hub-1" };
    const first = new DoorService(config, options);
    await first.start();
    await first.probeNow();
    const judged = first.feed.live;
    first.stop();
    hub.client.set("a.example", undefined); // nothing answers the next service's checks
    hub.client.set("b.example", undefined);
    const second = new DoorService(config, options);
    await second.start();
    try {
      assert.equal(second.feed.live.hash, judged.hash);
      const verdicts = second.feed.live.view.mirrors.map((m) => [m.host, m.verdict]);
      assert.deepEqual(verdicts, [["a.example", "live"], ["b.example", "blocked"]]);
    } finally {
      second.stop();
    }
  } finally {
    await hub.dispose();
    await Deno.remove(state, { recursive: true });
  }
});
