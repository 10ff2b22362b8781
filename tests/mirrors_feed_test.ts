/**
 * The door feed and the door service: snapshot for an empty or unknown `have`, `current` after the
 * hold, a delta (changed and removed mirrors, slugs only when they changed) that wakes a held poll,
 * bounded history; and the service's verdicts, status, node rule and stream route.
 *
 * @module
 */
import assert from "node:assert/strict";
import { EventEmitter } from "node:events";
import type { ServerResponse } from "node:http";
import { DoorFeed } from "../src/hub/mirrors/feed.ts";
import { doorStreamRoute } from "../src/hub/mirrors/service.ts";
import { type DoorMirror, type DoorView, hashView, sortedView } from "../src/hub/mirrors/view.ts";
import { SAYS, startDoorHub } from "./fixtures/door.ts";

function mirror(host: string, verdict: DoorMirror["verdict"] = "live"): DoorMirror {
  return { host, region: "DE", verdict, checked_at: null };
}

const SLUG = {
  slug: "feed-slug-01",
  strategy: "first",
  mirrors: null,
  exclude_regions: [],
} as const;
const V1: DoorView = { slugs: [SLUG], mirrors: [mirror("b.example"), mirror("a.example")] };

Deno.test("DoorFeed.answer() is a sorted snapshot for an empty or unknown have", async () => {
  const feed = new DoorFeed(V1, { history: 4 });
  for (const have of ["", "0".repeat(64), "not a hash"]) {
    const answer = await feed.answer(have, 0);
    assert.equal(answer.type, "snapshot");
    if (answer.type !== "snapshot") continue;
    assert.deepEqual(answer.view.mirrors.map((m) => m.host), ["a.example", "b.example"]);
    assert.equal(answer.hash, hashView(sortedView(V1)));
  }
});

Deno.test("DoorFeed.answer() holds a current door, then answers current", async () => {
  const feed = new DoorFeed(V1, { history: 4 });
  const started = performance.now();
  const answer = await feed.answer(feed.live.hash, 150);
  assert.deepEqual(answer, { type: "current", hash: feed.live.hash });
  assert.ok(performance.now() - started >= 140, "held for the hold");
  assert.deepEqual(await feed.answer(feed.live.hash, 0), { type: "current", hash: feed.live.hash });
  const ended = new AbortController();
  const held = feed.answer(feed.live.hash, 60_000, ended.signal);
  ended.abort();
  assert.equal((await held).type, "current");
});

Deno.test("DoorFeed.publish() wakes a held poll with a delta; slugs only when they changed", async () => {
  const feed = new DoorFeed(V1, { history: 4 });
  const first = feed.live.hash;
  const held = feed.answer(first, 60_000);
  await new Promise((resolve) => setTimeout(resolve, 10));
  assert.equal(feed.waiting, 1);
  assert.equal(
    feed.publish({ ...V1, mirrors: [...V1.mirrors] }),
    false,
    "the same view is no change",
  );
  assert.equal(feed.waiting, 1);
  const v2 = { slugs: V1.slugs, mirrors: [mirror("a.example", "blocked"), mirror("c.example")] };
  assert.equal(feed.publish(v2), true);
  const delta = await held;
  assert.deepEqual(delta, {
    type: "delta",
    from: first,
    hash: hashView(sortedView(v2)),
    mirrors: [mirror("a.example", "blocked"), mirror("c.example")],
    removed: ["b.example"],
  });
  const slugs = [SLUG, { ...SLUG, slug: "feed-slug-02" }];
  feed.publish({ ...v2, slugs });
  const again = await feed.answer(first, 0);
  assert.equal(again.type, "delta");
  assert.deepEqual(again.type === "delta" && again.slugs, slugs);
  assert.deepEqual(again.type === "delta" && again.removed, ["b.example"]);
});

Deno.test("DoorFeed keeps a bounded history: a door further behind gets a snapshot", async () => {
  const feed = new DoorFeed(V1, { history: 2 });
  const oldest = feed.live.hash;
  feed.publish({ ...V1, mirrors: [mirror("a.example", "degraded")] });
  const middle = feed.live.hash;
  feed.publish({ ...V1, mirrors: [mirror("a.example", "blocked")] });
  assert.equal((await feed.answer(oldest, 0)).type, "snapshot");
  assert.equal((await feed.answer(middle, 0)).type, "delta");
});

/** A stand-in ServerResponse: only its "close" event is read. */
function response(): ServerResponse & EventEmitter {
  return new EventEmitter() as unknown as ServerResponse & EventEmitter;
}

Deno.test("DoorService: verdicts from the client, status without slugs, the stream route", async () => {
  const hub = await startDoorHub({
    mirrors: [{ host: "a.example", region: "DE" }, { host: "b.example" }, {
      host: "c.example",
      enabled: false,
    }],
    slugs: [{ slug: "service-slug-1", strategy: "first" }],
    holdMs: 60_000,
  });
  try {
    hub.client.set("a.example", SAYS.degraded);
    await hub.service.probeNow();
    await hub.service.probeNow();
    // deno-lint-ignore no-explicit-any
    const status = hub.service.status() as Record<string, any>;
    assert.deepEqual(status.verdicts, { live: 0, degraded: 1, blocked: 0, unknown: 1 });
    assert.deepEqual(status.mirrors[0].regions, { r1: "ok", r2: "failed" });
    assert.equal(status.mirrors[2].enabled, false);
    assert.equal(status.prober.rounds, 3);
    assert.ok(!JSON.stringify(status).includes("service-slug-1"));
    assert.equal(
      hub.lines.filter((l) => l.includes("probing b.example failed")).length,
      1,
      "a failing mirror is logged once, not every round",
    );

    const route = doorStreamRoute(hub.service);
    const url = new URL(`http://hub/v1/doors/stream?node_id=door-9&have=&wait=0`);
    const snapshot = JSON.parse((await route(url, response()))!.body as string);
    assert.equal(snapshot.type, "snapshot");
    assert.deepEqual(snapshot.view.mirrors.map((m: DoorMirror) => m.host), [
      "a.example",
      "b.example",
    ]);
    const gone = response();
    const held = route(
      new URL(`http://hub/v1/doors/stream?node_id=door-9&have=${snapshot.hash}`),
      gone,
    );
    await new Promise((resolve) => setTimeout(resolve, 10));
    assert.equal(hub.service.doors.get("door-9")!.holding, true);
    gone.emit("close");
    assert.equal(await held, undefined, "no reply to a door that went away");
    assert.equal(hub.service.doors.get("door-9")!.polls, 2);
  } finally {
    await hub.dispose();
  }
});
