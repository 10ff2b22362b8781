/**
 * IdleWatch sweeps node agents' socket lists: a streaming response that reads nothing for the body
 * limit is destroyed, and a pooled keep-alive socket unused for the socket limit is closed.
 */
import assert from "node:assert/strict";
import type http from "node:http";
import { IdleWatch } from "../src/egress/idle_watch.ts";

class FakeSocket {
  bytesRead = 0;
  destroyed = false;
  _httpMessage: { res: FakeResponse | null } | null = null;
  destroy() {
    this.destroyed = true;
  }
}

class FakeResponse {
  complete = false;
  destroyed = false;
  reason?: Error;
  destroy(error: Error) {
    this.destroyed = true;
    this.reason = error;
  }
}

function fakeAgent(inUse: FakeSocket[], free: FakeSocket[]): http.Agent {
  return { sockets: { "a:80:": inUse }, freeSockets: { "a:80:": free } } as unknown as http.Agent;
}

Deno.test("IdleWatch.sweep() destroys a response body that reads nothing for the body limit", () => {
  let now = 0;
  const busy = new FakeSocket();
  const quiet = new FakeSocket();
  const done = new FakeSocket();
  for (const socket of [busy, quiet, done]) socket._httpMessage = { res: new FakeResponse() };
  done._httpMessage!.res!.complete = true;
  const watch = new IdleWatch([fakeAgent([busy, quiet, done], [])], {
    bodyIdleMs: 100,
    socketIdleMs: 1000,
  }, () => now);
  // Interval 50 ms: two quiet sweeps after the first sighting make 100 ms of silence.
  for (let sweep = 0; sweep < 3; sweep++) {
    now += 50;
    busy.bytesRead += 10;
    watch.sweep();
  }
  assert.equal(quiet._httpMessage!.res!.destroyed, true);
  assert.match(quiet._httpMessage!.res!.reason!.message, /Upstream body idle/);
  assert.equal(busy._httpMessage!.res!.destroyed, false, "a flowing body is left alone");
  assert.equal(done._httpMessage!.res!.destroyed, false, "a complete response is left alone");
});

Deno.test("IdleWatch.sweep() closes a pooled socket unused for the socket limit, not sooner", () => {
  let now = 0;
  const pooled = new FakeSocket();
  const watch = new IdleWatch([fakeAgent([], [pooled])], {
    bodyIdleMs: 60_000,
    socketIdleMs: 200,
  }, () => now);
  watch.sweep(); // first seen free at 0
  now = 150;
  watch.sweep();
  assert.equal(pooled.destroyed, false);
  now = 200;
  watch.sweep();
  assert.equal(pooled.destroyed, true);
});

Deno.test("IdleWatch.sweep() restarts a socket's idle time when it is used again", () => {
  let now = 0;
  const socket = new FakeSocket();
  const inUse: FakeSocket[] = [];
  const free: FakeSocket[] = [socket];
  const watch = new IdleWatch([fakeAgent(inUse, free)], {
    bodyIdleMs: 60_000,
    socketIdleMs: 200,
  }, () => now);
  watch.sweep();
  now = 150;
  free.pop();
  inUse.push(socket); // taken for a request
  watch.sweep();
  inUse.pop();
  free.push(socket); // back in the pool at 300
  now = 300;
  watch.sweep();
  now = 450;
  watch.sweep();
  assert.equal(socket.destroyed, false, "only 150 ms idle since it came back");
  now = 500;
  watch.sweep();
  assert.equal(socket.destroyed, true);
});

Deno.test("IdleWatch.honour() closes a pooled socket before the upstream's announced keep-alive time", () => {
  let now = 0;
  const hinted = new FakeSocket();
  const short = new FakeSocket();
  const plain = new FakeSocket();
  const watch = new IdleWatch([fakeAgent([], [hinted, short, plain])], {
    bodyIdleMs: 60_000,
    socketIdleMs: 30_000,
  }, () => now);
  watch.honour(hinted, "timeout=5, max=1000");
  watch.honour(short, "timeout=2");
  watch.honour(plain, "max=100");
  watch.honour(plain, "timeout=120"); // longer than socketIdleMs: the gateway's own limit holds
  watch.sweep(); // first seen idle at 0
  assert.deepEqual([hinted.destroyed, short.destroyed, plain.destroyed], [false, true, false]);
  now = 2999;
  watch.sweep();
  assert.equal(hinted.destroyed, false);
  now = 3000; // 5 s announced: closed 3 s after first seen, so within 5 s of going idle
  watch.sweep();
  assert.equal(hinted.destroyed, true);
  now = 29_999;
  watch.sweep();
  assert.equal(plain.destroyed, false);
  now = 30_000;
  watch.sweep();
  assert.equal(plain.destroyed, true);
});
