/**
 * The own-listener lock (src/egress/own_listener.ts) at the unit level, beside the egress that
 * applies it at connect time: names this machine resolves by itself reach its listeners like
 * their addresses do, and `egress.allow_private` never opens a way back in — not before the dial,
 * not on a SOCKS instance's loopback BND.ADDR, not on a direct socket's peer.
 *
 * @module
 */
import assert from "node:assert/strict";
import { EgressRefusal } from "../src/egress/agents.ts";
import { DirectAgent } from "../src/egress/direct_agent.ts";
import {
  internalDestination,
  OWN_ADDRESS,
  PrivateAllowance,
  refuseInternal,
} from "../src/egress/destinations.ts";
import { Egress, type EgressSettings } from "../src/egress/egress.ts";
import { type LocalMachine, MachineView } from "../src/egress/local_machine.ts";
import {
  ownListener,
  refuseLoopbackTunnel,
  refuseOwnDestination,
  refusePeer,
} from "../src/egress/own_listener.ts";
import { freePorts } from "./fixtures/gateway.ts";

const LOCAL = "lanes.local_health.listen[0]";
const WILD = "lanes.provider_health.listen[0]";
const OWN = [
  { hostname: "127.0.0.1", port: 9901, name: LOCAL },
  { hostname: "0.0.0.0", port: 9902, name: WILD },
];
const LOOPBACK_ALLOWED = new PrivateAllowance(["127.0.0.0/8", "::1"]);

/** A machine called `vm`, whose hosts file maps three names, with one public interface address. */
const MACHINE: LocalMachine = {
  hostname: "vm",
  hosts: new Map([
    ["sneaky.test", ["127.0.0.1"]],
    ["lan.test", ["10.0.0.9"]],
    ["public.test", ["203.0.113.5"]],
    ["six.test", ["::1"]],
  ]),
  addresses: new Set(["127.0.0.1", "::1", "203.0.113.5"]),
  unread: [],
};

Deno.test("ownListener() reaches a listener through every name this machine resolves to it", () => {
  for (const host of ["sneaky.test", "SNEAKY.Test.", "six.test", "vm", "VM.", "x.localhost"]) {
    assert.equal(ownListener(host, 9901, OWN, MACHINE)?.name, LOCAL, host);
    assert.equal(ownListener(host, 9902, OWN, MACHINE)?.name, WILD, host);
    assert.equal(ownListener(host, 9903, OWN, MACHINE), undefined, `${host}: another port`);
  }
  // Without the machine's view, only the names every resolver knows are this machine.
  assert.equal(ownListener("sneaky.test", 9901, OWN), undefined);
  assert.equal(ownListener("vm", 9901, OWN), undefined);
  assert.equal(ownListener("x.localhost", 9901, OWN)?.name, LOCAL);
});

Deno.test("ownListener() judges a hosts-file name by its addresses: a wildcard listener answers on all of the machine's", () => {
  // A LAN address: not this machine, but a wildcard listener is refused for any internal address.
  assert.equal(ownListener("lan.test", 9901, OWN, MACHINE), undefined);
  assert.equal(ownListener("lan.test", 9902, OWN, MACHINE)?.name, WILD);
  // This machine's public address: a listener on 127.0.0.1 does not answer there, 0.0.0.0 does.
  assert.equal(ownListener("public.test", 9901, OWN, MACHINE), undefined);
  assert.equal(ownListener("public.test", 9902, OWN, MACHINE)?.name, WILD);
  assert.equal(ownListener("203.0.113.5", 9902, OWN, MACHINE)?.name, WILD);
  assert.equal(ownListener("203.0.113.5", 9902, OWN), undefined, "unknown without the view");
  assert.equal(ownListener("shop.example", 9902, OWN, MACHINE), undefined);
});

Deno.test("internalDestination() and allow_private read hosts-file names and own addresses", () => {
  assert.equal(
    internalDestination("sneaky.test", MACHINE),
    "a name /etc/hosts maps to 127.0.0.1, a loopback address",
  );
  assert.equal(internalDestination("203.0.113.5", MACHINE), OWN_ADDRESS);
  assert.equal(internalDestination("vm", MACHINE), "a name of this machine");
  assert.equal(internalDestination("sneaky.test"), undefined, "unknown without the view");
  // Allowed when every address it resolves to is allowed; refused, naming why, when not.
  assert.equal(refuseInternal("sneaky.test", 8080, LOOPBACK_ALLOWED, MACHINE), undefined);
  assert.match(
    refuseInternal("sneaky.test", 8080, new PrivateAllowance([]), MACHINE) ?? "",
    /^Destination sneaky\.test:8080 is a name \/etc\/hosts maps to 127\.0\.0\.1/,
  );
  assert.ok(refuseInternal("lan.test", 80, LOOPBACK_ALLOWED, MACHINE));
});

