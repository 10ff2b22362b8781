import assert from "node:assert/strict";
import { type Clock, Ledger } from "../src/ledger/ledger.ts";
import { type Overload, OVERLOAD_KINDS, overloadStatus } from "../src/ledger/overload.ts";
import { snapshotLedger } from "../src/ledger/snapshot.ts";
import { validateProfile } from "../src/ledger/profile.ts";
import { admitted, profile, profileInput, refused } from "./fixtures/ledger.ts";

Deno.test("ledger.admit() takes a protected lane's reserve first, then the general pool", () => {
  let now = 0;
  const ledger = new Ledger(profile(), { clock: () => now });
  const got = [1, 2, 3, 4].map(() => admitted(ledger.admit("local_health")).fromReserve);
  assert.deepEqual(got, [true, true, false, false]);
  const snap = snapshotLedger(ledger);
  assert.equal(snap.lanes.local_health.in_use, 4);
  assert.equal(snap.lanes.local_health.reserve_in_use, 2);
  assert.equal(snap.general_in_use, 2);
  assert.equal(ledger.inUse("local_health"), 4);
  now = 1;
  assert.equal(admitted(ledger.admit("provider_health")).fromReserve, true);
});

Deno.test("ledger.admit() refuses a protected reserve to the public lane", () => {
  const ledger = new Ledger(profile(), { clock: () => 0 });
  const pub = [1, 2, 3].map(() => admitted(ledger.admit("public")));
  assert.ok(pub.every((t) => !t.fromReserve));
  const over = refused(ledger.admit("public"), "lane_pool_full");
  assert.equal(overloadStatus(over.overload), 429);
  // the protected lanes still admit from their reserves
  assert.equal(admitted(ledger.admit("local_health")).fromReserve, true);
  assert.equal(admitted(ledger.admit("local_health")).fromReserve, true);
  assert.equal(admitted(ledger.admit("provider_health")).fromReserve, true);
  const snap = snapshotLedger(ledger);
  assert.equal(snap.lanes.public.in_use, 3);
  assert.equal(snap.lanes.public.overload.lane_pool_full, 1);
  assert.equal(snap.lanes.local_health.reserve_in_use, 2);
  assert.equal(snap.lanes.provider_health.reserve_in_use, 1);
});

Deno.test("ledger.admit() stops a protected lane at its ceiling (max_slots)", () => {
  // 10 slots: general pool 7, local_health ceiling 2 + min(2, 7) = 4
  const ledger = new Ledger(profile({ application_slots: 10 }), { clock: () => 0 });
  for (let i = 0; i < 4; i++) admitted(ledger.admit("local_health"));
  refused(ledger.admit("local_health"), "lane_pool_full");
  assert.equal(ledger.inUse("local_health"), 4);
  assert.equal(snapshotLedger(ledger).general_in_use, 2);
  admitted(ledger.admit("public")); // the general pool still has room for others
  // an explicit ceiling
  const capped = new Ledger(
    profile({ application_slots: 10, lanes: { local_health: { max_slots: 3 } } }),
    { clock: () => 0 },
  );
  for (let i = 0; i < 3; i++) admitted(capped.admit("local_health"));
  refused(capped.admit("local_health"), "lane_pool_full");
  assert.equal(snapshotLedger(capped).lanes.local_health.overload.lane_pool_full, 1);
});

Deno.test("ledger.admit() answers aggregate_full when other lanes hold the general pool", () => {
  const ledger = new Ledger(profile(), { clock: () => 0 });
  const pub = [1, 2, 3].map(() => admitted(ledger.admit("public")));
  admitted(ledger.admit("local_health"));
  admitted(ledger.admit("local_health"));
  const over = refused(ledger.admit("local_health"), "aggregate_full");
  assert.equal(overloadStatus(over.overload), 503);
  let snap = snapshotLedger(ledger);
  assert.equal(snap.lanes.local_health.in_use, 2, "the refused lane slot was given back");
  assert.equal(snap.general_in_use, 3);
  assert.equal(snap.lanes.local_health.overload.aggregate_full, 1);
  pub[0].complete();
  assert.equal(admitted(ledger.admit("local_health")).fromReserve, false);
  snap = snapshotLedger(ledger);
  assert.equal(snap.lanes.local_health.in_use, 3);
  assert.equal(snap.general_in_use, 3);
});

