/**
 * The pool scaling against the Tor double: carriers' reports drive it up one instance at a time
 * (never past max), quiet drives it down after the cooldown (never past min), and the last live
 * instance stays whatever the limits say.
 *
 * @module
 */
import assert from "node:assert/strict";
import { TorPool } from "../src/torpool/supervisor.ts";
import { makePoolDir, poolConfig, waitFor } from "./fixtures/torpool_harness.ts";
import { boundedTest } from "./fixtures/bounded_test.ts";

boundedTest("TorPool scales up under reported load and down after the cooldown", async () => {
  // Instance 1 bootstraps over three probe intervals, as a loaded machine (or a real Tor) may.
  const where = await makePoolDir({ "1": { bootstrapMs: 1200 } });
  const config = poolConfig(where, {
    minInstances: 1,
    maxInstances: 3,
    probeIntervalMs: 400,
    busyStreams: 2,
    scaleCooldownMs: 1500,
  });
  const logs: string[] = [];
  const pool = TorPool.start(config, { log: (line) => logs.push(line) });
  const count = () => pool.health().instances;
  const live = () => pool.backends().map((b) => b.port);
  try {
    await waitFor("one live instance", () => live().length === 1);
    // Until the second instance is live, the first is the only live one and busy: each probe
    // interval of that is one more step up, as the scaler says. The limit holds the pool at two
    // until the second is live, however long it takes to bootstrap.
    pool.scale({ max: 2 });
    assert.equal(pool.report(config.socksBasePort, { active: 5, latencyMs: 40 }), true);
    const busySince = Date.now();
    await waitFor("a second instance", () => count() === 2, 10_000, () => pool.stats());
    assert.ok(Date.now() - busySince >= 400, "up only after one probe interval");
    await waitFor(
      "the second instance live",
      () => live().length === 2,
      15_000,
      () => pool.stats(),
    );
    pool.scale({ max: 3 });
    // Half the live instances busy: 0.5, between the thresholds: no step.
    const halfSince = Date.now();
    await waitFor("a probe interval and a half", () => Date.now() - halfSince > 600);
    assert.equal(count(), 2);
    for (const port of live()) pool.report(port, { active: 2 });
    await waitFor("a third instance", () => count() === 3, 10_000, () => pool.stats());
    await waitFor("three live", () => live().length === 3);
    for (const port of live()) pool.report(port, { active: 9 });
    const fullSince = Date.now();
    await waitFor("two probe intervals at max", () => Date.now() - fullSince > 900);
    assert.equal(count(), 3, "never past max_instances");
    for (const port of live()) pool.report(port, { active: 0 });
    const quietSince = Date.now();
    await waitFor("one instance removed", () => count() === 2, 10_000, () => pool.stats());
    assert.ok(Date.now() - quietSince >= 1500, "down only after scale_cooldown_ms");
    assert.deepEqual(live(), [config.socksBasePort, config.socksBasePort + 1], "the highest goes");
    await waitFor("back to min", () => count() === 1, 10_000, () => pool.stats());
    const minSince = Date.now();
    await waitFor("another cooldown", () => Date.now() - minSince > 1700);
    assert.equal(count(), 1, "never below min_instances");
    assert.deepEqual(live(), [config.socksBasePort]);
    assert.equal(pool.stats().scaleUps, 2);
    assert.equal(pool.stats().scaleDowns, 2);
    assert.ok(
      logs.includes(`instance 2 removed (SOCKS ${config.socksBasePort + 2})`),
      logs.join("\n"),
    );
  } finally {
    await pool.stop();
    await Deno.remove(where.dir, { recursive: true });
  }
}, 40_000);

boundedTest("TorPool never removes the last live instance, whatever the limits say", async () => {
  // Instance 0 bootstraps forever (like Tor offline); instance 1 is the only live one.
  const where = await makePoolDir({ "0": { stallAt: 40 } });
  const config = poolConfig(where, {
    minInstances: 1,
    maxInstances: 2,
    probeIntervalMs: 200,
    scaleCooldownMs: 300,
  });
  const pool = TorPool.start(config, { log: () => {} });
  try {
    assert.deepEqual(pool.scale({ min: 2 }), { min: 2, max: 2 });
    await waitFor(
      "instance 1 live",
      () => pool.backends().length === 1,
      10_000,
      () => pool.stats(),
    );
    await waitFor(
      "instance 0 bootstrapping",
      () => pool.health().each[0].state === "bootstrapping",
    );
    assert.deepEqual(pool.scale({ min: 1, max: 1 }), { min: 1, max: 1 });
    const since = Date.now();
    await waitFor("several cooldowns", () => Date.now() - since > 1200);
    assert.equal(pool.health().instances, 2, "max 1, but instance 1 is the only live one");
    assert.equal(pool.backends()[0].port, config.socksBasePort + 1);
    assert.equal(pool.stats().scaleDowns, 0);
    assert.throws(
      () => pool.scale({ min: 3 }),
      /Cannot scale: min 3 is not a whole number from 1 to 2/,
    );
    assert.throws(() => pool.scale({ min: 2, max: 1 }), /Cannot scale: min 2 is above max 1/);
    assert.throws(() => pool.scale({ max: 0 }), RangeError);
  } finally {
    await pool.stop();
    await Deno.remove(where.dir, { recursive: true });
  }
}, 30_000);
