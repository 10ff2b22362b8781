/**
 * The pool supervisor against the Tor double: instances on their ports, and each way an instance
 * dies — killed, exited, control port hung, SOCKS port refusing — ending in a respawn on the same
 * ports. Timings are short (probe 300 ms) and every wait polls a state with a deadline.
 *
 * @module
 */
import assert from "node:assert/strict";
import { TorPool } from "../src/torpool/supervisor.ts";
import {
  accepts,
  makePoolDir,
  poolConfig,
  type PoolDir,
  waitFor,
  writePlan,
} from "./fixtures/torpool_harness.ts";
import type { PoolConfig } from "../src/torpool/config.ts";
import { boundedTest } from "./fixtures/bounded_test.ts";

/** Runs `fn` with a started pool; stops it and removes the folder whatever happens. */
async function withPool(
  where: PoolDir,
  config: PoolConfig,
  fn: (pool: TorPool, logs: string[]) => Promise<void>,
): Promise<void> {
  const logs: string[] = [];
  const pool = TorPool.start(config, { log: (line) => logs.push(line) });
  try {
    await fn(pool, logs);
  } catch (error) {
    throw new Error(`${(error as Error).message}\nlog:\n${logs.join("\n")}`, { cause: error });
  } finally {
    await pool.stop();
    await Deno.remove(where.dir, { recursive: true });
  }
}

function instance(pool: TorPool, index: number) {
  return pool.stats().each[index];
}

boundedTest("TorPool.start() brings min_instances up ready on socks_base_port + i", async () => {
  const where = await makePoolDir();
  const config = poolConfig(where, { minInstances: 2 });
  await withPool(where, config, async (pool) => {
    await waitFor(
      "two ready instances",
      () => pool.health().live === 2,
      15_000,
      () => pool.stats(),
    );
    assert.deepEqual(
      pool.backends().map((b) => [b.index, b.host, b.port]),
      [[0, "127.0.0.1", config.socksBasePort], [1, "127.0.0.1", config.socksBasePort + 1]],
    );
    assert.equal(pool.health().status, "ok");
    assert.equal(pool.health().bootstrap, 100);
    assert.ok(await accepts(config.socksBasePort + 1));
    assert.ok(pool.backends().every((b) => typeof b.latencyMs === "number"));
    const torrc = await Deno.readTextFile(`${config.dataDir}/instance-1/torrc`);
    assert.match(
      torrc,
      new RegExp(`^ControlPort 127\\.0\\.0\\.1:${config.controlBasePort + 1}$`, "m"),
    );
    assert.match(torrc, new RegExp(`^__OwningControllerProcess ${Deno.pid}$`, "m"));
    assert.equal((await Deno.stat(`${config.dataDir}/instance-1`)).mode! & 0o777, 0o700);
  });
}, 30_000);

boundedTest("TorPool respawns a killed instance on the same port and lists it again", async () => {
  const where = await makePoolDir();
  const config = poolConfig(where, { minInstances: 2 });
  await withPool(where, config, async (pool, logs) => {
    await waitFor(
      "two ready instances",
      () => pool.health().live === 2,
      15_000,
      () => pool.stats(),
    );
    const victim = instance(pool, 1);
    Deno.kill(victim.pid!, "SIGKILL");
    await waitFor("instance 1 dead", () => pool.backends().length === 1);
    assert.deepEqual(pool.backends().map((b) => b.port), [config.socksBasePort]);
    await waitFor(
      "instance 1 ready again",
      () => {
        const now = instance(pool, 1);
        return now.life === 2 && now.state === "ready";
      },
      15_000,
      () => pool.stats(),
    );
    const again = instance(pool, 1);
    assert.notEqual(again.pid, victim.pid);
    assert.equal(again.socksPort, config.socksBasePort + 1);
    assert.ok(await accepts(config.socksBasePort + 1), "the same port answers again");
    assert.deepEqual(
      pool.backends().map((b) => b.port),
      [config.socksBasePort, config.socksBasePort + 1],
    );
    assert.match(again.lastDeath!.reason, /process exited \(signal SIGKILL\)/);
    assert.ok(logs.some((l) => /^instance 1 spawned \(life 2, pid \d+\) on SOCKS /.test(l)));
  });
}, 30_000);

