/**
 * A door end to end against a hub's door service (in process, token auth): the cover on `/` and,
 * byte for byte, on every miss; a 302 per verdict case (live over degraded, degraded when no live,
 * blocked never, an excluded region never, the unknown rule); each strategy; HEAD; 405; and no
 * slug in any log line.
 *
 * @module
 */
import assert from "node:assert/strict";
import { exchange, renderRequest } from "./fixtures/http_client.ts";
import {
  ask,
  COVER,
  doorStatus,
  eventually,
  SAYS,
  startDoorHub,
  startTestDoor,
  type TestDoor,
  type TestDoorHub,
} from "./fixtures/door.ts";

const MIRRORS = [
  { host: "live-a.example", region: "DE" },
  { host: "live-b.example", region: "NL" },
  { host: "degraded.example", region: "FR" },
  { host: "blocked.example", region: "SE" },
  { host: "excluded.example", region: "IR" },
  { host: "noregion.example" },
  { host: "fresh.example", region: "DE" },
  { host: "off.example", region: "DE", enabled: false },
];

const SLUGS = [
  {
    slug: "prefer-live-0001",
    strategy: "first",
    mirrors: ["blocked.example", "degraded.example", "live-b.example", "live-a.example"],
  },
  { slug: "degraded-0002", strategy: "first", mirrors: ["blocked.example", "degraded.example"] },
  { slug: "blocked-0003", strategy: "first", mirrors: ["blocked.example"] },
  {
    slug: "exclude-ir-0004",
    strategy: "first",
    mirrors: ["excluded.example", "noregion.example", "live-a.example"],
    exclude_regions: ["IR"],
  },
  { slug: "random-0005", strategy: "random", mirrors: ["live-a.example", "live-b.example"] },
  {
    slug: "rotate-0006",
    strategy: "least_recent",
    mirrors: ["live-a.example", "degraded.example", "live-b.example"],
  },
  { slug: "disabled-0007", strategy: "first", mirrors: ["off.example"] },
  { slug: "unprobed-0008", strategy: "first", mirrors: ["fresh.example"] },
];

/** A hub whose mirrors have their verdicts (fresh.example's check fails), and a door on it. */
async function withDoor(
  body: (hub: TestDoorHub, door: TestDoor) => Promise<void>,
  options: { random?: () => number; prober?: boolean; now?: () => number } = {},
): Promise<void> {
  const hub = await startDoorHub({
    mirrors: MIRRORS,
    slugs: SLUGS,
    prober: options.prober,
    now: options.now,
  });
  for (const host of ["live-a.example", "live-b.example", "excluded.example", "noregion.example"]) {
    hub.client.set(host, SAYS.live);
  }
  hub.client.set("degraded.example", SAYS.degraded);
  hub.client.set("blocked.example", SAYS.blocked);
  await hub.service.probeNow();
  const door = await startTestDoor(hub, { random: options.random });
  try {
    await eventually(
      "the door to hold the hub's view",
      async () => (await doorStatus(door.healthPort)).view.hash === hub.service.feed.live.hash,
    );
    await body(hub, door);
    for (const line of [...door.lines, ...hub.lines]) {
      for (const { slug } of SLUGS) {
        assert.ok(!line.includes(slug), `A log line names a slug: ${line}`);
      }
    }
  } finally {
    await door.door.close();
    await hub.dispose();
    await Deno.remove(door.dir, { recursive: true });
  }
}

/** Where the door sends `path`: the Location's host, or "cover". */
async function target(door: TestDoor, path: string): Promise<string> {
  const answer = await ask(door.port, path);
  if (answer.status === 200 && answer.body === COVER) return "cover";
  assert.equal(answer.status, 302, `${path}: ${answer.status} ${answer.body}`);
  assert.equal(answer.body, "");
  assert.equal(answer.headers.get("cache-control"), "no-store");
  assert.equal(answer.headers.get("referrer-policy"), "no-referrer");
  return new URL(answer.headers.get("location")!).host;
}

/** A raw response without its Date line (the one header that differs by the second). */
async function raw(port: number, path: string, method = "GET"): Promise<string> {
  const text = await exchange(port, renderRequest({ method, path }));
  return text.replace(/\r\ndate: [^\r]*/i, "");
}

Deno.test("door: the cover on /, and byte for byte the same answer on every miss", async () => {
  await withDoor(async (_hub, door) => {
    const cover = await raw(door.port, "/");
    assert.match(cover, /^HTTP\/1\.1 200 /);
    assert.ok(cover.endsWith(COVER));
    for (
      const miss of [
        "/not-a-slug-at-all",
        "/prefer-live-0002",
        "/prefer-live-000",
        "/PREFER-LIVE-0001",
        "/blocked-0003",
        "/disabled-0007",
        "/x/prefer-live-0001",
        "/?prefer-live-0001",
      ]
    ) {
      assert.equal(await raw(door.port, miss), cover, `${miss} must look like the cover`);
    }
  });
});

