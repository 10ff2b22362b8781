/**
 * The hub's embedded pool (`pool.torpool`), seen from outside `main.ts hub` processes under exactly
 * their derived flags, with Debian's real `tor`:
 *
 * - the embedded Tors hold none of the hub's descriptors, and a hub killed (SIGKILL) and started
 *   again at once is ready on its first attempt, its old Tors gone and new ones on the same ports;
 * - a hub whose pool socket a running pool answers on refuses its boot with JSON lines naming the
 *   socket and `boot refused` (never a stack trace), and spawns no Tor.
 *
 * Skipped with a message when `/usr/sbin/tor` is missing, unless `PORTCULLIS_REQUIRE_PEERS=1`.
 *
 * @module
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { stringify } from "yaml";
import { diagLines, messages } from "./fixtures/diag_lines.ts";
import { HubProcess } from "./fixtures/hub.ts";
import {
  gone,
  inheritedFrom,
  poolInstances,
  PoolProcess,
  procStat,
  type StatsInstance,
} from "./fixtures/pool_process.ts";
import { boundedTest } from "./fixtures/bounded_test.ts";
import { peersRequired } from "./fixtures/require.ts";
import { freeRanges, waitFor } from "./fixtures/torpool_harness.ts";

const TOR = "/usr/sbin/tor";

function torPresent(): boolean {
  try {
    return Deno.statSync(TOR).isFile;
  } catch {
    return false;
  }
}

/** A hub folder whose `pool.torpool` runs `instances` real Tors; its pool socket's path. */
async function hubWithPool(
  instances: number,
): Promise<{ hub: HubProcess; socket: string; pool: string }> {
  const ports = freeRanges(instances);
  let socket = "";
  let pool = "";
  const hub = await HubProcess.write({
    edit: async (config, dir) => {
      socket = join(dir, "torpool", "run", "pool.sock");
      pool = join(dir, "pool.yaml");
      await Deno.writeTextFile(
        pool,
        stringify({
          role: "torpool",
          tor_binary: TOR,
          data_dir: "torpool/data",
          api_socket: "torpool/run/pool.sock",
          socks_base_port: ports.socks,
          control_base_port: ports.control,
          min_instances: instances,
          max_instances: instances,
          probe_interval_ms: 2000, // real Tor answers its first probe after about 1 s
          dead_refusal_ms: 2000,
        }),
      );
      config.pool = { torpool: "pool.yaml" };
    },
  });
  return { hub, socket, pool };
}

/** The hub process's pid: the parent of its Tors. */
async function parentOf(pid: number): Promise<number> {
  return Number((await procStat(pid))?.[1]);
}

function owned(socket: string, count: number): Promise<StatsInstance[]> {
  return waitFor("the hub's Tors bootstrapping and owned", async () => {
    const each = await poolInstances(socket);
    return each?.length === count &&
      each.every((i) => i.state === "bootstrapping" && i.owned && i.pid !== null) && each;
  }, 30_000);
}

if (!torPresent() && !peersRequired()) {
  console.error(`torpool_hub_restart_test: ${TOR} is missing, real-Tor tests skipped`);
  Deno.test({ name: "hub torpool restart with the real tor (skipped)", ignore: true, fn() {} });
} else {
  boundedTest(
    "hub with an embedded pool killed and restarted at once: ready on the first attempt",
    async () => {
      const { hub, socket } = await hubWithPool(1);
      try {
        await hub.restart();
        const before = await owned(socket, 1);
        const hubPid = await parentOf(before[0].pid!);
        assert.deepEqual(
          await inheritedFrom(before[0].pid!, hubPid),
          [],
          "Tor holds none of the hub's",
        );
        await hub.kill();
        await hub.restart(); // throws unless the hub says `hub ready`, at once
        await waitFor("the old Tor gone", () => gone(before[0].pid!), 3000);
        const again = await owned(socket, 1);
        assert.notEqual(again[0].pid, before[0].pid);
        const second = hub.stderr.split("\n").slice(
          hub.stderr.split("\n").findLastIndex((l) =>
            l.includes("hub torpool: instance 0 spawned (life 1")
          ),
        );
        assert.doesNotMatch(second.join("\n"), /Address already in use|boot refused/);
      } finally {
        await hub.dispose();
      }
    },
    90_000,
  );

  boundedTest(
    "hub whose pool socket a running pool answers on refuses its boot as JSON lines, spawning no Tor",
    async () => {
      const { hub, socket, pool } = await hubWithPool(1);
      const standalone = await PoolProcess.start(pool);
      try {
        await standalone.ready();
        const running = await owned(socket, 1);
        await assert.rejects(() => hub.restart(), /exited before it was ready/);
        const lines = diagLines(hub.stderr);
        assert.ok(!/^\s+at /m.test(hub.stderr), hub.stderr);
        assert.match(
          messages(hub.stderr),
          new RegExp(
            `^pool\\.torpool \\(${pool}\\): Cannot serve the pool API: ${socket} is in use: ` +
              "a running pool answers on it",
            "m",
          ),
        );
        assert.equal(lines.at(-1)?.msg, "boot refused");
        assert.doesNotMatch(messages(hub.stderr), /spawned/);
        const still = await poolInstances(socket);
        assert.equal(still?.[0].pid, running[0].pid, "the running pool's Tor is untouched");
      } finally {
        await standalone.stop();
        await hub.dispose();
      }
    },
    90_000,
  );
}
