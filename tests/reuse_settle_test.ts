/**
 * The settle rule of pooled upstream connections (src/egress/reuse_settle.ts), both sides of each
 * condition: the client connection a pooled connection served may take it back at once; any other
 * only once it settled for the configured time; a settle time of 0 lets anyone take it at once.
 * What a client observes of it (no surplus bytes reach another client) is in
 * tests/adversarial/upstream_surplus_test.ts.
 *
 * @module
 */
import assert from "node:assert/strict";
import { mayTake, SETTLE_MS } from "../src/egress/reuse_settle.ts";

const A = {};
const B = {};

Deno.test("reuse settle: its own client at once, another client only after the settle time", () => {
  const conn = { releasedAt: 1000, owner: A };
  assert.equal(mayTake(conn, A, 1000), true, "the same client connection, at once");
  assert.equal(mayTake(conn, B, 1000), false, "another client, at once");
  assert.equal(mayTake(conn, B, 1000 + SETTLE_MS - 0.5), false, "another client, just under");
  assert.equal(mayTake(conn, B, 1000 + SETTLE_MS), true, "another client, at the settle time");
  assert.equal(mayTake(conn, undefined, 1000), false, "a request of no client connection");
  assert.equal(mayTake({ releasedAt: 1000 }, undefined, 1000), false, "no owner is nobody's");
});

Deno.test("reuse settle: the configured time replaces the default, and 0 turns the rule off", () => {
  const conn = { releasedAt: 1000, owner: A };
  assert.equal(mayTake(conn, B, 1000, 0), true);
  assert.equal(mayTake(conn, B, 1049, 50), false);
  assert.equal(mayTake(conn, B, 1050, 50), true);
});
