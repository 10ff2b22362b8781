import assert from "node:assert/strict";
import { LANE_NAMES, type LaneName } from "../src/ledger/lane_names.ts";
import { type ConnectionBudget, Ledger } from "../src/ledger/ledger.ts";
import { COUNTER_INDEX, LedgerMemory } from "../src/ledger/memory.ts";
import type { Overload, OverloadKind } from "../src/ledger/overload.ts";
import type { Profile } from "../src/ledger/profile.ts";
import { Reservation } from "../src/ledger/reservation.ts";
import { snapshotLedger } from "../src/ledger/snapshot.ts";
import { profile as ledgerProfile } from "./fixtures/ledger.ts";
import { mulberry32 } from "./fixtures/random.ts";

/**
 * 7 slots, reserves local_health 2 + provider_health 1: general pool 4. Reserve bytes 1200, so
 * 4200 leaves 3000 general bytes: three public requests, fewer than the pool, so byte_budget is
 * reachable. provider_health has a rate budget of 5/s, burst 2.
 */
function profile(): Profile {
  return ledgerProfile({
    application_slots: 7,
    inflight_bytes: 4200,
    lanes: {
      public: { max_connections: 8, deadline_ms: 300 },
      local_health: { max_connections: 8, deadline_ms: 200 },
      provider_health: { max_connections: 8, rate: { per_second: 5, burst: 2 } },
    },
  });
}

interface Held {
  ticket: Reservation;
  conn?: ConnectionBudget;
}

