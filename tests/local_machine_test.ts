/**
 * What this machine calls itself (src/egress/local_machine.ts): the hosts file as resolvers read
 * it, the host name with and without `--allow-sys=hostname`, and the view the egress reads again
 * before a dial once it is a second old.
 *
 * @module
 */
import assert from "node:assert/strict";
import {
  bareMachine,
  type LocalMachine,
  MachineView,
  parseHosts,
  readLocalMachine,
} from "../src/egress/local_machine.ts";

Deno.test("parseHosts() reads names case-folded, without a final dot, every address of each", () => {
  const hosts = parseHosts(
    [
      "# a comment line",
      "127.0.0.1\tlocalhost vm.Example.  VM # trailing comment",
      "::1 ip6-localhost",
      "fe80::1%eth0 linklocal",
      "10.0.0.9 db.lan",
      "10.0.0.10 db.lan DB.LAN",
      "999.1.1.1 broken.lan",
      "0177.0.0.1 octal.lan",
      "lonely-address-line",
      "192.0.2.7",
    ].join("\n"),
  );
  assert.deepEqual(hosts.get("vm.example"), ["127.0.0.1"]);
  assert.deepEqual(hosts.get("vm"), ["127.0.0.1"]);
  assert.deepEqual(hosts.get("ip6-localhost"), ["::1"]);
  assert.deepEqual(hosts.get("linklocal"), ["fe80::1"]);
  assert.deepEqual(hosts.get("db.lan"), ["10.0.0.9", "10.0.0.10"]);
  // glibc skips a line whose address does not parse (inet_pton: no octal forms either).
  assert.equal(hosts.get("broken.lan"), undefined);
  assert.equal(hosts.get("octal.lan"), undefined);
  assert.equal(hosts.has("trailing"), false, "a comment is not a name");
  assert.equal(hosts.size, 6);
});

Deno.test("readLocalMachine() reads the files it is given, and says what it could not read", async () => {
  const dir = await Deno.makeTempDir({ prefix: "portcullis-machine-" });
  try {
    await Deno.writeTextFile(`${dir}/hosts`, "127.0.0.1 sneaky.test\n");
    await Deno.writeTextFile(`${dir}/hostname`, "Box.Example.\n");
    const machine = await readLocalMachine({ hosts: `${dir}/hosts`, hostname: `${dir}/hostname` });
    assert.deepEqual(machine.hosts.get("sneaky.test"), ["127.0.0.1"]);
    const sys = (kind: "hostname" | "networkInterfaces") =>
      Deno.permissions.querySync({ name: "sys", kind }).state === "granted";
    if (!sys("hostname")) assert.equal(machine.hostname, "box.example", "from the file");
    if (!sys("networkInterfaces")) {
      assert.equal(machine.addresses.size, 0);
      assert.ok(machine.unread.some((line) => line.startsWith("network interfaces:")));
    }
    // A missing hosts file is an empty one, not a failure.
    const none = await readLocalMachine({ hosts: `${dir}/absent`, hostname: `${dir}/hostname` });
    assert.equal(none.hosts.size, 0);
    assert.ok(!none.unread.some((line) => line.includes("absent")), none.unread.join("; "));
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

/** A view over a counted read returning `machines` in turn, on a hand-moved clock. */
function countedView(machines: LocalMachine[], options: { fail?: boolean } = {}) {
  let reads = 0;
  let now = 0;
  const view = new MachineView(() => {
    reads++;
    if (options.fail) return Promise.reject(new Error("unreadable"));
    return Promise.resolve(machines[Math.min(reads - 1, machines.length - 1)]);
  }, { clock: () => now, maxAgeMs: 1000 });
  return {
    view,
    reads: () => reads,
    advance: (ms: number) => now += ms,
  };
}

Deno.test("MachineView reads again once its reading is maxAgeMs old, one read at a time", async () => {
  const first = { ...bareMachine(), hostname: "first" };
  const second = { ...bareMachine(), hostname: "second" };
  const { view, reads, advance } = countedView([first, second]);
  assert.equal(view.latest().hostname, undefined, "nothing read yet");
  const [a, b] = await Promise.all([view.current(), view.current()]);
  assert.equal(reads(), 1, "two callers share one read");
  assert.equal(a, first);
  assert.equal(b, first);
  advance(999);
  assert.equal(await view.current(), first, "still fresh under maxAgeMs");
  assert.equal(reads(), 1);
  advance(1);
  assert.equal(await view.current(), second, "read again at maxAgeMs");
  assert.equal(reads(), 2);
  assert.equal(view.latest(), second);
});

Deno.test("MachineView keeps its last reading when a read fails", async () => {
  const { view } = countedView([], { fail: true });
  const machine = await view.current();
  assert.equal(machine.hosts.size, 0);
  assert.equal(view.latest(), machine);
});
