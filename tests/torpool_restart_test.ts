/**
 * A pool killed (SIGKILL) and started again at once, with Debian's real `tor` (it runs here without
 * network: it binds its ports and answers its control port, its bootstrap never completes):
 *
 * - no Tor holds a descriptor of its supervisor (the API socket above all);
 * - every life is owned: killed, the supervisor's Tors exit at once instead of after Tor's 15 s
 *   `__OwningControllerProcess` poll;
 * - the first restart attempt serves, twice in a row — what systemd's default start limit (5
 *   starts in 10 s) needs — once after the old Tors ended and once at once, while they may still
 *   be ending; its instances come back on the same ports;
 * - a Tor an earlier run left on an instance's ports (spawned before it was owned) is ended before
 *   the slot's first life, so a restart is not blocked by it.
 *
 * Skipped with a message when `/usr/sbin/tor` is missing, unless `PORTCULLIS_REQUIRE_PEERS=1`.
 *
 * @module
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { TorPool } from "../src/torpool/supervisor.ts";
import { prepareInstance, torArgs } from "../src/torpool/torrc.ts";
import {
  gone,
  inheritedFrom,
  poolInstances,
  PoolProcess,
  type StatsInstance,
  writePoolYaml,
} from "./fixtures/pool_process.ts";
import { boundedTest } from "./fixtures/bounded_test.ts";
import { peersRequired } from "./fixtures/require.ts";
import { freeRanges, makePoolDir, poolConfig, waitFor } from "./fixtures/torpool_harness.ts";

const TOR = "/usr/sbin/tor";

function torPresent(): boolean {
  try {
    return Deno.statSync(TOR).isFile;
  } catch {
    return false;
  }
}

/** Waits until every instance runs (bootstrapping: its control port answers) and is owned. */
function ownedInstances(
  pool: PoolProcess,
  socket: string,
  count: number,
): Promise<StatsInstance[]> {
  let last: unknown;
  return waitFor(
    "every instance bootstrapping and owned",
    async () => {
      const each = await poolInstances(socket);
      last = each;
      return each?.length === count &&
        each.every((i) => i.state === "bootstrapping" && i.owned && i.pid !== null) && each;
    },
    30_000,
    () => ({ last, stderr: pool.stderr }),
  );
}

if (!torPresent() && !peersRequired()) {
  console.error(`torpool_restart_test: ${TOR} is missing, real-Tor tests skipped`);
  Deno.test({ name: "torpool restart with the real tor (skipped)", ignore: true, fn() {} });
} else {
  boundedTest(
    "torpool killed and restarted at once: Tor holds none of its descriptors, exits with it, and the first restart serves",
    async () => {
      const where = await makePoolDir();
      const ports = freeRanges(2);
      const config = await writePoolYaml(where.dir, {
        tor: TOR,
        socks: ports.socks,
        control: ports.control,
        instances: 2,
        // Real Tor answers its first probe about 1 s after it starts (it parses its GeoIP files
        // first): a probe interval of 2 s gives it that grace.
        probeMs: 2000,
      });
      const socket = join(where.dir, "run", "pool.sock");
      let pool = await PoolProcess.start(config);
      try {
        await pool.ready();
        for (let round = 1; round <= 2; round++) {
          const before = await ownedInstances(pool, socket, 2);
          for (const { pid } of before) {
            const held = await inheritedFrom(pid!, pool.pid);
            assert.deepEqual(held, [], `Tor ${pid} holds ${held.join(", ")} of its supervisor's`);
          }
          await pool.stop("SIGKILL");
          const killedAt = Date.now();
          const oldGone = async () =>
            (await Promise.all(before.map((i) => gone(i.pid!)))).every(Boolean);
          // Round 1: the Tors end with their supervisor, nobody else ends them (no restart yet).
          // Round 2: the restart comes at once, while they may still be ending.
          if (round === 1) {
            await waitFor("the old Tors gone", oldGone, 3000, () => before.map((i) => i.pid));
          }
          pool = await PoolProcess.start(config);
          await pool.ready(); // the first attempt
          await waitFor("the old Tors gone", oldGone, 3000, () => before.map((i) => i.pid));
          const after = Date.now() - killedAt;
          const again = await ownedInstances(pool, socket, 2);
          assert.ok(
            again.every((i, n) => i.pid !== before[n].pid),
            `round ${round}: new Tors (${after} ms)`,
          );
          assert.doesNotMatch(pool.stderr, /Address already in use|cannot spawn/);
        }
      } finally {
        await pool.stop();
        await Deno.remove(where.dir, { recursive: true });
      }
    },
    120_000,
  );

  boundedTest(
    "TorPool ends a Tor an earlier run left on an instance's ports before its first life",
    async () => {
      const where = await makePoolDir();
      const config = poolConfig(where, {
        torBinary: TOR,
        minInstances: 1,
        maxInstances: 1,
        probeIntervalMs: 2000,
        deadRefusalMs: 5000,
      });
      // A Tor on instance 0's torrc whose owner outlives the test: nothing ends it but the pool.
      const paths = await prepareInstance(config, 0, 1);
      const leftover = new Deno.Command(TOR, {
        args: torArgs(paths),
        stdout: "null",
        stderr: "null",
      }).spawn();
      let ended = false;
      const exited = leftover.status.then(() => ended = true);
      const logs: string[] = [];
      let pool: TorPool | undefined;
      try {
        await waitFor("the leftover answering", async () => {
          try {
            (await Deno.connect({ hostname: "127.0.0.1", port: config.controlBasePort })).close();
            return true;
          } catch {
            return false;
          }
        }, 20_000);
        pool = TorPool.start(config, { log: (line) => logs.push(line) });
        const running = pool;
        await waitFor("the leftover ended", () => ended, 10_000, () => logs);
        const instance = await waitFor(
          "instance 0 bootstrapping and owned in its first life",
          () => {
            const i = running.stats().each[0];
            return i?.state === "bootstrapping" && i.owned && i;
          },
          20_000,
          () => running.stats(),
        );
        assert.equal(instance.life, 1, logs.join("\n"));
        assert.notEqual(instance.pid, leftover.pid);
        assert.equal(running.stats().leftoversEnded, 1);
        assert.ok(
          logs.includes(
            `warning: instance 0: ended a Tor left by an earlier run on control port ` +
              `${config.controlBasePort}`,
          ),
          logs.join("\n"),
        );
      } finally {
        await pool?.stop();
        try {
          leftover.kill("SIGKILL");
        } catch { /* ended */ }
        await exited;
        await Deno.remove(where.dir, { recursive: true });
      }
    },
    60_000,
  );
}
