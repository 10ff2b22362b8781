/**
 * Adversarial: a kept-alive upstream connection outlived the own-listener lock (an attack on issue
 * 31's "own listeners by name"). The lock judged each new connection only: a tenant backend
 * `http://<name>:<local_health port>`, the name in no hosts file yet, microsocks as the way out and
 * nothing in `egress.allow_private`; a client polling it every 30 ms while `127.0.0.1 <name>` was
 * appended to `/etc/hosts`. Within the machine view's staleness (at most a second) one connection
 * went through microsocks to local_health and was kept alive: 41 of 50 polls returned its JSON,
 * and it kept serving them after the hosts line was removed again.
 *
 * Now a pooled connection is judged again before every reuse, against the machine as it is now
 * (read again once a second), and a machine reading that changes closes every pooled connection
 * whose destination it now refuses. Both ways out that pool connections are tried: the
 * connections the gateway reads itself (`owned_reads`, a GET) and `node:http`'s pool.
 *
 * The gateway runs as a subprocess under the flags `main.ts flags` derives, with one request
 * worker (the machine view is each worker's own). Each added hosts line carries a unique name and
 * is removed afterwards (tests/fixtures/hosts_file.ts).
 *
 * @module
 */
import assert from "node:assert/strict";
import {
  freePorts,
  Gateway,
  type LanePorts,
  proofConfig,
  writeConfig,
} from "../fixtures/gateway.ts";
import { request } from "../fixtures/http_client.ts";
import {
  addHostsLine,
  HOSTS_WRITABLE,
  type HostsLine,
  uniqueName,
} from "../fixtures/hosts_file.ts";
import { startMicrosocks } from "../fixtures/microsocks.ts";
import { peerTest } from "../fixtures/require.ts";

/** The machine view's age limit (local_machine.ts `MachineView`), and a margin. */
const STALE_MS = 1000 + 300;

/** What a public request on a route got: local_health's JSON, or not. */
async function reachedLocalHealth(port: number, path: string, host: string): Promise<boolean> {
  const response = await request(port, { path, headers: [["Host", host]] });
  return response.status === 200 && response.body.includes('"lanes"');
}

/**
 * Established TCP connections to `port` (`/proc/net/tcp`, state 01; read by `cat`: Deno grants
 * `/proc` only with `--allow-all`).
 */
async function establishedTo(port: number): Promise<number> {
  const output = await new Deno.Command("cat", { args: ["/proc/net/tcp"], stdout: "piped" })
    .output();
  const text = new TextDecoder().decode(output.stdout);
  const hex = port.toString(16).toUpperCase().padStart(4, "0");
  return text.split("\n").filter((line) => {
    const fields = line.trim().split(/\s+/);
    return fields[1]?.endsWith(`:${hex}`) && fields[3] === "01";
  }).length;
}

/** A gateway whose tenant `late.test` aims `/r0/` at `<name>:<local_health>` through microsocks. */
async function lateGateway(socksPort: number, name: string, ownedReads: boolean) {
  const [publicPort, localPort, providerPort] = freePorts(3);
  const ports: LanePorts = {
    public: publicPort,
    local_health: localPort,
    provider_health: providerPort,
  };
  const config = proofConfig(ports, {
    workers: 1,
    egress: {
      socks: [{ hostname: "127.0.0.1", port: socksPort }],
      allow_private: [],
      owned_reads: ownedReads,
      idle_socket_ms: 120_000,
    },
  });
  const route = (i: number, url: string) => ({
    name: `r${i}`,
    match: { prefix: `/r${i}/` },
    proxy: { backends: [{ url }], attempts: 1, rewrite: { strip_prefix: `/r${i}` } },
  });
  const tenant = {
    host: "late.test",
    routes: [
      route(0, `http://${name}:${ports.local_health}`),
      // A name nothing resolves: each request reads the machine before its dial, then fails.
      route(1, `http://${uniqueName("nowhere")}:80`),
    ],
  };
  return await Gateway.start(await writeConfig(config, [tenant]), ports);
}

/**
 * Makes the machine view fresh (a refused request reads it), adds the hosts line, and at once has
 * one request reach local_health through microsocks — inside the view's staleness, as the attack
 * did. A slow moment can let the view go stale first (then it is refused, which is the rule); the
 * setup is tried again with a new name.
 */
