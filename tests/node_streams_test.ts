/**
 * The transports' streams end with their node (src/hub/node_streams.ts; issue 31, finding 5):
 * admission asks `admits`, each revocation look asks again, a stream has a lifetime, and a check
 * that fails to answer is a refusal.
 */
import assert from "node:assert/strict";
import { NodeStreams, type StreamEnd } from "../src/hub/node_streams.ts";

Deno.test("NodeStreams.recheck() ends only the streams whose node is no longer admitted, asking once per node and serial", async () => {
  const revoked = new Set<string>();
  const asked: string[] = [];
  const streams = new NodeStreams({
    admits: (node, serial) => {
      asked.push(`${node}/${serial}`);
      return Promise.resolve(!revoked.has(node));
    },
  });
  const ends: string[] = [];
  const open = (node: string, serial: string, name: string) =>
    streams.open({ node, serial }, (why) => ends.push(`${name}:${why}`));
  assert.ok(await open("edge-1", "0a", "first"));
  assert.ok(await open("edge-1", "0a", "second"));
  assert.ok(await open("edge-2", "0b", "other"));
  asked.length = 0;
  assert.equal(await streams.recheck(), 0);
  assert.deepEqual(asked.sort(), ["edge-1/0a", "edge-2/0b"], "once per node and serial");
  revoked.add("edge-1");
  assert.equal(await streams.recheck(), 2);
  assert.deepEqual(ends.sort(), ["first:revoked", "second:revoked"]);
  assert.deepEqual(streams.counts(), { open: 1, ended: { revoked: 2, lifetime: 0 } });
  assert.equal(await streams.recheck(), 0, "an ended stream is not ended twice");
  assert.equal(await open("edge-1", "0a", "late"), undefined, "and none is admitted again");
});

Deno.test("NodeStreams.open() asks again when a revocation look started while it was admitting", async () => {
  let admitted = true;
  const gate = Promise.withResolvers<void>();
  let first = true;
  const streams = new NodeStreams({
    admits: async () => {
      const answer = admitted;
      if (first) {
        first = false;
        await gate.promise; // the look starts meanwhile, and revokes the node
      }
      return answer;
    },
  });
  const opening = streams.open({ node: "edge-1", serial: "0a" }, () => {});
  admitted = false;
  const look = streams.recheck();
  gate.resolve();
  assert.equal(await opening, undefined, "an answer from before the look is not trusted");
  await look;
  assert.equal(streams.counts().open, 0);
});

Deno.test("NodeStreams ends a stream at maxLifetimeMs, and not one released before", async () => {
  const streams = new NodeStreams({ maxLifetimeMs: 40 });
  const ends: StreamEnd[] = [];
  const release = await streams.open({ node: "edge-1", serial: "0a" }, (why) => ends.push(why));
  const early = await streams.open({ node: "edge-1", serial: "0a" }, () => ends.push("revoked"));
  early!();
  assert.ok(release);
  await new Promise((resolve) => setTimeout(resolve, 20));
  assert.deepEqual(ends, []);
  await new Promise((resolve) => setTimeout(resolve, 60));
  assert.deepEqual(ends, ["lifetime"]);
  assert.deepEqual(streams.counts(), { open: 0, ended: { revoked: 0, lifetime: 1 } });
});

Deno.test("NodeStreams takes an admission check that fails as a refusal", async () => {
  let fail = false;
  const streams = new NodeStreams({
    admits: () => fail ? Promise.reject(new Error("issued/ unreadable")) : Promise.resolve(true),
  });
  const ends: StreamEnd[] = [];
  assert.ok(await streams.open({ node: "edge-1", serial: "0a" }, (why) => ends.push(why)));
  fail = true;
  assert.equal(await streams.recheck(), 1);
  assert.deepEqual(ends, ["revoked"]);
  assert.equal(await streams.open({ node: "edge-1", serial: "0a" }, () => {}), undefined);
});
