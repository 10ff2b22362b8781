/**
 * Kills operator-mutation survivors in src/ledger/: each test names the rule it guards. The rules
 * here are the other sides no older test checked (a release that must wake its connection, a shed
 * asked for a ticket that is already gone, the exact edge of each cap).
 *
 * @module
 */
import assert from "node:assert/strict";
import { Ledger } from "../src/ledger/ledger.ts";
import { LANE_NAMES } from "../src/ledger/lane_names.ts";
import { COUNTER_INDEX, GAUGE_INDEX, LedgerMemory } from "../src/ledger/memory.ts";
import { OVERLOAD_KINDS } from "../src/ledger/overload.ts";
import { compileRate, spendConnectionToken } from "../src/ledger/rate_budget.ts";
import { ControlBudget } from "../src/egress/ws_pacing.ts";
import { snapshotLedger } from "../src/ledger/snapshot.ts";
import { admitted, profile } from "./fixtures/ledger.ts";

Deno.test("a released reservation tells its connection once, so its next pipelined request may go", () => {
  const ledger = new Ledger(profile(), { clock: () => 0 });
  let told = 0;
  const connection = { active: 0, released: () => told++ };
  const first = admitted(ledger.admit("public", connection));
  assert.equal(told, 0, "holding a slot tells nobody");
  first.complete();
  assert.equal(told, 1, "a completed request wakes its connection");
  assert.equal(connection.active, 0);
  first.complete();
  assert.equal(told, 1, "a second release of the same ticket wakes nobody");
  admitted(ledger.admit("public", connection)).cancel();
  assert.equal(told, 2, "a cancelled request wakes its connection too");
});

Deno.test("ledger.shed() leaves a ticket that was already released or moved alone", () => {
  // Public ceiling 3, the top two kept for high-priority routes: over the reserve from 2 slots.
  const ledger = new Ledger(profile({ lanes: { public: { priority_reserve: 2 } } }), {
    clock: () => 0,
  });
  const tickets = [1, 2, 3].map(() => admitted(ledger.admit("public")));
  tickets[0].complete();
  assert.equal(ledger.inUse("public"), 2, "still inside the priority reserve");
  assert.equal(ledger.shed(tickets[0]), false, "a completed ticket is not shed");
  const moved = tickets[1].move();
  assert.equal(ledger.shed(tickets[1]), false, "a moved-away handle is not shed");
  const snap = snapshotLedger(ledger);
  assert.equal(snap.lanes.public.overload.priority_shed, 0);
  assert.equal(snap.double_release, 0, "nothing was released twice");
  assert.equal(snap.cancelled, 0);
  assert.equal(ledger.shed(moved), true, "the live handle is");
  assert.equal(snapshotLedger(ledger).lanes.public.overload.priority_shed, 1);
  tickets[2].complete();
  assert.equal(snapshotLedger(ledger).outstanding, 0);
});

Deno.test("reclaiming a stopped worker's one request returns its general-pool slot, and its replacement's holdings are reclaimed too", () => {
  const clock = () => 0;
  const shared = LedgerMemory.create(2, true);
  const owner = new Ledger(profile(), { clock, memory: shared });
  const worker = () =>
    new Ledger(profile(), { clock, memory: LedgerMemory.attach(shared.buffers, 1) });
  admitted(worker().admit("public"));
  assert.deepEqual(owner.reclaim(1), { requests: 1, connections: 0 });
  let snap = snapshotLedger(owner);
  assert.equal(snap.general_in_use, 0, "the general pool has its slot back");
  assert.equal(snap.bytes_in_use, 0);
  assert.equal(snap.outstanding, 0);
  assert.equal(snap.cancelled, 1, "the lost request counts as cancelled");
  assert.equal(snap.release_balanced, true);
  // The whole general pool (3) admits again.
  const pool = [1, 2, 3].map(() => admitted(owner.admit("public")));
  pool.forEach((ticket) => ticket.complete());

  // The replacement worker writes to the same stripe, from zero.
  const replacement = worker();
  admitted(replacement.admit("public"));
  assert.equal(replacement.openConnection("public"), true);
  assert.deepEqual(owner.reclaim(1), { requests: 1, connections: 1 });
  snap = snapshotLedger(owner);
  assert.equal(snap.lanes.public.in_use, 0);
  assert.equal(snap.lanes.public.connections, 0);
  assert.equal(snap.general_in_use, 0);
  assert.equal(snap.outstanding, 0);
  assert.equal(snap.release_balanced, true);
});

