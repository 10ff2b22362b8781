/**
 * The respawn wait of a Tor that keeps dying soon after it became ready (Tor doubles, probe 300
 * ms, so a life counts as up after 3 s ready): the wait doubles with each death in a row from
 * 100 ms, `/stats` shows it with the deaths in a row and the restarts, and it starts again from
 * 100 ms only after a life stayed ready that long — a death sooner keeps doubling it.
 *
 * @module
 */
import assert from "node:assert/strict";
import { TorPool } from "../src/torpool/supervisor.ts";
import { boundedTest } from "./fixtures/bounded_test.ts";
import { makePoolDir, poolConfig, waitFor, writePlan } from "./fixtures/torpool_harness.ts";

/** Each new life of instance 0 as `/stats` shows it, and when the test first saw it. */
interface Seen {
  readonly life: number;
  readonly respawnWaitMs: number;
  readonly deathsInARow: number;
  readonly at: number;
}

/** Polls instance 0 until `until` holds, recording each life after `after` once. */
async function watchLives(
  pool: TorPool,
  until: (lives: Seen[]) => boolean,
  limitMs: number,
  after = 0,
): Promise<Seen[]> {
  const lives: Seen[] = [];
  await waitFor(
    "the lives",
    () => {
      const i = pool.stats().each[0];
      if (i && i.life > (lives.at(-1)?.life ?? after) && i.state !== "dead") {
        lives.push({
          life: i.life,
          respawnWaitMs: i.respawnWaitMs,
          deathsInARow: i.deathsInARow,
          at: Date.now(),
        });
      }
      return until(lives);
    },
    limitMs,
    () => ({ lives, stats: pool.stats().each[0] }),
  );
  return lives;
}

boundedTest(
  "TorPool: a Tor that dies soon after it became ready waits twice as long each time",
  async () => {
    // It exits 1.5 s after it started: ready by then even on a loaded machine (at 400 ms a slow
    // start sometimes died before the pool saw it ready), and well short of the stable 3 s.
    const where = await makePoolDir({ default: { mode: "exit", afterMs: 1500 } });
    const config = poolConfig(where, { maxInstances: 1 });
    const logs: string[] = [];
    const pool = TorPool.start(config, { log: (line) => logs.push(line) });
    try {
      const lives = await watchLives(pool, (seen) => seen.length >= 6, 30_000);
      assert.deepEqual(
        lives.map((l) => [l.life, l.respawnWaitMs, l.deathsInARow]),
        [[1, 0, 0], [2, 100, 1], [3, 200, 2], [4, 400, 3], [5, 800, 4], [6, 1600, 5]],
        logs.join("\n"),
      );
      // Each life was ready before it died: the wait grew anyway.
      assert.equal(logs.filter((l) => /^instance 0 ready 100%/.test(l)).length >= 5, true);
      // Seen from outside: life 6 came at least its wait after life 5 was seen.
      assert.ok(lives[5].at - lives[4].at >= 1600, `${lives[5].at - lives[4].at} ms`);
      assert.ok(logs.includes("instance 0 respawns in 1600 ms (5 death(s) in a row)"));
      const stats = pool.stats();
      assert.equal(stats.each[0].restarts, stats.each[0].life - 1);
      assert.ok(stats.deaths >= 5);
    } finally {
      await pool.stop();
      await Deno.remove(where.dir, { recursive: true });
    }
  },
  60_000,
);

boundedTest(
  "TorPool: the respawn wait starts again only after a life stayed ready for ten probe intervals",
  async () => {
    const where = await makePoolDir({ default: { mode: "exit", afterMs: 400 } });
    const config = poolConfig(where, { maxInstances: 1 });
    const logs: string[] = [];
    const pool = TorPool.start(config, { log: (line) => logs.push(line) });
    assert.equal(pool.timings.stableMs, 3000);
    const ready = () => pool.stats().each[0]?.state === "ready";
    try {
      await watchLives(pool, (seen) => seen.length >= 3, 30_000);
      await waitFor("life 3 read its plan", () => {
        const i = pool.stats().each[0];
        // The tail runs across lives: the line of this life names its pid.
        return i.life === 3 && i.tail.some((line) => line.endsWith(`, pid ${i.pid}`));
      }, 15_000);
      await writePlan(where, {});
      // Life 4 is healthy; killed soon after it is ready, it was not up: the wait doubles.
      await waitFor(
        "life 4 ready",
        () => pool.stats().each[0].life === 4 && ready(),
        15_000,
        () => logs,
      );
      Deno.kill(pool.stats().each[0].pid!, "SIGKILL");
      const early = await watchLives(pool, (seen) => seen.length >= 1, 15_000, 4);
      assert.deepEqual([early[0].life, early[0].respawnWaitMs, early[0].deathsInARow], [
        5,
        800,
        4,
      ]);
      // Life 5 stays ready for longer than 3 s: its death starts the count again.
      await waitFor("life 5 ready", ready, 15_000);
      const readyAt = Date.now();
      await waitFor("ready for longer than stableMs", () => Date.now() - readyAt > 3300, 10_000);
      assert.ok(ready());
      Deno.kill(pool.stats().each[0].pid!, "SIGKILL");
      const late = await watchLives(pool, (seen) => seen.length >= 1, 15_000, 5);
      assert.deepEqual([late[0].life, late[0].respawnWaitMs, late[0].deathsInARow], [6, 100, 1]);
    } finally {
      await pool.stop();
      await Deno.remove(where.dir, { recursive: true });
    }
  },
  60_000,
);