Deno.test("refuseOwnDestination() refuses an own listener by name, saying how the name is this machine's", () => {
  assert.equal(
    refuseOwnDestination("sneaky.test", 9901, OWN, MACHINE),
    'Destination sneaky.test:9901 (/etc/hosts maps "sneaky.test" to 127.0.0.1) reaches this ' +
      `gateway's own listener ${LOCAL} (127.0.0.1:9901); egress.allow_private never opens a way ` +
      "back in",
  );
  assert.match(refuseOwnDestination("vm", 9901, OWN, MACHINE) ?? "", /\(the host name of this/);
  assert.equal(refuseOwnDestination("sneaky.test", 8080, OWN, MACHINE), undefined);
});

Deno.test("refuseLoopbackTunnel() refuses an own port on loopback whatever allow_private says", () => {
  for (const bound of ["127.0.0.1", "127.9.9.9", "::1", "::ffff:127.0.0.1"]) {
    assert.match(
      refuseLoopbackTunnel("far.test", 9901, bound, LOOPBACK_ALLOWED, OWN) ?? "",
      /it is on this machine, and port 9901 is this gateway's own listener/,
      bound,
    );
  }
  // Another port on loopback: allow_private decides, as before.
  assert.equal(
    refuseLoopbackTunnel("far.test", 8080, "127.0.0.1", LOOPBACK_ALLOWED, OWN),
    undefined,
  );
  assert.match(
    refuseLoopbackTunnel("far.test", 8080, "127.0.0.1", new PrivateAllowance([]), OWN) ?? "",
    /not in egress\.allow_private$/,
  );
  // An address that says nothing (microsocks' 0.0.0.0, a NAT source) refuses nothing.
  for (const bound of ["0.0.0.0", "10.0.0.2", "203.0.113.9"]) {
    assert.equal(refuseLoopbackTunnel("far.test", 9901, bound, LOOPBACK_ALLOWED, OWN), undefined);
  }
});

Deno.test("refusePeer() refuses a direct socket that reached an own listener", () => {
  assert.match(
    refusePeer("db.example", 9901, "127.0.0.1", OWN, MACHINE) ?? "",
    /^The direct connection to db\.example:9901 reached 127\.0\.0\.1, this gateway's own/,
  );
  assert.equal(refusePeer("db.example", 9902, "203.0.113.5", OWN, MACHINE)?.includes(WILD), true);
  assert.equal(refusePeer("db.example", 8080, "127.0.0.1", OWN, MACHINE), undefined);
  assert.equal(refusePeer("db.example", 9901, "198.51.100.4", OWN, MACHINE), undefined);
});

/** A loopback listener that counts connections and the bytes they carried. */
function countingServer() {
  const [port] = freePorts(1);
  const listener = Deno.listen({ hostname: "127.0.0.1", port });
  const seen = { connections: 0, bytes: 0 };
  const accepting = (async () => {
    for await (const conn of listener) {
      seen.connections++;
      (async () => {
        const buffer = new Uint8Array(1024);
        for (;;) {
          const n = await conn.read(buffer).catch(() => null);
          if (n === null) break;
          seen.bytes += n;
        }
        conn.close();
      })();
    }
  })();
  return {
    port,
    seen,
    async stop() {
      listener.close();
      await accepting.catch(() => {});
    },
  };
}

Deno.test("DirectAgent closes a connection whose peer is an own listener before writing a byte", async () => {
  const server = countingServer();
  const own = [{ hostname: "127.0.0.1", port: server.port, name: LOCAL }];
  const agent = new DirectAgent({
    connectTimeoutMs: 2000,
    idleSocketMs: 1000,
    refusePeer: (host, port, peer) => refusePeer(host, port, peer, own, MACHINE),
  });
  try {
    const target = { host: "127.0.0.1", port: server.port };
    await assert.rejects(() => agent.dialOwned(target, {}), EgressRefusal);
    const viaNode = await new Promise<Error | null>((resolve) =>
      agent.createConnection({ host: target.host, port: target.port }, (error) => resolve(error))
    );
    assert.ok(viaNode instanceof EgressRefusal, String(viaNode));
    await new Promise((resolve) => setTimeout(resolve, 50));
    assert.equal(server.seen.connections, 2, "both dials connected");
    assert.equal(server.seen.bytes, 0, "and nothing was written");
  } finally {
    agent.destroy();
    await server.stop();
  }
});

/** Egress settings with one direct target and nothing else. */
function directEgress(target: string, machine: MachineView, own = OWN): EgressSettings {
  return {
    socks: [],
    direct: [target],
    allowPrivate: ["127.0.0.0/8", "::1"],
    ownListeners: own,
    machine,
    connectTimeoutMs: 2000,
    idleSocketMs: 1000,
    bodyIdleMs: 1000,
    breaker: { window: 10, minSamples: 5, failureRatio: 0.5, probeIntervalMs: 1000 },
    negativeCache: { failures: 3, ttlMs: 1000 },
    retryBudget: { ratio: 0.2, minRetries: 3, windowMs: 1000 },
    backoff: { baseMs: 1, capMs: 2 },
  };
}

Deno.test("Egress reads the machine again before a dial, and refuses a name that became an own listener", async () => {
  const server = countingServer();
  const own = [{ hostname: "127.0.0.1", port: server.port, name: LOCAL }];
  let hosts = new Map<string, string[]>();
  let now = 0;
  const view = new MachineView(
    () => Promise.resolve({ hosts, addresses: new Set<string>(), unread: [] }),
    { clock: () => now },
  );
  const egress = new Egress(directEgress(`late.test:${server.port}`, view, own), () => now);
  try {
    await view.current();
    hosts = new Map([["late.test", ["127.0.0.1"]]]);
    now += 1000;
    const target = { host: "late.test", port: server.port, target: `late.test:${server.port}` };
    await assert.rejects(() => egress.connectRaw(target), (error: Error) => {
      assert.ok(error instanceof EgressRefusal, String(error));
      assert.match(error.message, /\/etc\/hosts maps "late\.test" to 127\.0\.0\.1\) reaches/);
      return true;
    });
    assert.equal(server.seen.connections, 0, "refused before the dial");
    // A literal own address is refused though allow_private covers loopback.
    const literal = { host: "127.0.0.1", port: server.port, target: `127.0.0.1:${server.port}` };
    await assert.rejects(() => egress.connectRaw(literal), EgressRefusal);
    assert.equal(server.seen.connections, 0);
  } finally {
    egress.close();
    await server.stop();
  }
});
