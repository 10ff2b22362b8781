import assert from "node:assert/strict";
import { Ledger } from "../src/ledger/ledger.ts";
import { OVERLOAD_KINDS, overloadStatus } from "../src/ledger/overload.ts";
import { snapshotLedger } from "../src/ledger/snapshot.ts";
import { admitted, profile } from "./fixtures/ledger.ts";

/** The gauges a release may change. */
function gauges(ledger: Ledger) {
  const snap = snapshotLedger(ledger);
  return {
    outstanding: snap.outstanding,
    general_in_use: snap.general_in_use,
    bytes_in_use: snap.bytes_in_use,
    public: snap.lanes.public.in_use,
    local_health: snap.lanes.local_health.in_use,
  };
}

Deno.test("reservation.expired() compares the clock against the absolute deadline", () => {
  let now = 1000;
  const ledger = new Ledger(profile(), { clock: () => now });
  const ticket = admitted(ledger.admit("local_health")); // deadline 50 ms
  assert.equal(ticket.deadline, 1050);
  assert.equal(ticket.expired(1049), false);
  assert.equal(ticket.expired(1050), true);
  assert.equal(ticket.expired(5000), true);
  assert.equal(ticket.expired(NaN), true, "an unreadable clock counts as expired");
  now = 2000;
  assert.equal(admitted(ledger.admit("public")).deadline, 2100);
});

Deno.test("ledger.expire() cancels the reservation and counts deadline_exceeded once", () => {
  let now = 0;
  const ledger = new Ledger(profile(), { clock: () => now });
  const ticket = admitted(ledger.admit("public"));
  now = 100;
  assert.equal(ticket.expired(ledger.now()), true);
  assert.deepEqual(ledger.expire(ticket), { overload: "deadline_exceeded" });
  assert.equal(ticket.live, false);
  let snap = snapshotLedger(ledger);
  assert.equal(snap.lanes.public.overload.deadline_exceeded, 1);
  assert.equal(snap.cancelled, 1);
  assert.equal(snap.completed, 0);
  assert.equal(snap.outstanding, 0);
  assert.equal(snap.lanes.public.in_use, 0);
  assert.equal(snap.release_balanced, true);
  // expiring it again is a counted double release, not a second overload
  assert.deepEqual(ledger.expire(ticket), { overload: "deadline_exceeded" });
  snap = snapshotLedger(ledger);
  assert.equal(snap.lanes.public.overload.deadline_exceeded, 1);
  assert.equal(snap.cancelled, 1);
  assert.equal(snap.double_release, 1);
});

Deno.test("reservation.complete()/cancel() release exactly once", () => {
  const ledger = new Ledger(profile(), { clock: () => 0 });
  const served = admitted(ledger.admit("public"));
  const aborted = admitted(ledger.admit("local_health"));
  const keep = admitted(ledger.admit("public"));
  assert.equal(served.complete(), true);
  assert.equal(aborted.cancel(), true);
  const before = gauges(ledger);
  assert.deepEqual(before, {
    outstanding: 1,
    general_in_use: 1,
    bytes_in_use: 1000,
    public: 1,
    local_health: 0,
  });
  assert.equal(served.complete(), false);
  assert.equal(served.cancel(), false);
  assert.equal(aborted.cancel(), false);
  assert.deepEqual(gauges(ledger), before, "a second release changes no gauge");
  const snap = snapshotLedger(ledger);
  assert.equal(snap.double_release, 3);
  assert.equal(snap.completed, 1);
  assert.equal(snap.cancelled, 1);
  assert.equal(snap.admitted, 3);
  keep.complete();
  assert.equal(snapshotLedger(ledger).release_balanced, true);
});