Deno.test("ledger.admit() answers byte_budget for general-pool admissions only", () => {
  // reserve bytes 2×500 + 1×200 = 1200; general bytes 3700 − 1200 = 2500; general pool 5
  const ledger = new Ledger(profile({ application_slots: 8, inflight_bytes: 3700 }), {
    clock: () => 0,
  });
  const a = admitted(ledger.admit("public"));
  admitted(ledger.admit("public"));
  refused(ledger.admit("public"), "byte_budget");
  let snap = snapshotLedger(ledger);
  assert.equal(snap.general_in_use, 2, "the refused slot was given back");
  assert.equal(snap.bytes_in_use, 2000);
  // reserve admissions carry pre-carved bytes and never fail on bytes
  assert.equal(admitted(ledger.admit("local_health")).fromReserve, true);
  assert.equal(admitted(ledger.admit("local_health")).fromReserve, true);
  assert.equal(admitted(ledger.admit("local_health")).fromReserve, false); // 2500 of 2500
  refused(ledger.admit("local_health"), "byte_budget");
  assert.equal(admitted(ledger.admit("provider_health")).fromReserve, true);
  snap = snapshotLedger(ledger);
  assert.equal(snap.bytes_in_use, 2000 + 500 + 2 * 500 + 200);
  assert.equal(snap.lanes.public.overload.byte_budget, 1);
  assert.equal(snap.lanes.local_health.overload.byte_budget, 1);
  a.complete();
  admitted(ledger.admit("public"));
  assert.equal(snapshotLedger(ledger).bytes_in_use, 3700);
});

Deno.test("ledger.admit() enforces the per-connection bound through a ConnectionBudget", () => {
  const ledger = new Ledger(profile({ per_connection: 2 }), { clock: () => 0 });
  const conn = { active: 0 };
  const a = admitted(ledger.admit("public", conn));
  assert.equal(conn.active, 1);
  admitted(ledger.admit("public", conn));
  assert.equal(conn.active, 2);
  const over = refused(ledger.admit("public", conn), "per_connection_limit");
  assert.equal(overloadStatus(over.overload), 429);
  assert.equal(conn.active, 2, "a refusal does not count against the connection");
  const other = { active: 0 };
  admitted(ledger.admit("public", other));
  assert.equal(other.active, 1);
  a.cancel();
  assert.equal(conn.active, 1);
  admitted(ledger.admit("local_health", conn));
  assert.equal(conn.active, 2);
  const snap = snapshotLedger(ledger);
  assert.equal(snap.lanes.public.overload.per_connection_limit, 1);
  assert.equal(snap.lanes.public.in_use, 2);
});

Deno.test("ledger.admit() caps one connection's request rate: burst, refill, others unaffected", () => {
  let now = 1000;
  const ledger = new Ledger(
    profile({ per_connection: 8, connection_rate: { per_second: 10, burst: 2 } }),
    { clock: () => now },
  );
  const conn = { active: 0 };
  admitted(ledger.admit("public", conn)).complete();
  admitted(ledger.admit("public", conn)).complete();
  const over = refused(ledger.admit("public", conn), "connection_rate");
  assert.equal(overloadStatus(over.overload), 429);
  assert.ok(over.retryAfterMs! > 0 && over.retryAfterMs! <= 100, `${over.retryAfterMs}`);
  // Another connection has its own bucket; requests not tied to a connection have none.
  admitted(ledger.admit("public", { active: 0 })).complete();
  admitted(ledger.admit("public")).complete();
  now += 100; // one token back
  admitted(ledger.admit("public", conn)).complete();
  refused(ledger.admit("public", conn), "connection_rate");
  assert.equal(snapshotLedger(ledger).lanes.public.overload.connection_rate, 2);
  assert.equal(snapshotLedger(ledger).release_balanced, true);
});

