/**
 * Verdicts on destinations against the machine as it is now (src/egress/reach_verdicts.ts):
 * a pooled connection is judged again before reuse, with the machine read again once its reading
 * is stale; verdicts are cached per reading; a reading that changes is told to listeners, one that
 * says the same keeps its object (src/egress/local_machine.ts). The end-to-end attack is in
 * tests/adversarial/own_listener_reuse_test.ts.
 *
 * @module
 */
import assert from "node:assert/strict";
import { DestinationVerdicts } from "../src/egress/reach_verdicts.ts";
import {
  bareMachine,
  type LocalMachine,
  MachineView,
  sameMachine,
} from "../src/egress/local_machine.ts";
import { refuseOwnDestination } from "../src/egress/own_listener.ts";

const OWN = [{ hostname: "127.0.0.1", port: 9901, name: "lanes.local_health.listen[0]" }];

function machineWith(hosts: Record<string, string[]>): LocalMachine {
  return { ...bareMachine(), hosts: new Map(Object.entries(hosts)) };
}

/** A view over `readings` (the last repeats), a clock to move, and how often it read. */
function scripted(readings: LocalMachine[]) {
  let now = 0;
  let reads = 0;
  const view = new MachineView(() => {
    reads++;
    return Promise.resolve(readings[Math.min(reads - 1, readings.length - 1)]);
  }, { clock: () => now, maxAgeMs: 1000 });
  let judged = 0;
  const verdicts = new DestinationVerdicts(view, (host, port, machine) => {
    judged++;
    return refuseOwnDestination(host, port, OWN, machine);
  });
  return {
    view,
    verdicts,
    advance: (ms: number) => now += ms,
    reads: () => reads,
    judged: () => judged,
  };
}

Deno.test("DestinationVerdicts judges a reuse again once the machine's reading is stale", async () => {
  const before = machineWith({});
  const after = machineWith({ "late.test": ["127.0.0.1"] });
  const { verdicts, advance, reads } = scripted([before, after]);
  assert.equal(await verdicts.refuse("late.test", 9901), undefined, "unknown name: allowed");
  advance(999);
  assert.equal(verdicts.refuseReuse("late.test", 9901), undefined, "fresh: judged at once");
  assert.equal(reads(), 1);
  advance(1);
  const stale = verdicts.refuseReuse("late.test", 9901);
  assert.ok(stale instanceof Promise, "stale: judged after the machine is read again");
  assert.match(String(await stale), /reaches this gateway's own listener/);
  assert.equal(reads(), 2);
  assert.match(String(verdicts.refuseNow("late.test", 9901)), /own listener/);
});

Deno.test("DestinationVerdicts caches a verdict per reading, and judges anew on a new one", async () => {
  const first = machineWith({});
  const same = machineWith({});
  const changed = machineWith({ "late.test": ["127.0.0.1"] });
  const { verdicts, advance, judged } = scripted([first, same, changed]);
  await verdicts.refuse("late.test", 9901);
  verdicts.refuseReuse("late.test", 9901);
  verdicts.refuseNow("late.test", 9901);
  assert.equal(judged(), 1, "one reading, one verdict");
  advance(1000);
  assert.equal(await verdicts.refuse("late.test", 9901), undefined);
  assert.equal(judged(), 1, "a reading that says the same keeps the verdicts");
  advance(1000);
  assert.match(String(await verdicts.refuse("late.test", 9901)), /own listener/);
  assert.equal(judged(), 2);
});

Deno.test("MachineView tells listeners of a changed reading only, and keeps an unchanged one's object", async () => {
  const first = machineWith({ "a.test": ["10.0.0.1"] });
  const same = machineWith({ "a.test": ["10.0.0.1"] });
  const changed = machineWith({ "a.test": ["10.0.0.1", "127.0.0.1"] });
  const { view, advance } = scripted([first, same, changed]);
  const told: LocalMachine[] = [];
  const stop = view.onChange((machine) => told.push(machine));
  assert.equal(await view.current(), first);
  assert.deepEqual(told, [first], "the first reading differs from none");
  advance(1000);
  assert.equal(await view.current(), first, "the same reading keeps the last object");
  assert.equal(told.length, 1);
  advance(1000);
  assert.equal(await view.current(), changed);
  assert.deepEqual(told, [first, changed]);
  stop();
  advance(1000);
  await view.current();
  assert.equal(told.length, 2, "stopped");
});

Deno.test("sameMachine() compares names, their addresses in order, interfaces and host name", () => {
  const a = { ...machineWith({ "x.test": ["10.0.0.1", "10.0.0.2"] }), hostname: "vm" };
  assert.equal(sameMachine(a, { ...a }), true);
  assert.equal(sameMachine(a, { ...a, hostname: "other" }), false);
  assert.equal(
    sameMachine(a, { ...a, hosts: new Map([["x.test", ["10.0.0.2", "10.0.0.1"]]]) }),
    false,
  );
  assert.equal(
    sameMachine(a, { ...a, hosts: new Map([["y.test", ["10.0.0.1", "10.0.0.2"]]]) }),
    false,
  );
  assert.equal(sameMachine(a, { ...a, addresses: new Set(["192.0.2.1"]) }), false);
  assert.equal(sameMachine(a, { ...a, unread: ["/etc/hosts: NotCapable"] }), false);
});
