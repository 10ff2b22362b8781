/**
 * The supervisor with Debian's real `tor`, which runs here but reaches no network: its control
 * port answers cookie authentication and GETINFO, its SOCKS port accepts connections, and its
 * bootstrap never completes — the pool must say so (bootstrapping, progress below 100, no
 * backends, health `down`), never call it ready. Skipped with a message when `/usr/sbin/tor` is
 * missing, unless `PORTCULLIS_REQUIRE_PEERS=1` makes that a failure.
 *
 * @module
 */
import assert from "node:assert/strict";
import { TorPool } from "../src/torpool/supervisor.ts";
import { accepts, makePoolDir, poolConfig, waitFor } from "./fixtures/torpool_harness.ts";
import { boundedTest } from "./fixtures/bounded_test.ts";
import { peersRequired } from "./fixtures/require.ts";

const TOR = "/usr/sbin/tor";

function torPresent(): boolean {
  try {
    return Deno.statSync(TOR).isFile;
  } catch {
    return false;
  }
}

if (!torPresent() && !peersRequired()) {
  console.error(
    `torpool_real_tor_test: ${TOR} is missing, real-Tor test skipped ` +
      "(apt-get install tor; PORTCULLIS_REQUIRE_PEERS=1 makes this a failure)",
  );
  Deno.test({
    name: "TorPool with the real tor (skipped: /usr/sbin/tor missing)",
    ignore: true,
    fn() {},
  });
} else {
  boundedTest(
    "TorPool with the real tor offline: bootstrapping, progress < 100, never ready",
    async () => {
      assert.ok(torPresent(), `${TOR} is missing: apt-get install tor`);
      const where = await makePoolDir();
      const config = poolConfig(where, {
        torBinary: TOR,
        minInstances: 1,
        maxInstances: 1,
        probeIntervalMs: 1000,
        deadRefusalMs: 5000,
      });
      const logs: string[] = [];
      const pool = TorPool.start(config, { log: (line) => logs.push(line) });
      try {
        await waitFor(
          "the control port answering (bootstrapping)",
          () => pool.health().each[0]?.state === "bootstrapping",
          20_000,
          () => pool.stats(),
        );
        assert.ok(await accepts(config.socksBasePort), "the SOCKS port accepts a TCP connection");
        // Several probes later: still bootstrapping, never ready.
        const watchFrom = Date.now();
        const seen = new Set<string>();
        await waitFor("three probe intervals", () => {
          const health = pool.health();
          seen.add(health.each[0].state);
          assert.ok(health.bootstrap < 100, `progress ${health.bootstrap}`);
          return Date.now() - watchFrom > 3000;
        }, 10_000);
        assert.deepEqual([...seen], ["bootstrapping"]);
        const health = pool.health();
        assert.equal(health.status, "down");
        assert.equal(health.live, 0);
        assert.deepEqual(pool.backends(), []);
        const stats = pool.stats().each[0];
        assert.equal(stats.life, 1, "never declared dead");
        assert.equal(stats.failedProbes, 0);
        assert.ok(
          typeof stats.summary === "string" && stats.summary.length > 0,
          stats.summary ?? "",
        );
        assert.ok(stats.tail.some((line) => /\[notice\] Bootstrapped \d+%/.test(line)));
        // A reload (new client keys) leaves Tor running in the same life.
        const key = "QWERTYUIOPASDFGHJKLZXCVBNM234567QWERTYUIOPASDFGHJKLZ";
        await pool.setClientAuth([{ onion: "b".repeat(56), key }]);
        await waitFor(
          "Tor read its auth folder again",
          () =>
            pool.stats().each[0].tail.some((l) =>
              /Received reload signal|Reloading config/.test(l)
            ),
        );
        assert.equal(pool.stats().each[0].life, 1);
        assert.ok(await accepts(config.socksBasePort));
        assert.ok(!logs.join("\n").includes(key));
      } catch (error) {
        throw new Error(
          `${(error as Error).message}\nlog:\n${logs.join("\n")}\n` +
            `stats: ${JSON.stringify(pool.stats())}`,
          { cause: error },
        );
      } finally {
        await pool.stop();
        await Deno.remove(where.dir, { recursive: true });
      }
    },
    60_000,
  );
}
