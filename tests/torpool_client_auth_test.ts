/**
 * Onion client authorization: `setClientAuth` writes one `<onion>.auth_private` file (mode 0600,
 * Tor's format) into every instance's `ClientOnionAuthDir` — also into instances spawned later —
 * removes files of onions no longer listed, asks running instances to reload, and never puts a key
 * into a log line, an error or `/stats`.
 *
 * @module
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { TorPool } from "../src/torpool/supervisor.ts";
import { makePoolDir, poolConfig, waitFor } from "./fixtures/torpool_harness.ts";
import { boundedTest } from "./fixtures/bounded_test.ts";

const ONION_A = "a".repeat(52) + "bcde";
const ONION_B = "pg6mmjiyjmcrsslvykfwnntlaru7p5svn6y2ymmju6nubxndf4pscryd";
const KEY_A = "QWERTYUIOPASDFGHJKLZXCVBNM234567QWERTYUIOPASDFGHJKLZ";
const KEY_B = "ZLKJHGFDSAPOIUYTREWQMNBVCXZ765432ZLKJHGFDSAPOIUYTREW";

async function authFiles(dir: string): Promise<Record<string, { mode: number; text: string }>> {
  const found: Record<string, { mode: number; text: string }> = {};
  for await (const entry of Deno.readDir(dir)) {
    const path = join(dir, entry.name);
    found[entry.name] = {
      mode: (await Deno.stat(path)).mode! & 0o777,
      text: await Deno.readTextFile(path),
    };
  }
  return found;
}

boundedTest(
  "TorPool.setClientAuth() writes 0600 key files into every instance, never logging a key",
  async () => {
    const where = await makePoolDir();
    const config = poolConfig(where, { minInstances: 2, maxInstances: 3 });
    const logs: string[] = [];
    const pool = TorPool.start(config, { log: (line) => logs.push(line) });
    const authDir = (i: number) => join(config.dataDir, `instance-${i}`, "onion_auth");
    try {
      await waitFor("two live instances", () => pool.backends().length === 2);
      await pool.setClientAuth([
        { onion: `${ONION_A}.onion`, key: KEY_A },
        { onion: ONION_B, key: KEY_B },
      ]);
      const expected = {
        [`${ONION_A}.auth_private`]: {
          mode: 0o600,
          text: `${ONION_A}:descriptor:x25519:${KEY_A}\n`,
        },
        [`${ONION_B}.auth_private`]: {
          mode: 0o600,
          text: `${ONION_B}:descriptor:x25519:${KEY_B}\n`,
        },
      };
      for (const i of [0, 1]) {
        assert.deepEqual(await authFiles(authDir(i)), expected, `instance ${i}`);
      }
      assert.equal((await Deno.stat(authDir(0))).mode! & 0o777, 0o700);
      // Running instances were asked to reload (SIGHUP), not restarted.
      await waitFor(
        "both doubles reloaded",
        () =>
          pool.stats().each.every((i) =>
            i.tail.includes("double: reloaded, 2 client auth file(s)")
          ),
      );
      assert.deepEqual(pool.stats().each.map((i) => i.life), [1, 1]);

      pool.scale({ min: 3 });
      await waitFor("instance 2 live", () => pool.backends().length === 3);
      assert.deepEqual(await authFiles(authDir(2)), expected, "an instance spawned later");

      await pool.setClientAuth([{ onion: ONION_B, key: KEY_B }]);
      for (const i of [0, 1, 2]) {
        assert.deepEqual(Object.keys(await authFiles(authDir(i))), [`${ONION_B}.auth_private`]);
      }

      const bad = await pool.setClientAuth([{ onion: ONION_A, key: `${KEY_A.slice(0, 50)}!!` }])
        .catch((error) => error);
      assert.ok(bad instanceof TypeError);
      assert.equal(
        bad.message,
        `Client auth key for "${ONION_A}.onion" is not a base32 x25519 private key (52 characters A-Z, 2-7)`,
      );
      await assert.rejects(
        pool.setClientAuth([{ onion: "example.com", key: KEY_A }]),
        /Client auth entry "example\.com" is not a v3 onion address/,
      );
      assert.deepEqual(Object.keys(await authFiles(authDir(0))), [`${ONION_B}.auth_private`]);

      const everything = [...logs, JSON.stringify(pool.stats())].join("\n");
      for (const key of [KEY_A, KEY_B]) assert.ok(!everything.includes(key), "a key was logged");
      assert.ok(logs.includes("client auth: 2 onion key(s) in 2 instance(s)"), logs.join("\n"));
    } finally {
      await pool.stop();
      await Deno.remove(where.dir, { recursive: true });
    }
  },
  30_000,
);

boundedTest(
  "TorPool.loadClientAuth() installs client_auth_dir's <onion>.key files and refuses a key others may read",
  async () => {
    const where = await makePoolDir();
    const keys = join(where.dir, "client-auth");
    await Deno.mkdir(keys);
    await Deno.writeTextFile(join(keys, `${ONION_B}.onion.key`), `${KEY_B}\n`, { mode: 0o600 });
    await Deno.writeTextFile(join(keys, "README"), "not a key\n");
    const config = poolConfig(where, { minInstances: 1, maxInstances: 1, clientAuthDir: keys });
    const logs: string[] = [];
    const pool = TorPool.start(config, { log: (line) => logs.push(line) });
    const authDir = join(config.dataDir, "instance-0", "onion_auth");
    try {
      await waitFor("one live instance", () => pool.backends().length === 1);
      await pool.loadClientAuth();
      assert.deepEqual(await authFiles(authDir), {
        [`${ONION_B}.auth_private`]: {
          mode: 0o600,
          text: `${ONION_B}:descriptor:x25519:${KEY_B}\n`,
        },
      });
      // A key file group or others may read is refused, naming the file and never its content.
      await Deno.chmod(join(keys, `${ONION_B}.onion.key`), 0o644);
      const refused = await pool.loadClientAuth().catch((error) => error);
      assert.ok(refused instanceof Error);
      assert.match(refused.message, new RegExp(`client_auth_dir .*${ONION_B}\\.onion\\.key`));
      assert.ok(!refused.message.includes(KEY_B));
      assert.ok(!logs.join("\n").includes(KEY_B), "a key was logged");
    } finally {
      await pool.stop();
      await Deno.remove(where.dir, { recursive: true });
    }
  },
  30_000,
);