Deno.test("a release that lands after its stopped worker was reclaimed never makes a reclaim count negative", () => {
  // Worker.terminate() does not wait: a release may still reach the stripe after the reclaim. The
  // next reclaim of that stripe (the log line an operator reads) must not say -1.
  const clock = () => 0;
  const shared = LedgerMemory.create(2, true);
  const owner = new Ledger(profile(), { clock, memory: shared });
  const worker = new Ledger(profile(), { clock, memory: LedgerMemory.attach(shared.buffers, 1) });
  const late = [admitted(worker.admit("local_health")), admitted(worker.admit("public"))];
  assert.deepEqual(late.map((ticket) => ticket.fromReserve), [true, false]);
  assert.equal(worker.openConnection("public"), true);
  assert.deepEqual(owner.reclaim(1), { requests: 2, connections: 1 });
  late.forEach((ticket) => ticket.complete());
  worker.closeConnection("public");
  assert.deepEqual(owner.reclaim(1), { requests: 0, connections: 0 });
  assert.equal(snapshotLedger(owner).cancelled, 2, "the reclaimed requests stay cancelled");
});

/** Every cell a name gives, as `name → index`, for the lanes, kinds and log streams there are. */
function cells(
  layout: Record<string, unknown>,
  args: readonly (readonly number[])[],
): Map<string, number> {
  const found = new Map<string, number>();
  for (const [name, at] of Object.entries(layout)) {
    if (name === "size") continue;
    if (typeof at === "number") found.set(name, at);
    else {
      for (const arg of args) {
        found.set(`${name}(${arg.join(",")})`, (at as (...a: number[]) => number)(...arg));
      }
    }
  }
  return found;
}

/** Fails naming the two entries that share a cell, or the one outside `0..size-1`. */
function assertOwnCells(found: Map<string, number>, size: number): void {
  const owner = new Map<number, string>();
  for (const [name, at] of found) {
    assert.ok(
      Number.isInteger(at) && at >= 0 && at < size,
      `${name} is at ${at}, outside 0..${size - 1}`,
    );
    assert.equal(owner.get(at), undefined, `${name} shares cell ${at} with ${owner.get(at)}`);
    owner.set(at, name);
  }
}

Deno.test("every ledger gauge and counter has a cell of its own inside its worker's stripe", () => {
  // The layout is what the isolates sharing one ledger agree on: two entries in one cell make one
  // metric (or one admission gauge) read another's number, and a cell past the stripe's end is the
  // next worker's first counter.
  const lanes = LANE_NAMES.map((_, lane) => [lane]);
  assertOwnCells(cells(GAUGE_INDEX, lanes), GAUGE_INDEX.size);
  const perLane = cells(COUNTER_INDEX, [...lanes, [0], [1]]);
  for (const [lane] of lanes) {
    OVERLOAD_KINDS.forEach((kind) =>
      perLane.set(`overload(${lane},${kind})`, COUNTER_INDEX.overload(lane, kind))
    );
  }
  // overload(lane) without a kind is not a cell; logX(stream) exists for streams 0 and 1 only.
  for (const name of [...perLane.keys()]) {
    if (/^overload\(\d+\)$/.test(name)) perLane.delete(name);
    if (/^log\w+\([2-9]\)$/.test(name)) perLane.delete(name);
  }
  assertOwnCells(perLane, COUNTER_INDEX.size);
});

Deno.test("LedgerMemory.attach() refuses a stripe outside the workers it was made for, naming the range", () => {
  const { buffers } = LedgerMemory.create(2, true);
  for (const stripe of [-1, 2, 0.5, NaN]) {
    assert.throws(() => LedgerMemory.attach(buffers, stripe), (error: Error) => {
      assert.ok(error instanceof RangeError);
      assert.equal(error.message, `Counter stripe ${stripe} is outside 0..1`);
      return true;
    });
  }
  assert.equal(LedgerMemory.attach(buffers, 1).stripe, COUNTER_INDEX.size);
});