for (const seed of [1, 42, 20240601]) {
  Deno.test(`ledger keeps its invariants over a random admit/release sequence (seed ${seed})`, () => {
    const next = mulberry32(seed);
    const pick = <T>(items: readonly T[]): T => items[Math.floor(next() * items.length)];
    let now = 0;
    const p = profile();
    const ledger = new Ledger(p, { clock: () => now });
    const conns: ConnectionBudget[] = [{ active: 0 }, { active: 0 }, { active: 0 }];
    const held: Held[] = [];
    const spent: Reservation[] = [];
    const expected = { reserve: [0, 0, 0], general: [0, 0, 0], bytes: 0, doubles: 0 };
    const seen = new Set<OverloadKind | "admitted">();

    const predict = (
      lane: number,
      conn?: ConnectionBudget,
    ): OverloadKind | "reserve" | "general" => {
      const l = p.lanes[lane];
      if (conn && conn.active >= p.perConnection) return "per_connection_limit";
      if (expected.reserve[lane] < l.reserve) return "reserve";
      if (expected.general[lane] >= l.maxSlots - l.reserve) return "lane_pool_full";
      if (expected.general.reduce((a, b) => a + b) >= p.generalPool) return "aggregate_full";
      if (expected.bytes + l.footprint > p.generalBytes) return "byte_budget";
      return "general";
    };
    const forget = (ticket: Reservation) => {
      if (ticket.fromReserve) expected.reserve[ticket.laneIndex]--;
      else {
        expected.general[ticket.laneIndex]--;
        expected.bytes -= p.lanes[ticket.laneIndex].footprint;
      }
    };

    for (let step = 0; step < 3000; step++) {
      const roll = next();
      if (roll < 0.5) {
        const lane = pick(LANE_NAMES);
        const index = LANE_NAMES.indexOf(lane);
        const conn = next() < 0.7 ? pick(conns) : undefined;
        const want = predict(index, conn);
        const got: Reservation | Overload = ledger.admit(lane, conn);
        if (got instanceof Reservation) {
          assert.equal(got.fromReserve ? "reserve" : "general", want, `step ${step}`);
          if (got.fromReserve) expected.reserve[index]++;
          else {
            expected.general[index]++;
            expected.bytes += p.lanes[index].footprint;
          }
          held.push({ ticket: got, conn });
          seen.add("admitted");
        } else if (got.overload === "rate_budget") {
          assert.equal(lane, "provider_health", `step ${step}`);
          assert.ok(got.retryAfterMs! > 0 && got.retryAfterMs! <= 200);
          assert.notEqual(want, "per_connection_limit", `step ${step}`);
          seen.add(got.overload);
        } else {
          assert.equal(got.overload, want, `step ${step}`);
          seen.add(got.overload);
        }
      } else if (roll < 0.85 && held.length > 0) {
        const [{ ticket }] = held.splice(Math.floor(next() * held.length), 1);
        assert.equal(next() < 0.5 ? ticket.complete() : ticket.cancel(), true);
        forget(ticket);
        spent.push(ticket);
      } else if (roll < 0.9 && spent.length > 0) {
        assert.equal(pick(spent).complete(), false);
        expected.doubles++;
      } else if (roll < 0.95 && held.length > 0) {
        const entry = pick(held);
        spent.push(entry.ticket);
        entry.ticket = entry.ticket.move();
      } else {
        now += Math.floor(next() * 250);
        for (let i = held.length - 1; i >= 0; i--) {
          if (!held[i].ticket.expired(now)) continue;
          assert.deepEqual(ledger.expire(held[i].ticket), { overload: "deadline_exceeded" });
          forget(held[i].ticket);
          spent.push(held.splice(i, 1)[0].ticket);
        }
      }

      const snap = snapshotLedger(ledger);
      let total = 0;
      for (const [index, name] of LANE_NAMES.entries()) {
        const lane = snap.lanes[name as LaneName];
        total += lane.in_use;
        assert.ok(lane.in_use <= p.lanes[index].maxSlots, `step ${step}: ${name} over ceiling`);
        assert.ok(lane.reserve_in_use <= p.lanes[index].reserve, `step ${step}: ${name} reserve`);
        assert.equal(lane.reserve_in_use, expected.reserve[index], `step ${step}: ${name}`);
        assert.equal(lane.in_use, expected.reserve[index] + expected.general[index]);
      }
      assert.ok(snap.lanes.public.in_use <= p.generalPool, `step ${step}: public took a reserve`);
      assert.ok(total <= p.applicationSlots, `step ${step}: aggregate ceiling`);
      assert.ok(snap.general_in_use <= p.generalPool);
      assert.ok(snap.bytes_in_use <= p.inflightBytes);
      assert.equal(snap.outstanding, held.length);
      assert.equal(snap.admitted, snap.completed + snap.cancelled + snap.outstanding);
      assert.equal(snap.double_release, expected.doubles);
      for (const conn of conns) {
        assert.equal(conn.active, held.filter((h) => h.conn === conn).length);
      }
    }

    for (const { ticket } of held.splice(0)) assert.equal(ticket.cancel(), true);
    const end = snapshotLedger(ledger);
    assert.equal(end.release_balanced, true);
    assert.equal(end.outstanding, 0);
    assert.equal(end.bytes_in_use, 0);
    assert.ok(end.high_water_slots <= p.applicationSlots);
    assert.ok(conns.every((c) => c.active === 0));
    for (const kind of ["admitted", "lane_pool_full", "aggregate_full", "byte_budget"] as const) {
      assert.ok(seen.has(kind), `the sequence never produced ${kind}`);
    }
  });
}