boundedTest("TorPool: an instance that exits is respawned on its ports", async () => {
  const where = await makePoolDir({ "0": { mode: "exit", afterMs: 600 } });
  const config = poolConfig(where);
  await withPool(where, config, async (pool) => {
    await waitFor(
      "instance 0 died once",
      () => instance(pool, 0).life >= 2,
      15_000,
      () => pool.stats(),
    );
    await writePlan(where, {});
    await waitFor("instance 0 ready in a later life", () => pool.backends().length === 1);
    assert.equal(pool.backends()[0].port, config.socksBasePort);
    assert.ok(await accepts(config.socksBasePort), "the same port answers again");
    assert.match(pool.stats().each[0].lastDeath!.reason, /process exited \(code 1\)/);
  });
}, 30_000);

boundedTest(
  "TorPool: a hung control port is dead after two failed probes, then respawned",
  async () => {
    const where = await makePoolDir({ "0": { mode: "control_hang", afterMs: 800 } });
    const config = poolConfig(where, { probeIntervalMs: 300 });
    await withPool(where, config, async (pool, logs) => {
      await waitFor("ready before the hang", () => instance(pool, 0).state === "ready");
      const first = instance(pool, 0);
      await writePlan(where, {});
      const dead = await waitFor("a death", () => logs.find((l) => l.includes(" dead: ")));
      assert.match(
        dead,
        /^instance 0 dead: 2 control probes failed in a row \(ControlError: No reply to PROTOCOLINFO within 150 ms\)/,
      );
      await waitFor(
        "instance 0 ready in life 2",
        () => {
          const now = instance(pool, 0);
          return now.life === 2 && now.state === "ready";
        },
        15_000,
        () => pool.stats(),
      );
      assert.notEqual(instance(pool, 0).pid, first.pid);
      assert.equal(instance(pool, 0).socksPort, config.socksBasePort);
      assert.ok(await accepts(config.socksBasePort));
    });
  },
  30_000,
);

boundedTest("TorPool: a SOCKS port refusing longer than dead_refusal_ms is dead", async () => {
  const where = await makePoolDir({ "0": { mode: "socks_refuse", afterMs: 700 } });
  const config = poolConfig(where, { deadRefusalMs: 600, probeIntervalMs: 200 });
  await withPool(where, config, async (pool, logs) => {
    await waitFor("ready before the refusal", () => instance(pool, 0).state === "ready");
    const refusedAt = await waitFor(
      "the port refusing",
      async () => !(await accepts(config.socksBasePort)) && Date.now(),
    );
    await writePlan(where, {});
    const dead = await waitFor("a death", () => logs.find((l) => l.includes(" dead: ")));
    const after = Date.now() - refusedAt;
    assert.match(dead, /^instance 0 dead: SOCKS port \d+ refused connections for \d+ ms/);
    const said = Number(/for (\d+) ms/.exec(dead)![1]);
    assert.ok(said > 600, `dead only after more than dead_refusal_ms (said ${said} ms)`);
    assert.ok(after < 600 + 3 * 150 + 500, `dead soon after (${after} ms after the refusal)`);
    assert.equal(instance(pool, 0).failedProbes, 0, "the control port kept answering");
    await waitFor(
      "respawned and ready",
      () => instance(pool, 0).life === 2 && pool.backends().length === 1,
    );
    assert.ok(await accepts(config.socksBasePort));
  });
}, 30_000);

boundedTest("TorPool: a slow bootstrap is reported as progress, then ready", async () => {
  const where = await makePoolDir({ default: { bootstrapMs: 2500 } });
  const config = poolConfig(where, { probeIntervalMs: 200 });
  await withPool(where, config, async (pool) => {
    const midway = await waitFor("progress between 0 and 100", () => {
      const health = pool.health();
      return health.each[0]?.state === "bootstrapping" && health.bootstrap > 0 && health;
    });
    assert.ok(midway.bootstrap < 100);
    assert.equal(midway.status, "down");
    assert.deepEqual(pool.backends(), [], "a bootstrapping instance is no backend");
    await waitFor("ready", () => pool.health().status === "ok", 15_000, () => pool.health());
    assert.equal(pool.health().bootstrap, 100);
  });
}, 30_000);

boundedTest(
  "TorPool: a Tor binary that cannot be spawned is retried with a backoff, pool down",
  async () => {
    const where = await makePoolDir();
    const config = poolConfig(where, { torBinary: `${where.dir}/no-such-tor` });
    await withPool(where, config, async (pool, logs) => {
      await waitFor(
        "three failed spawns",
        () => logs.filter((l) => l.startsWith("instance 0 cannot spawn: NotFound")).length >= 3,
      );
      const stats = instance(pool, 0);
      assert.equal(stats.state, "dead");
      assert.equal(stats.life, 0);
      assert.match(stats.lastDeath!.reason, /^cannot spawn: NotFound/);
      assert.equal(pool.health().status, "down");
      assert.deepEqual(pool.backends(), []);
    });
  },
  30_000,
);
