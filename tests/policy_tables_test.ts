/**
 * Unit tests for the edge's policy tables: a worker that adopts worker 0's tables spends from the
 * same buckets, a tenant keeps its table while its size stays, unused tables are dropped, and the
 * keys are salted per edge (two edges, or an outsider, cannot predict each other's keys).
 *
 * @module
 */
import assert from "node:assert/strict";
import { keyOf } from "../src/policy/client_table.ts";
import { PolicyTables } from "../src/policy/policy_tables.ts";

const RATE = { intervalMs: 1000, toleranceMs: 1000 };

Deno.test("PolicyTables: a worker that adopts worker 0's tables shares its buckets and keys", () => {
  const owner = new PolicyTables();
  const worker = new PolicyTables();
  const mine = owner.table("rate", "a.example", 64).table;
  worker.adopt(owner.share());
  const theirs = worker.table("rate", "a.example", 64).table;
  assert.equal(worker.key("203.0.113.7"), owner.key("203.0.113.7"), "one salt");
  assert.equal(mine.take(owner.key("203.0.113.7"), 0, RATE).allowed, true);
  assert.equal(theirs.take(worker.key("203.0.113.7"), 0, RATE).allowed, false, "one bucket");
});

Deno.test("PolicyTables: a table stays while tenant and size stay; another size is a new table", () => {
  const tables = new PolicyTables();
  const first = tables.table("rate", "a.example", 64);
  first.table.take(tables.key("x"), 0, RATE);
  assert.equal(
    tables.table("rate", "a.example", 64).table.take(tables.key("x"), 0, RATE).allowed,
    false,
  );
  assert.equal(
    tables.table("rate", "a.example", 128).table.take(tables.key("x"), 0, RATE).allowed,
    true,
  );
  assert.equal(
    tables.table("rate", "b.example", 64).table.take(tables.key("x"), 0, RATE).allowed,
    true,
  );
  assert.equal(
    tables.table("ttl", "a.example", 64).table.blockedUntil(tables.key("x"), 0),
    undefined,
  );
  assert.equal(tables.size, 4);
  tables.retain(new Set([first.name]));
  assert.equal(tables.size, 1);
  assert.deepEqual(tables.share().tables.map(([name]) => name), ["rate:a.example:64"]);
});

Deno.test("PolicyTables: keys are salted per edge, never the client's plain hash", () => {
  const a = new PolicyTables(), b = new PolicyTables();
  const clients = ["203.0.113.7", "2001:db8::1", "10.0.0.1"];
  for (const client of clients) {
    assert.notEqual(a.key(client), b.key(client), `two edges key ${client} apart`);
    assert.notEqual(a.key(client), keyOf(client));
  }
  assert.equal(new Set(clients.map((c) => a.key(c))).size, 3);
});