Deno.test("reservation.move() spends the old handle and the new one releases once", () => {
  const ledger = new Ledger(profile(), { clock: () => 0 });
  const conn = { active: 0 };
  const old = admitted(ledger.admit("local_health", conn));
  const moved = old.move();
  assert.equal(old.live, false);
  assert.equal(moved.live, true);
  assert.deepEqual(
    [moved.lane, moved.fromReserve, moved.deadline, moved.connection],
    [old.lane, old.fromReserve, old.deadline, conn],
  );
  assert.equal(ledger.inUse("local_health"), 1, "a move neither takes nor gives a slot");
  assert.equal(conn.active, 1);
  assert.equal(old.complete(), false);
  let snap = snapshotLedger(ledger);
  assert.equal(snap.double_release, 1);
  assert.equal(snap.completed, 0);
  assert.equal(snap.outstanding, 1);
  assert.throws(() => old.move(), TypeError);
  assert.equal(moved.complete(), true);
  snap = snapshotLedger(ledger);
  assert.equal(snap.completed, 1);
  assert.equal(snap.outstanding, 0);
  assert.equal(snap.lanes.local_health.in_use, 0);
  assert.equal(conn.active, 0);
  assert.throws(() => moved.move(), /Cannot move a released reservation/);
  assert.equal(snap.release_balanced, true);
});

Deno.test("ledger.openConnection() enforces each lane's connection ceiling", () => {
  const ledger = new Ledger(profile(), { clock: () => 0 });
  assert.deepEqual(
    [ledger.openConnection("public"), ledger.openConnection("public")],
    [true, true],
  );
  assert.equal(ledger.openConnection("public"), false);
  assert.equal(ledger.openConnection("local_health"), true, "a public flood leaves other lanes");
  assert.equal(ledger.openConnection("local_health"), false);
  let snap = snapshotLedger(ledger);
  assert.deepEqual(
    [snap.lanes.public.connections, snap.lanes.public.connections_accepted],
    [2, 2],
  );
  assert.equal(snap.lanes.public.connections_refused, 1);
  assert.equal(snap.lanes.local_health.connections_refused, 1);
  assert.equal(snap.lanes.provider_health.connections_refused, 0);
  ledger.closeConnection("public");
  assert.equal(snapshotLedger(ledger).lanes.public.connections, 1);
  assert.equal(ledger.openConnection("public"), true);
  snap = snapshotLedger(ledger);
  assert.deepEqual(
    [
      snap.lanes.public.connections,
      snap.lanes.public.connections_accepted,
      snap.lanes.public.connections_refused,
    ],
    [2, 3, 1],
  );
  assert.equal(snap.admitted, 0, "connections are not admissions");
});

Deno.test("ledger.denyRoute() counts per lane", () => {
  const ledger = new Ledger(profile(), { clock: () => 0 });
  ledger.denyRoute("local_health");
  ledger.denyRoute("local_health");
  ledger.denyRoute("public");
  const snap = snapshotLedger(ledger);
  assert.deepEqual(
    [snap.lanes.public, snap.lanes.local_health, snap.lanes.provider_health].map((l) =>
      l.denied_route
    ),
    [1, 2, 0],
  );
  assert.equal(snap.admitted, 0);
});

Deno.test("ledger counts high_water_slots as the most slots ever held at once", () => {
  const ledger = new Ledger(profile(), { clock: () => 0 });
  const held = [
    admitted(ledger.admit("public")),
    admitted(ledger.admit("local_health")),
    admitted(ledger.admit("provider_health")),
  ];
  assert.equal(snapshotLedger(ledger).high_water_slots, 3);
  held[0].complete();
  held[1].cancel();
  admitted(ledger.admit("public"));
  let snap = snapshotLedger(ledger);
  assert.equal(snap.outstanding, 2);
  assert.equal(snap.high_water_slots, 3, "releases do not lower the high water");
  for (let i = 0; i < 4; i++) admitted(ledger.admit("local_health"));
  assert.deepEqual(ledger.admit("public"), { overload: "aggregate_full" });
  snap = snapshotLedger(ledger);
  assert.equal(snap.outstanding, 6);
  assert.equal(snap.high_water_slots, 6, "refusals do not raise it");
});

Deno.test("overloadStatus() maps caller overloads to 429 and capacity overloads to 503", () => {
  assert.deepEqual(
    Object.fromEntries(OVERLOAD_KINDS.map((kind) => [kind, overloadStatus(kind)])),
    {
      lane_pool_full: 429,
      per_connection_limit: 429,
      rate_budget: 429,
      aggregate_full: 503,
      byte_budget: 503,
      deadline_exceeded: 503,
      priority_shed: 503,
      connection_rate: 429,
    },
  );
});