Deno.test("door: a slug goes to a live mirror before a degraded one, never a blocked one", async () => {
  await withDoor(async (_hub, door) => {
    assert.equal(await target(door, "/prefer-live-0001"), "live-b.example");
    assert.equal(await target(door, "/prefer-live-0001/deeper/path?q=1"), "live-b.example");
    assert.equal(await target(door, "/degraded-0002"), "degraded.example");
    assert.equal(await target(door, "/blocked-0003"), "cover");
    assert.equal(await target(door, "/disabled-0007"), "cover");
  });
});

Deno.test("door: a mirror in an excluded region, or of no written region, is never chosen", async () => {
  await withDoor(async (_hub, door) => {
    assert.equal(await target(door, "/exclude-ir-0004"), "live-a.example");
  });
});

Deno.test("door: an unknown mirror is chosen only while no mirror has a verdict", async () => {
  await withDoor(async (_hub, door) => {
    // fresh.example has never answered, while the other mirrors have verdicts.
    assert.equal(await target(door, "/unprobed-0008"), "cover");
  });
  await withDoor(async (_hub, door) => {
    // No prober: no mirror has ever had a verdict, so unknown ones are used (in slug order).
    assert.equal(await target(door, "/unprobed-0008"), "fresh.example");
    assert.equal(await target(door, "/prefer-live-0001"), "blocked.example");
  }, { prober: false });
});

Deno.test("door: results older than three intervals are unknown, and send nowhere", async () => {
  let now = Date.now();
  await withDoor(async (hub, door) => {
    assert.equal(await target(door, "/prefer-live-0001"), "live-b.example");
    for (const m of MIRRORS) hub.client.set(m.host, undefined); // every check fails from now on
    now += 4 * 3_600_000;
    await hub.service.probeNow();
    await eventually(
      "the stale view at the door",
      async () => (await doorStatus(door.healthPort)).view.hash === hub.service.feed.live.hash,
    );
    assert.equal((await doorStatus(door.healthPort)).view.verdicts.unknown, 7);
    assert.equal(await target(door, "/prefer-live-0001"), "cover");
  }, { now: () => now });
});

Deno.test("door: the strategies first, random and least_recent", async () => {
  const draws = [0, 0.99, 0.5, 0.2];
  let i = 0;
  await withDoor(async (_hub, door) => {
    assert.equal(await target(door, "/random-0005"), "live-a.example");
    assert.equal(await target(door, "/random-0005"), "live-b.example");
    assert.equal(await target(door, "/random-0005"), "live-b.example");
    assert.equal(await target(door, "/random-0005"), "live-a.example");
    const rotation = [];
    for (let n = 0; n < 4; n++) rotation.push(await target(door, "/rotate-0006"));
    // Degraded is never in the rotation while live mirrors exist.
    assert.deepEqual(rotation, [
      "live-a.example",
      "live-b.example",
      "live-a.example",
      "live-b.example",
    ]);
    assert.equal(await target(door, "/prefer-live-0001"), "live-b.example");
    assert.equal(await target(door, "/prefer-live-0001"), "live-b.example");
  }, { random: () => draws[i++ % draws.length] });
});

Deno.test("door: HEAD answers like GET without a body; other methods get 405 with Allow", async () => {
  await withDoor(async (_hub, door) => {
    const head = await ask(door.port, "/", "HEAD");
    assert.equal(head.status, 200);
    assert.equal(head.body, "");
    assert.equal(
      head.headers.get("content-length"),
      String(new TextEncoder().encode(COVER).length),
    );
    const miss = await raw(door.port, "/no-such-slug-here", "HEAD");
    assert.equal(miss, await raw(door.port, "/", "HEAD"));
    const hit = await ask(door.port, "/prefer-live-0001", "HEAD");
    assert.equal(hit.status, 302);
    assert.equal(hit.headers.get("location"), "https://live-b.example/");
    for (const method of ["POST", "PUT", "DELETE", "OPTIONS"]) {
      for (const path of ["/", "/prefer-live-0001"]) {
        const refused = await ask(door.port, path, method);
        assert.equal(refused.status, 405, `${method} ${path}`);
        assert.equal(refused.headers.get("allow"), "GET, HEAD");
        assert.equal(refused.headers.get("location"), null);
        assert.equal(refused.body, "");
      }
    }
    const status = await doorStatus(door.healthPort);
    assert.equal(status.answered.refused, 8);
    assert.equal(status.view.slugs, SLUGS.length);
    assert.equal(status.view.mirrors, MIRRORS.length - 1, "the disabled mirror is not offered");
    assert.equal(JSON.stringify(status).includes("prefer-live"), false, "status names no slug");
  });
});

Deno.test("door: a request head over limits.header_bytes is refused with 431", async () => {
  await withDoor(async (_hub, door) => {
    const big = await exchange(
      door.port,
      renderRequest({ path: "/prefer-live-0001", headers: [["X-Pad", "a".repeat(9000)]] }),
    );
    assert.match(big, /^HTTP\/1\.1 431 /);
    assert.doesNotMatch(big, /location:/i);
  });
});