Deno.test("ledger.admit() refuses a request whose token is due in less than a millisecond", () => {
  // 5,000 per second: a token every 200 µs. Right after a burst of one, the next token is 0.2 ms
  // away: still refused (Retry-After rounds it up), on the lane's budget and a connection's alike.
  let now = 1000;
  const ledger = new Ledger(
    profile({
      per_connection: 8,
      connection_rate: { per_second: 5000, burst: 1 },
      lanes: { provider_health: { rate: { per_second: 5000, burst: 1 } } },
    }),
    { clock: () => now },
  );
  const conn = { active: 0 };
  admitted(ledger.admit("public", conn)).complete();
  const soon = refused(ledger.admit("public", conn), "connection_rate");
  assert.ok(soon.retryAfterMs! > 0 && soon.retryAfterMs! < 1, `${soon.retryAfterMs}`);
  admitted(ledger.admit("provider_health")).complete();
  const lane = refused(ledger.admit("provider_health"), "rate_budget");
  assert.ok(lane.retryAfterMs! > 0 && lane.retryAfterMs! < 1, `${lane.retryAfterMs}`);
  now += 0.2; // the token is due
  admitted(ledger.admit("public", conn)).complete();
  admitted(ledger.admit("provider_health")).complete();
});

Deno.test("ledger.admit() spends the rate budget: burst, then refill over time", () => {
  let now = 0;
  const ledger = new Ledger(
    profile({ lanes: { provider_health: { rate: { per_second: 2, burst: 2 } } } }),
    { clock: () => now },
  );
  admitted(ledger.admit("provider_health")).complete();
  admitted(ledger.admit("provider_health")).complete();
  const over = ledger.admit("provider_health");
  assert.deepEqual(over, { overload: "rate_budget", retryAfterMs: 500 });
  assert.equal(overloadStatus("rate_budget"), 429);
  now = 200;
  assert.deepEqual(ledger.admit("provider_health"), { overload: "rate_budget", retryAfterMs: 300 });
  now = 500;
  admitted(ledger.admit("provider_health")).complete();
  assert.deepEqual(ledger.admit("provider_health"), { overload: "rate_budget", retryAfterMs: 500 });
  now = 10_000; // a long idle refills the burst, no more
  admitted(ledger.admit("provider_health")).complete();
  admitted(ledger.admit("provider_health")).complete();
  assert.equal((ledger.admit("provider_health") as Overload).overload, "rate_budget");
  const snap = snapshotLedger(ledger);
  assert.equal(snap.lanes.provider_health.overload.rate_budget, 4);
  assert.equal(snap.lanes.provider_health.admitted, 5);
  assert.equal(snap.lanes.public.overload.rate_budget, 0, "lanes without a rate are not limited");
});

Deno.test("ledger.admit() answers deadline_exceeded when the clock throws or is not finite", () => {
  const clocks: Clock[] = [
    () => {
      throw new Error("no clock");
    },
    () => NaN,
    () => Infinity,
  ];
  for (const clock of clocks) {
    const ledger = new Ledger(profile(), { clock });
    const conn = { active: 0 };
    const over = ledger.admit("local_health", conn);
    refused(over, "deadline_exceeded");
    assert.equal(overloadStatus("deadline_exceeded"), 503);
    assert.equal(conn.active, 0);
    const snap = snapshotLedger(ledger);
    assert.equal(snap.lanes.local_health.overload.deadline_exceeded, 1);
    assert.equal(snap.admitted, 0);
    assert.equal(snap.outstanding, 0);
    assert.equal(snap.lanes.local_health.in_use, 0);
  }
  assert.ok(Number.isNaN(new Ledger(profile(), { clock: clocks[0] }).now()));
});

Deno.test("ledger.admit() throws RangeError on a disabled lane", () => {
  const ledger = new Ledger(
    profile({ lanes: { provider_health: { enabled: false, reserve: 0 } } }),
    { clock: () => 0 },
  );
  assert.throws(() => ledger.admit("provider_health"), RangeError);
  assert.throws(() => ledger.admit("provider_health"), /"provider_health" is not enabled/);
  const snap = snapshotLedger(ledger);
  assert.equal(snap.lanes.provider_health.enabled, false);
  assert.equal(snap.admitted, 0);
  assert.equal(snap.outstanding, 0);
  const zeros = OVERLOAD_KINDS.map(() => 0);
  assert.deepEqual(Object.values(snap.lanes.provider_health.overload), zeros);
});