async function windowConnection(
  gateway: Gateway,
  names: () => string,
): Promise<{ line: HostsLine; readAt: number }> {
  for (let attempt = 0; attempt < 5; attempt++) {
    const name = names();
    const refused = await request(gateway.ports.public, {
      path: "/r1/",
      headers: [["Host", "late.test"]],
    });
    assert.equal(refused.status, 502, refused.body);
    const readAt = performance.now();
    const line = await addHostsLine("127.0.0.1", name);
    if (await reachedLocalHealth(gateway.ports.public, "/r0/v1/ledger", "late.test")) {
      return { line, readAt };
    }
    await line.remove();
    await new Promise((resolve) => setTimeout(resolve, STALE_MS));
  }
  throw new Error("no request landed inside the view's staleness in 5 tries");
}

for (const ownedReads of [true, false]) {
  const way = ownedReads ? "owned connections" : "node:http's pool";
  peerTest(
    `own listeners: a kept-alive connection to local_health is judged again before reuse (${way})`,
    ["microsocks"],
    async ({ microsocks }) => {
      if (!HOSTS_WRITABLE) return;
      const socks = await startMicrosocks(microsocks);
      const name = uniqueName("late2");
      let gateway: Gateway | undefined;
      let line: HostsLine | undefined;
      try {
        // The tenant names `name` throughout; each setup try re-adds the same name.
        gateway = await lateGateway(socks.port, name, ownedReads);
        const opened = await windowConnection(gateway, () => name);
        line = opened.line;
        const polls: { at: number; leaked: boolean }[] = [];
        const poll = async (untilMs: number) => {
          while (performance.now() - opened.readAt < untilMs) {
            const at = performance.now() - opened.readAt;
            const leaked = await reachedLocalHealth(
              gateway!.ports.public,
              "/r0/v1/ledger",
              "late.test",
            );
            polls.push({ at, leaked });
            await new Promise((resolve) => setTimeout(resolve, 30));
          }
        };
        await poll(STALE_MS + 1500);
        await line.remove();
        const removedAt = performance.now() - opened.readAt;
        await poll(removedAt + 1500);
        const late = polls.filter((p) => p.at >= STALE_MS);
        const leaked = late.filter((p) => p.leaked).length;
        assert.ok(late.length >= 10, `polled ${late.length} times after the staleness`);
        assert.equal(
          leaked,
          0,
          `${leaked} of ${late.length} polls after the view's staleness answered local_health's JSON`,
        );
        assert.match(
          gateway.stderr,
          new RegExp(`${name}:${gateway.ports.local_health} \\(/etc/hosts maps`),
        );
      } finally {
        await line?.remove();
        await gateway?.dispose();
        await socks.stop();
      }
    },
  );
}

peerTest(
  "own listeners: a machine reading that refuses a pooled connection's destination closes it unused",
  ["microsocks"],
  async ({ microsocks }) => {
    if (!HOSTS_WRITABLE) return;
    const socks = await startMicrosocks(microsocks);
    const name = uniqueName("late3");
    let gateway: Gateway | undefined;
    let line: HostsLine | undefined;
    try {
      gateway = await lateGateway(socks.port, name, true);
      const local = gateway.ports.local_health;
      const before = await establishedTo(local);
      line = (await windowConnection(gateway, () => name)).line;
      // The kept-alive connection: microsocks holds one to local_health for it.
      assert.equal(await establishedTo(local), before + 1, "one pooled connection to local_health");
      await new Promise((resolve) => setTimeout(resolve, STALE_MS));
      // Another destination's request reads the machine again; nothing asks for /r0/.
      const other = await request(gateway.ports.public, {
        path: "/r1/",
        headers: [["Host", "late.test"]],
      });
      assert.equal(other.status, 502);
      const until = Date.now() + 3000;
      while (await establishedTo(local) > before && Date.now() < until) {
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      assert.equal(await establishedTo(local), before, "the pooled connection was closed");
    } finally {
      await line?.remove();
      await gateway?.dispose();
      await socks.stop();
    }
  },
);