Deno.test("two Ledgers over the same shared buffers enforce one set of slots", () => {
  const clock = () => 0;
  const first = LedgerMemory.create(2, true);
  const second = LedgerMemory.attach(first.buffers, 1);
  assert.ok(first.buffers.gauges instanceof SharedArrayBuffer);
  assert.throws(() => LedgerMemory.attach(first.buffers, 2), RangeError);
  const a = new Ledger(profile(), { clock, memory: first });
  const b = new Ledger(profile(), { clock, memory: second });
  const admit = (ledger: Ledger, lane: LaneName) => ledger.admit(lane);
  const kind = (r: Reservation | Overload) => r instanceof Reservation ? "admitted" : r.overload;

  // general bytes 3000 allow three public requests, whichever worker admits them
  const pub = [admit(a, "public"), admit(b, "public"), admit(a, "public")];
  assert.deepEqual(pub.map(kind), ["admitted", "admitted", "admitted"]);
  assert.equal(kind(admit(b, "public")), "byte_budget");
  assert.equal(kind(admit(a, "public")), "byte_budget");
  // local_health: one reserve of two slots, whichever worker takes them
  const reserved = [admit(b, "local_health"), admit(a, "local_health")];
  assert.deepEqual(reserved.map((r) => (r as Reservation).fromReserve), [true, true]);
  assert.equal(kind(admit(a, "local_health")), "byte_budget");
  // a release through one worker frees bytes and a slot for the other
  assert.equal((pub[1] as Reservation).complete(), true); // admitted and released through b
  const borrowed = admit(b, "local_health") as Reservation;
  assert.equal(borrowed.fromReserve, false);
  // one token bucket: burst 2 across both workers
  assert.equal(kind(admit(a, "provider_health")), "admitted"); // reserve
  assert.equal(kind(admit(b, "provider_health")), "admitted"); // general slot 4 of 4
  assert.equal(kind(admit(b, "provider_health")), "rate_budget");
  assert.equal(kind(admit(a, "public")), "aggregate_full");
  assert.equal(a.inUse("local_health"), 3);
  assert.equal(b.inUse("local_health"), 3);

  const snap = snapshotLedger(a);
  assert.deepEqual(snapshotLedger(b), snap, "both workers read the same summed stripes");
  assert.equal(snap.admitted, 8);
  assert.equal(snap.completed, 1);
  assert.equal(snap.outstanding, 7);
  assert.equal(snap.general_in_use, 4);
  assert.equal(snap.lanes.public.admitted, 3);
  assert.equal(snap.lanes.public.overload.byte_budget, 2);
  assert.equal(snap.lanes.public.overload.aggregate_full, 1);
  assert.equal(snap.lanes.local_health.overload.byte_budget, 1);
  assert.equal(snap.lanes.provider_health.overload.rate_budget, 1);
  assert.equal(first.counters[first.stripe + COUNTER_INDEX.admitted(0)], 2);
  assert.equal(second.counters[second.stripe + COUNTER_INDEX.admitted(0)], 1);
  assert.equal(first.total(COUNTER_INDEX.admitted(0)), 3);

  borrowed.cancel(); // through b
  const local = admit(a, "local_health") as Reservation; // a borrows the freed general slot
  assert.equal(local.fromReserve, false);
  const after = snapshotLedger(a);
  assert.equal(after.cancelled, 1);
  assert.equal(after.admitted, 9);
  assert.equal(after.admitted, after.completed + after.cancelled + after.outstanding);
  assert.equal(after.lanes.local_health.in_use, 3);
  assert.equal(after.release_balanced, false);
});

Deno.test("a stopped worker's slots, bytes and connections are reclaimed, and its requests count as cancelled", () => {
  const clock = () => 0;
  const shared = LedgerMemory.create(2, true);
  const owner = new Ledger(profile(), { clock, memory: shared });
  const worker = new Ledger(profile(), { clock, memory: LedgerMemory.attach(shared.buffers, 1) });
  const kept = owner.admit("public") as Reservation;
  const lost = [worker.admit("public"), worker.admit("local_health"), worker.admit("public")];
  assert.ok(lost.every((r) => r instanceof Reservation));
  assert.equal((lost[2] as Reservation).complete(), true, "a release before the stop is not lost");
  assert.equal(worker.openConnection("public"), true);
  assert.equal(worker.openConnection("public"), true);
  worker.closeConnection("public");

  assert.deepEqual(owner.reclaim(1), { requests: 2, connections: 1 });
  const snap = snapshotLedger(owner);
  assert.equal(snap.outstanding, 1, "only the owner's own request is still held");
  assert.equal(snap.lanes.public.in_use, 1);
  assert.equal(snap.lanes.local_health.in_use, 0);
  assert.equal(snap.lanes.public.connections, 0);
  assert.equal(snap.cancelled, 2);
  assert.equal(kept.complete(), true);
  const end = snapshotLedger(owner);
  assert.equal(end.release_balanced, true);
  assert.equal(end.bytes_in_use, 0);
  assert.deepEqual(owner.reclaim(1), { requests: 0, connections: 0 }, "nothing twice");
});