Deno.test("ledger counts each overload kind on its own lane's counter", () => {
  let now = 0;
  let broken = false;
  const ledger = new Ledger(
    profile({
      application_slots: 8, // general pool 5
      inflight_bytes: 3700, // general bytes 2500
      lanes: {
        public: { max_slots: 2 },
        provider_health: { rate: { per_second: 1, burst: 1 } },
      },
    }),
    { clock: () => broken ? NaN : now },
  );
  admitted(ledger.admit("public"));
  admitted(ledger.admit("public"));
  refused(ledger.admit("public"), "lane_pool_full"); // public ceiling 2
  refused(ledger.admit("public", { active: 2 }), "per_connection_limit");
  for (let i = 0; i < 3; i++) admitted(ledger.admit("local_health")); // 2 reserve + 500 bytes
  refused(ledger.admit("local_health"), "byte_budget"); // 2500 + 500 > 2500
  admitted(ledger.admit("provider_health")); // its reserve, spends the one token
  assert.equal(refused(ledger.admit("provider_health"), "rate_budget").retryAfterMs, 1000);
  now = 1000;
  refused(ledger.admit("provider_health"), "byte_budget"); // 2500 + 200 > 2500
  broken = true;
  refused(ledger.admit("local_health"), "deadline_exceeded");
  const snap = snapshotLedger(ledger);
  const zero = Object.fromEntries(OVERLOAD_KINDS.map((k) => [k, 0]));
  assert.deepEqual(snap.lanes.public.overload, {
    ...zero,
    lane_pool_full: 1,
    per_connection_limit: 1,
  });
  assert.deepEqual(snap.lanes.local_health.overload, {
    ...zero,
    byte_budget: 1,
    deadline_exceeded: 1,
  });
  assert.deepEqual(snap.lanes.provider_health.overload, {
    ...zero,
    rate_budget: 1,
    byte_budget: 1,
  });
  assert.deepEqual(
    [snap.lanes.public.admitted, snap.lanes.local_health.admitted, snap.admitted],
    [2, 3, 6],
  );
});

Deno.test("ledger.shed() takes back a low-priority request only from the priority reserve", () => {
  // Public ceiling 3, the top slot kept for high-priority routes.
  const ledger = new Ledger(profile({ lanes: { public: { priority_reserve: 1 } } }));
  const first = admitted(ledger.admit("public"));
  const second = admitted(ledger.admit("public"));
  assert.equal(ledger.shed(second), false, "two of three slots: below the reserve");
  const third = admitted(ledger.admit("public"));
  assert.equal(ledger.shed(third), true, "the third slot is the reserved one");
  assert.equal(third.live, false, "the shed request's reservation is released");
  assert.equal(ledger.inUse("public"), 2);
  const snap = snapshotLedger(ledger);
  assert.equal(snap.lanes.public.overload.priority_shed, 1);
  assert.equal(snap.lanes.public.priority_reserve, 1);
  assert.equal(snap.cancelled, 1);
  // A high-priority request never asks to be shed: it keeps the reserved slot.
  const high = admitted(ledger.admit("public"));
  assert.equal(ledger.inUse("public"), 3);
  for (const ticket of [first, second, high]) ticket.complete();
  assert.equal(snapshotLedger(ledger).outstanding, 0);
});

Deno.test("ledger.shed() never sheds when the lane keeps no priority reserve", () => {
  const ledger = new Ledger(profile());
  const tickets = [1, 2, 3].map(() => admitted(ledger.admit("public")));
  assert.equal(ledger.shed(tickets[2]), false);
  assert.equal(snapshotLedger(ledger).lanes.public.priority_reserve, 0);
  for (const ticket of tickets) ticket.complete();
});

Deno.test("validateProfile() defaults priority_reserve -1 to a tenth and refuses one that fills the lane", () => {
  const asked = validateProfile(profileInput({
    application_slots: 43,
    lanes: { public: { priority_reserve: -1 } },
  }));
  assert.ok(asked.ok);
  assert.equal(asked.profile.lanes.find((l) => l.name === "public")?.priorityReserve, 4);
  const tiny = validateProfile(profileInput({ lanes: { public: { priority_reserve: -1 } } }));
  assert.ok(tiny.ok);
  assert.equal(tiny.profile.lanes.find((l) => l.name === "public")?.priorityReserve, 1);
  const full = validateProfile(profileInput({ lanes: { public: { priority_reserve: 3 } } }));
  assert.ok(!full.ok);
  assert.deepEqual(full.problems.map((p) => p.path.join(".")), ["lanes.public.priority_reserve"]);
});
