import assert from "node:assert/strict";
import { LANE_NAMES } from "../src/ledger/lane_names.ts";
import { Ledger } from "../src/ledger/ledger.ts";
import { OVERLOAD_KINDS } from "../src/ledger/overload.ts";
import type { Profile } from "../src/ledger/profile.ts";
import { snapshotLedger } from "../src/ledger/snapshot.ts";
import { admitted, profile as ledgerProfile } from "./fixtures/ledger.ts";

/** 6 slots, reserves local_health 2, general pool 4; provider_health is off, with a rate budget. */
function profile(): Profile {
  return ledgerProfile({
    lanes: { provider_health: { enabled: false, reserve: 0, rate: { per_second: 20, burst: 40 } } },
  });
}

Deno.test("snapshotLedger() has the fields the ledger endpoint promises", () => {
  let now = 0;
  const ledger = new Ledger(profile(), { clock: () => now });
  const ticket = admitted(ledger.admit("public"));
  now = 1;
  ticket.complete();
  ledger.denyRoute("local_health");
  const snap = snapshotLedger(ledger);
  assert.deepEqual(Object.keys(snap.lanes).sort(), [...LANE_NAMES].sort());
  for (const name of LANE_NAMES) {
    const lane = snap.lanes[name];
    for (const field of ["enabled"] as const) assert.equal(typeof lane[field], "boolean");
    const counts = ["reserve", "priority_reserve", "in_use", "admitted", "denied_route"] as const;
    for (const field of counts) {
      assert.equal(typeof lane[field], "number", `lanes.${name}.${field}`);
    }
    assert.deepEqual(Object.keys(lane.overload).sort(), [
      "aggregate_full",
      "byte_budget",
      "connection_rate",
      "deadline_exceeded",
      "lane_pool_full",
      "per_connection_limit",
      "priority_shed",
      "rate_budget",
    ]);
    for (const kind of OVERLOAD_KINDS) assert.equal(lane.overload[kind], 0);
  }
  assert.deepEqual(
    LANE_NAMES.map((n) => [n, snap.lanes[n].enabled, snap.lanes[n].reserve]),
    [["public", true, 0], ["local_health", true, 2], ["provider_health", false, 0]],
  );
  assert.equal(snap.lanes.public.admitted, 1);
  assert.equal(snap.lanes.local_health.denied_route, 1);
  assert.deepEqual(
    {
      admitted: snap.admitted,
      completed: snap.completed,
      cancelled: snap.cancelled,
      outstanding: snap.outstanding,
      double_release: snap.double_release,
      high_water_slots: snap.high_water_slots,
      release_balanced: snap.release_balanced,
    },
    {
      admitted: 1,
      completed: 1,
      cancelled: 0,
      outstanding: 0,
      double_release: 0,
      high_water_slots: 1,
      release_balanced: true,
    },
  );
  assert.deepEqual(JSON.parse(JSON.stringify(snap)), snap, "the snapshot is plain JSON");
});

Deno.test("snapshotLedger() leaves out the observer's own reserve reservation", () => {
  const ledger = new Ledger(profile(), { clock: () => 0 });
  admitted(ledger.admit("public"));
  const observer = admitted(ledger.admit("local_health"));
  assert.equal(observer.fromReserve, true);

  const seen = snapshotLedger(ledger);
  assert.equal(seen.excludes_observer, false);
  assert.deepEqual(
    [seen.admitted, seen.outstanding, seen.bytes_in_use, seen.lanes.local_health.in_use],
    [2, 2, 1500, 1],
  );

  const snap = snapshotLedger(ledger, observer);
  assert.equal(snap.excludes_observer, true);
  assert.equal(snap.lanes.local_health.admitted, 0);
  assert.equal(snap.lanes.local_health.in_use, 0);
  assert.equal(snap.lanes.local_health.reserve_in_use, 0);
  assert.equal(snap.lanes.public.in_use, 1, "other lanes are untouched");
  assert.equal(snap.admitted, 1);
  assert.equal(snap.outstanding, 1);
  assert.equal(snap.bytes_in_use, 1000);
  assert.equal(snap.general_in_use, 1);
  assert.equal(snap.release_balanced, false, "the public request is still outstanding");
  assert.equal(observer.live, true, "reading does not release the observer");
});

