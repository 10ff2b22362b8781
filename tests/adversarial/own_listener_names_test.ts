/**
 * Adversarial: a tenant aims at the gateway's own listeners by a *name* this machine gives itself
 * (issue 31, finding 8). Every literal spelling was refused already; a name in `/etc/hosts`, the
 * machine's host name, and any name once a SOCKS instance on loopback resolved it while
 * `egress.allow_private` covered loopback, were not.
 *
 * - At load: `check`, boot, a folder reload and a hub push refuse a backend (or an `egress.direct`
 *   entry) whose host `/etc/hosts` maps to loopback, or the machine's host name, or a spelling of
 *   `localhost`, on the port of any own listener — with loopback in `allow_private`.
 * - At connect time, whatever `allow_private` says: a name the hosts file gained after the load
 *   (microsocks resolves it; the gateway reads the hosts file again before the dial), a name only
 *   the SOCKS instance resolves (its BND.ADDR is loopback and the port is an own listener's), and a
 *   `direct` target the system resolver turns into loopback.
 *
 * Every gateway and hub runs as a subprocess under the flags `main.ts flags` derives. Lines added
 * to `/etc/hosts` carry unique names and are removed afterwards (tests/fixtures/hosts_file.ts); the
 * tests that need one are ignored where the file cannot be written.
 *
 * @module
 */
import assert from "node:assert/strict";
import { stringify } from "yaml";
import {
  ADMIN_AUTH,
  checkConfig,
  freePorts,
  Gateway,
  grantFlags,
  type LanePorts,
  proofConfig,
  writeConfig,
} from "../fixtures/gateway.ts";
import { json, request } from "../fixtures/http_client.ts";
import { edgeStatus, HubProcess, startRemoteEdge, tenantText } from "../fixtures/hub.ts";
import {
  addHostsLine,
  HOSTS_WRITABLE,
  machineHostname,
  uniqueName,
} from "../fixtures/hosts_file.ts";
import { startMicrosocks } from "../fixtures/microsocks.ts";
import { peerTest } from "../fixtures/require.ts";
import { SocksFixture } from "../fixtures/socks5.ts";
import { startTestHub } from "../fixtures/hub_in_process.ts";
import { UpstreamFixture } from "../fixtures/upstream.ts";

const INWARD = /reaches this gateway's own listener/g;
/** Loopback allowed, as the finding had it (tests/fixtures/gateway.ts TEST_PRIVATE). */
const LOOPBACK_ALLOWED = ["127.0.0.0/8", "::1"];

function lanePorts(): LanePorts {
  const [publicPort, localPort, providerPort] = freePorts(3);
  return { public: publicPort, local_health: localPort, provider_health: providerPort };
}

function refusals(text: string): number {
  return text.match(INWARD)?.length ?? 0;
}

/** A tenant with one route per (host, port): `/r<i>/` proxies to `http://<host>:<port>`. */
function aimedAt(host: string, targets: readonly (readonly [string, number])[]) {
  return {
    host,
    routes: targets.map(([name, port], i) => ({
      name: `r${i}`,
      match: { prefix: `/r${i}/` },
      proxy: {
        backends: [{ url: `http://${name}:${port}` }],
        attempts: 1,
        rewrite: { strip_prefix: `/r${i}` },
      },
    })),
  };
}

/**
 * The machine's names for itself, in the spellings a backend URL may carry them (the URL schema
 * refuses a final dot; the unit tests read `name.` too).
 */
async function spellings(hostsName: string): Promise<string[]> {
  const hostname = await machineHostname();
  return [
    hostsName,
    hostsName.toUpperCase(),
    hostname,
    hostname.toUpperCase(),
    "LOCALHOST",
    "foo.localhost",
    "Foo.LocalHost",
  ];
}

/** Every (spelling, own port) pair, and one pair on a port that is no listener of the edge. */
async function inwardConfig(hostsName: string) {
  const ports = lanePorts();
  const own = [ports.public, ports.local_health, ports.provider_health];
  const names = await spellings(hostsName);
  const targets = own.flatMap((port) => names.map((name) => [name, port] as const));
  const [elsewhere, deadSocks] = freePorts(2);
  const config = proofConfig(ports, {
    egress: {
      socks: [{ hostname: "127.0.0.1", port: deadSocks }],
      direct: [`${hostsName}:${ports.local_health}`],
      allow_private: LOOPBACK_ALLOWED,
    },
  });
  const tenant = aimedAt("inward.test", [...targets, [hostsName, elsewhere]]);
  return { ports, config, tenant, inward: targets.length + 1 };
}