Deno.test("LedgerMemory.perStripe() reads each worker's own count, one entry per worker", () => {
  const shared = LedgerMemory.create(3, true);
  const workers = [0, 1, 2].map((stripe) =>
    new Ledger(profile(), { clock: () => 0, memory: LedgerMemory.attach(shared.buffers, stripe) })
  );
  [1, 2, 0].forEach((count, stripe) => {
    for (let i = 0; i < count; i++) admitted(workers[stripe].admit("provider_health")).complete();
  });
  assert.deepEqual(shared.perStripe(COUNTER_INDEX.admitted(2)), [1, 2, 0]);
  assert.equal(shared.total(COUNTER_INDEX.admitted(2)), 3);
  // A ledger of one isolate has one stripe: the workers view lists that isolate alone.
  const single = new Ledger(profile(), { clock: () => 0 });
  admitted(single.admit("public")).complete();
  assert.deepEqual(single.memory.perStripe(COUNTER_INDEX.admitted(0)), [1]);
});

Deno.test("a high-water raise that loses its race to another worker's lower raise tries again", () => {
  // Worker B's admission made 4 slots in use but has not raised the mark yet; worker A's makes 5.
  // B's raise to 4 lands between A's read of the mark and A's compare-exchange: A must retry, so
  // the mark ends at 5, not at B's 4.
  const shared = LedgerMemory.create(2, true);
  const a = new Ledger(profile({ application_slots: 10 }), { clock: () => 0, memory: shared });
  const held = [1, 2, 3].map(() => admitted(a.admit("public")));
  assert.equal(snapshotLedger(a).high_water_slots, 3);
  Atomics.add(shared.gauges, GAUGE_INDEX.inUse, 1); // B's slot, counted before B raises the mark
  const compareExchange = Atomics.compareExchange;
  let raced = false;
  Atomics.compareExchange =
    ((array: Int32Array, index: number, expected: number, value: number) => {
      if (!raced && array === shared.gauges && index === GAUGE_INDEX.highWater) {
        raced = true;
        Atomics.store(array, index, 4); // B's raise wins
      }
      return compareExchange(array, index, expected, value);
    }) as typeof Atomics.compareExchange;
  try {
    held.push(admitted(a.admit("public")));
  } finally {
    Atomics.compareExchange = compareExchange;
  }
  assert.ok(raced, "the race happened");
  assert.equal(snapshotLedger(a).high_water_slots, 5);
  Atomics.sub(shared.gauges, GAUGE_INDEX.inUse, 1);
  held.forEach((ticket) => ticket.complete());
});

Deno.test("a connection's rate refills on the clock's milliseconds: one per second is due exactly 1 s after the last", () => {
  let now = 5000;
  const ledger = new Ledger(
    profile({ per_connection: 8, connection_rate: { per_second: 1, burst: 1 } }),
    { clock: () => now },
  );
  const conn = { active: 0 };
  admitted(ledger.admit("public", conn)).complete();
  now = 5999;
  assert.deepEqual(ledger.admit("public", conn), { overload: "connection_rate", retryAfterMs: 1 });
  now = 5999.8;
  const soon = ledger.admit("public", conn);
  assert.ok("overload" in soon && Math.abs(soon.retryAfterMs! - 0.2) < 1e-9, JSON.stringify(soon));
  now = 6000;
  admitted(ledger.admit("public", conn)).complete();
});

Deno.test("a spent connection token answers exactly 0, which WebSocket control pacing counts on", () => {
  const bucket: { rateTat?: number } = {};
  const rate = compileRate({ per_second: 1, burst: 2 });
  assert.equal(spendConnectionToken(bucket, rate, 0), 0);
  assert.equal(spendConnectionToken(bucket, rate, 0), 0);
  assert.equal(spendConnectionToken(bucket, rate, 0), 1000);
  let now = 0;
  const pings = new ControlBudget({ per_second: 1, burst: 2 }, () => now);
  assert.deepEqual([pings.spend(), pings.spend(), pings.spend()], [true, true, false]);
  now = 1000;
  assert.equal(pings.spend(), true);
});