Deno.test("snapshotLedger() leaves out an observer that borrowed from the general pool", () => {
  const ledger = new Ledger(profile(), { clock: () => 0 });
  admitted(ledger.admit("local_health"));
  admitted(ledger.admit("local_health"));
  const observer = admitted(ledger.admit("local_health"));
  assert.equal(observer.fromReserve, false);
  const snap = snapshotLedger(ledger, observer);
  assert.equal(snap.excludes_observer, true);
  assert.deepEqual(
    [snap.lanes.local_health.in_use, snap.lanes.local_health.reserve_in_use, snap.general_in_use],
    [2, 2, 0],
  );
  assert.equal(snap.lanes.local_health.admitted, 2);
  assert.equal(snap.outstanding, 2);
  assert.equal(snap.bytes_in_use, 1000);
});

Deno.test("snapshotLedger() counts an observer alone as balanced, and a released one again", () => {
  const ledger = new Ledger(profile(), { clock: () => 0 });
  admitted(ledger.admit("public")).complete();
  const observer = admitted(ledger.admit("local_health"));
  const snap = snapshotLedger(ledger, observer);
  assert.deepEqual(
    [snap.admitted, snap.completed, snap.outstanding, snap.release_balanced],
    [1, 1, 0, true],
  );
  observer.complete();
  const after = snapshotLedger(ledger, observer);
  assert.equal(after.excludes_observer, false, "a released observer is no longer left out");
  assert.deepEqual(
    [after.admitted, after.completed, after.outstanding, after.release_balanced],
    [2, 2, 0, true],
  );
  assert.equal(after.lanes.local_health.admitted, 1);
});

Deno.test("snapshotLedger() accounts bytes_in_use for reserve and general admissions", () => {
  const ledger = new Ledger(profile(), { clock: () => 0 });
  const bytes = () => snapshotLedger(ledger).bytes_in_use;
  assert.equal(bytes(), 0);
  const pub = admitted(ledger.admit("public"));
  assert.equal(bytes(), 1000);
  const r1 = admitted(ledger.admit("local_health"));
  const r2 = admitted(ledger.admit("local_health"));
  assert.equal(bytes(), 2000, "reserve admissions count their pre-carved footprint");
  const g = admitted(ledger.admit("local_health"));
  assert.equal(g.fromReserve, false);
  assert.equal(bytes(), 2500);
  r1.cancel();
  assert.equal(bytes(), 2000);
  g.complete();
  pub.complete();
  assert.equal(bytes(), 500);
  r2.cancel();
  assert.equal(bytes(), 0);
  assert.equal(snapshotLedger(ledger).inflight_bytes, 1_000_000);
});

Deno.test("snapshotLedger() reports release_balanced false while anything is outstanding", () => {
  const ledger = new Ledger(profile(), { clock: () => 0 });
  assert.equal(snapshotLedger(ledger).release_balanced, true, "a fresh ledger is balanced");
  const a = admitted(ledger.admit("public"));
  const b = admitted(ledger.admit("local_health"));
  assert.equal(snapshotLedger(ledger).release_balanced, false);
  a.complete();
  let snap = snapshotLedger(ledger);
  assert.deepEqual([snap.outstanding, snap.release_balanced], [1, false]);
  b.cancel();
  a.complete(); // counted, changes nothing else
  snap = snapshotLedger(ledger);
  assert.deepEqual(
    [snap.admitted, snap.completed, snap.cancelled, snap.outstanding, snap.double_release],
    [2, 1, 1, 0, 1],
  );
  assert.equal(snap.release_balanced, true);
});