Deno.test({
  name: "own listeners by name: check refuses /etc/hosts names, the host name and localhost.",
  ignore: !HOSTS_WRITABLE,
  async fn() {
    const name = uniqueName("inward-check");
    await using _line = await addHostsLine("127.0.0.1", name);
    const { config, tenant, inward } = await inwardConfig(name);
    const dir = await writeConfig(config, [tenant]);
    try {
      const result = await checkConfig(dir.config);
      assert.equal(result.code, 1, result.stdout);
      // Every own port in every spelling, and the egress.direct entry; not the other port.
      assert.equal(refusals(result.stderr), inward, result.stderr.slice(0, 4000));
      assert.match(result.stderr, /egress\.direct\[0\].*reaches this gateway's own listener/);
      assert.match(result.stderr, new RegExp(`/etc/hosts maps "${name}" to 127\\.0\\.0\\.1`));
    } finally {
      await Deno.remove(dir.dir, { recursive: true });
    }
  },
});

Deno.test({
  name: "own listeners by name: boot under the derived flags refuses them too",
  ignore: !HOSTS_WRITABLE,
  async fn() {
    const name = uniqueName("inward-boot");
    await using _line = await addHostsLine("127.0.0.1", name);
    const { ports, config, tenant, inward } = await inwardConfig(name);
    const dir = await writeConfig(config, [tenant]);
    try {
      // The flags of the config as written (`flags` refuses what `check` refuses).
      const flags = await grantFlags(dir.config);
      assert.ok(flags.includes("--allow-sys=hostname,networkInterfaces"), flags.join(" "));
      await assert.rejects(() => Gateway.start(dir, ports, flags, { attempts: 1 }), (e: Error) => {
        assert.match(e.message, /^gateway exited before ready/);
        assert.equal(refusals(e.message), inward, e.message.slice(0, 4000));
        return true;
      });
    } finally {
      await Deno.remove(dir.dir, { recursive: true }).catch(() => {});
    }
  },
});

/** `GET /v1/ledger`'s local_health admissions. */
async function localAdmitted(gateway: Gateway): Promise<number> {
  return (await gateway.ledger()).lanes.local_health.admitted;
}

/** Asserts the public request for `host` never reached the protected lane. */
async function refusedInward(gateway: Gateway, host: string, path = "/r0/v1/ledger") {
  const before = await localAdmitted(gateway);
  const response = await request(gateway.ports.public, { path, headers: [["Host", host]] });
  assert.equal(response.status, 502, response.body);
  assert.equal(json<{ error: { code: string } }>(response).error.code, "upstream_unreachable");
  assert.ok(!response.body.includes("lanes"), "nothing of local_health came back");
  // One ledger read since the first one: the only local_health admission in between.
  assert.equal(await localAdmitted(gateway), before + 1, "local_health admitted the request");
}

peerTest(
  "own listeners by name: a hosts-file name added after boot is refused at connect time and on reload, microsocks on loopback, loopback allowed",
  ["microsocks"],
  async ({ microsocks }) => {
    if (!HOSTS_WRITABLE) return;
    const socks = await startMicrosocks(microsocks);
    const upstream = await UpstreamFixture.start();
    const name = uniqueName("inward-late");
    const ports = lanePorts();
    const config = proofConfig(ports, {
      egress: {
        socks: [{ hostname: "127.0.0.1", port: socks.port }],
        allow_private: LOOPBACK_ALLOWED,
      },
    });
    // Loads: the name resolves nowhere yet (it may later; connect time judges it then).
    const tenant = aimedAt("late.test", [[name, ports.local_health], [name, upstream.port]]);
    const gateway = await Gateway.start(await writeConfig(config, [tenant]), ports);
    try {
      await using _line = await addHostsLine("127.0.0.1", name);
      // Loopback stays allowed for a backend that is not this gateway: microsocks resolves it.
      const ok = await request(ports.public, {
        path: "/r1/echo",
        headers: [["Host", "late.test"]],
      });
      assert.equal(ok.status, 200, ok.body);
      await refusedInward(gateway, "late.test");
      assert.match(gateway.stderr, new RegExp(`${name}:${ports.local_health} \\(/etc/hosts maps`));

      // A reload reads the hosts file again: the set naming it is refused whole.
      const file = `${gateway.dir.dir}/tenants/hosts.test.yaml`;
      await Deno.writeTextFile(file, stringify(aimedAt("hosts.test", [[name, ports.public]])));
      const reload = await request(ports.local_health, {
        method: "POST",
        path: "/v1/config/reload",
        headers: [ADMIN_AUTH],
      });
      assert.equal(reload.status, 422, reload.body);
      assert.ok(refusals(reload.body) >= 2, reload.body);
      const hosts = await request(ports.public, {
        path: "/r0/",
        headers: [["Host", "hosts.test"]],
      });
      assert.equal(hosts.status, 421, "the refused set never served");
    } finally {
      await gateway.dispose();
      await upstream.stop();
      await socks.stop();
    }
  },
);

Deno.test("own listeners by name: a loopback BND.ADDR on an own port is refused though allow_private covers loopback", async () => {
  const ports = lanePorts();
  const upstream = await UpstreamFixture.start();
  // Only the instance knows these names (like Tor, or a resolver the gateway does not share).
  const socks = await SocksFixture.start({
    resolve: {
      "sneaky.test": { hostname: "127.0.0.1", port: ports.local_health },
      "fine.test": { hostname: "127.0.0.1", port: upstream.port },
    },
  });
  const config = proofConfig(ports, {
    egress: {
      socks: [{ hostname: "127.0.0.1", port: socks.port }],
      allow_private: LOOPBACK_ALLOWED,
    },
  });
  const tenant = aimedAt("bnd.test", [["sneaky.test", ports.local_health], [
    "fine.test",
    upstream.port,
  ]]);
  const gateway = await Gateway.start(await writeConfig(config, [tenant]), ports);
  try {
    const ok = await request(ports.public, { path: "/r1/echo", headers: [["Host", "bnd.test"]] });
    assert.equal(ok.status, 200, "a loopback backend on another port is still allowed");
    await refusedInward(gateway, "bnd.test");
    assert.match(
      gateway.stderr,
      /reached sneaky\.test:\d+ from 127\.0\.0\.1: it is on this machine, and port \d+ is this gateway's own listener lanes\.local_health/,
    );
  } finally {
    await gateway.dispose();
    await socks.stop();
    await upstream.stop();
  }
});

Deno.test({
  name:
    "own listeners by name: a direct target the resolver turns into loopback is refused at connect time",
  ignore: !HOSTS_WRITABLE,
  async fn() {
    const ports = lanePorts();
    const name = uniqueName("inward-direct");
    const config = proofConfig(ports, {
      egress: { direct: [`${name}:${ports.local_health}`], allow_private: LOOPBACK_ALLOWED },
    });
    const tenant = aimedAt("direct.test", [[name, ports.local_health]]);
    const gateway = await Gateway.start(await writeConfig(config, [tenant]), ports);
    try {
      await using _line = await addHostsLine("127.0.0.1", name);
      await refusedInward(gateway, "direct.test");
    } finally {
      await gateway.dispose();
    }
  },
});

Deno.test({
  name:
    "own listeners by name: a hub push naming the edge's listeners by hosts name or host name is rejected",
  ignore: !HOSTS_WRITABLE,
  async fn() {
    const name = uniqueName("inward-hub");
    await using _line = await addHostsLine("127.0.0.1", name);
    const hostname = await machineHostname();
    // A way out that would reach the edge itself: the instance resolves both names to loopback.
    const socks = await SocksFixture.start({
      resolve: { [name]: { hostname: "127.0.0.1" }, [hostname]: { hostname: "127.0.0.1" } },
    });
    const hub = await HubProcess.start({
      runtime: { "demo.test.yaml": tenantText("demo.test", "v1") },
    });
    let edge: Gateway | undefined;
    try {
      edge = await startRemoteEdge(hub, "edge-a", {
        egress: () =>
          Promise.resolve({
            socks: [{ hostname: "127.0.0.1", port: socks.port }],
            allow_private: LOOPBACK_ALLOWED,
          }),
      });
      const until = Date.now() + 10_000;
      while ((await edgeStatus(edge)).tenants !== 1 && Date.now() < until) {
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      const tenant = aimedAt("inward.test", [
        [name, edge.ports.local_health],
        [hostname, edge.ports.public],
      ]);
      await hub.writeTenant("inward.test.yaml", stringify(tenant));
      let status = await edgeStatus(edge);
      while (status.last_rejected === null && Date.now() < until) {
        await new Promise((resolve) => setTimeout(resolve, 50));
        status = await edgeStatus(edge);
      }
      assert.equal(refusals(JSON.stringify(status.last_rejected)), 2, JSON.stringify(status));
      assert.equal(status.tenants, 1, "the previous generation stays");
      const inward = await request(edge.ports.public, {
        path: "/r0/v1/ledger",
        headers: [["Host", "inward.test"]],
      });
      assert.equal(inward.status, 421, "the inward tenant was never served");
    } finally {
      await edge?.dispose();
      await hub.dispose();
      await socks.stop();
    }
  },
});

Deno.test({
  name: "own listeners by name: a hub refuses a set aimed at its own listeners by hosts name",
  ignore: !HOSTS_WRITABLE,
  async fn() {
    const name = uniqueName("inward-ownhub");
    await using _line = await addHostsLine("127.0.0.1", name);
    const hub = await startTestHub();
    try {
      const tenant = aimedAt("inward.test", [[name, hub.apiPort], [
        name.toUpperCase(),
        hub.healthPort,
      ]]);
      await hub.write("inward.test.yaml", stringify(tenant));
      const outcome = await hub.hub.reload();
      assert.equal(outcome.outcome, "rejected");
      const problems = outcome.outcome === "rejected" ? outcome.rejection.problems : [];
      assert.equal(refusals(JSON.stringify(problems)), 2, JSON.stringify(problems));
      assert.equal(hub.hub.store.current.number, 1, "the hub keeps serving its last good set");
    } finally {
      await hub.dispose();
    }
  },
});
