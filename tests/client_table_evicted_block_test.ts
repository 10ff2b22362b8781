/**
 * Rule 8 of issue 33, for the shared client table (src/policy/client_table.ts): a client that takes
 * over the slot of an evicted client starts fresh — it does not inherit the evicted client's TTL
 * block (nor its denial run or arrival time). Otherwise any client could be locked out by arriving
 * when the table is full of blocked neighbours, and a blocked attacker could hand its block to
 * whoever comes next. The table's own contract, in process with explicit clocks, through the table
 * and through the TTL blocklist that reads it; and the other side: the block holds while its
 * owner keeps the slot.
 *
 * @module
 */
import assert from "node:assert/strict";
import { ClientTable, keyOf } from "../src/policy/client_table.ts";
import { TtlBlocklist } from "../src/policy/ttl_block.ts";

const RATE = { intervalMs: 1000, toleranceMs: 1000 };
const HOUR_MS = 3_600_000;

Deno.test(
  "rule 8: a client that takes over an evicted slot does not inherit the evicted client's TTL block",
  () => {
    // One slot: every new key evicts the one before it.
    const buffer = ClientTable.allocate(1);
    const table = new ClientTable(buffer);
    const blocked = keyOf("salt|203.0.113.66");
    const next = keyOf("salt|198.51.100.7");
    table.block(blocked, 10 + HOUR_MS, 10);
    // The other side: while it owns the slot, the block holds (and a second view sees it).
    assert.equal(table.blockedUntil(blocked, 20), 10 + HOUR_MS);
    assert.equal(new ClientTable(buffer).blockedUntil(blocked, 20), 10 + HOUR_MS);
    // Its denial run and arrival time too, so the take-over must reset all three.
    for (let n = 0; n < 3; n++) table.take(blocked, 30, RATE);
    assert.equal(table.take(blocked, 30, RATE).denialsInARow, 3);

    // A new client arrives: it is not blocked before it has a slot, and takes the only one.
    assert.equal(table.blockedUntil(next, 40), undefined);
    const first = table.take(next, 40, RATE);
    assert.equal(first.allowed, true, "a fresh bucket, not the evicted client's arrival time");
    assert.equal(first.denialsInARow, 0);
    assert.equal(table.stats().evictions, 1, "the slot changed hands");
    assert.equal(table.blockedUntil(next, 50), undefined, "the block stayed with the evicted key");
    const second = table.take(next, 60, RATE);
    assert.equal(second.allowed, false, "its own bucket is spent");
    assert.equal(second.denialsInARow, 1, "its own run, not the evicted client's 3 + 1");
    // The evicted client was forgotten (blocks are bounded by the table), not moved.
    assert.equal(table.blockedUntil(blocked, 70), undefined);
  },
);

Deno.test(
  "rule 8: a full probe window evicts the least recently seen client; the newcomer is not blocked through the TTL list",
  () => {
    const table = new ClientTable(ClientTable.allocate(8));
    const list = new TtlBlocklist({ table, ttlMs: HOUR_MS, key: (client) => keyOf(`t|${client}`) });
    // Eight clients fill the table (capacity 8 = one probe window); the first is blocked and then
    // seen least recently, so it is the one the ninth evicts.
    list.block("10.1.0.1", 1);
    // Asked at the time it was blocked: a lookup counts as a sighting (a blocked client that keeps
    // coming stays), so a later one would make it the most recently seen.
    assert.equal(list.blocked("10.1.0.1", 1), true, "blocked while it holds its slot");
    for (let i = 2; i <= 8; i++) table.take(keyOf(`t|10.1.0.${i}`), i, RATE);
    assert.equal(table.stats().used, 8);

    table.take(keyOf("t|10.2.0.9"), 10, RATE);
    assert.equal(table.stats().evictions, 1);
    assert.equal(list.blocked("10.2.0.9", 11), false, "the newcomer in the blocked client's slot");
    assert.equal(list.blocked("10.1.0.1", 11), false, "the evicted client was forgotten");
    for (let i = 2; i <= 8; i++) {
      assert.equal(list.blocked(`10.1.0.${i}`, 11), false, `10.1.0.${i} was never blocked`);
    }
    // Blocking the newcomer now works as for anyone, and only for it.
    list.block("10.2.0.9", 12);
    assert.equal(list.blocked("10.2.0.9", 13), true);
    assert.equal(list.blocked("10.1.0.2", 13), false);
  },
);
