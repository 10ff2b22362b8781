/**
 * The pool owns its API socket (`src/torpool/api_socket.ts`), seen from outside `portcullis
 * torpool` processes under exactly their derived flags, with Tor doubles:
 *
 * - a socket a running pool answers on refuses a second pool's start with one JSON line naming it,
 *   before that second pool spawns any Tor; the first pool keeps serving;
 * - a socket held by a process that never answers (a listener nobody accepts on) is stale: taken
 *   over, with a warning line;
 * - a file that is not a socket, or a folder others may write to, refuses the start as a JSON line,
 *   and the file is left as it was;
 * - a deleted socket is bound again, mode 0600, with one warning line, and counted in `/stats`.
 *
 * @module
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { diagLines, messages } from "./fixtures/diag_lines.ts";
import { poolGet, PoolProcess, writePoolYaml } from "./fixtures/pool_process.ts";
import { boundedTest } from "./fixtures/bounded_test.ts";
import { freeRanges, makePoolDir, waitFor } from "./fixtures/torpool_harness.ts";

/** A double-backed pool folder and its config; removed after `fn`. */
async function withPoolFolder(
  fn: (dir: string, config: string, socket: string) => Promise<void>,
): Promise<void> {
  const where = await makePoolDir();
  const ports = freeRanges(1);
  const config = await writePoolYaml(where.dir, {
    tor: where.tor,
    socks: ports.socks,
    control: ports.control,
  });
  try {
    await fn(where.dir, config, join(where.dir, "run", "pool.sock"));
  } finally {
    await Deno.remove(where.dir, { recursive: true });
  }
}

/** Every line is a diagnostic JSON line, and none is a stack frame. */
function assertJsonOnly(stderr: string): void {
  const lines = diagLines(stderr);
  assert.ok(lines.length > 0, "something was said");
  assert.ok(!/^\s+at /m.test(stderr), stderr);
}

boundedTest(
  "torpool: a socket a running pool answers on refuses a second pool, which spawns no Tor",
  async () => {
    await withPoolFolder(async (_dir, config, socket) => {
      const first = await PoolProcess.start(config);
      try {
        await first.ready();
        await waitFor(
          "the first pool healthy",
          async () => (await poolGet(socket, "/health"))?.status === 200,
        );
        const second = await PoolProcess.start(config);
        const status = await second.exited;
        assert.equal(status.code, 1, second.stderr);
        assertJsonOnly(second.stderr);
        assert.match(
          messages(second.stderr),
          new RegExp(
            `Cannot serve the pool API: ${socket} is in use: a running pool answers on it`,
          ),
        );
        assert.doesNotMatch(messages(second.stderr), /spawned/, "no Tor was spawned");
        const stats = await poolGet(socket, "/stats");
        assert.equal(stats?.status, 200, "the first pool still answers");
        assert.equal(stats?.body.spawns, 1);
        assert.equal((await poolGet(socket, "/health"))?.status, 200);
      } finally {
        await first.stop();
      }
    });
  },
  60_000,
);

/** Holders of a socket that answer nothing: the script each runs, by what it does. */
const SILENT_HOLDERS: Record<string, string> = {
  // A listener nobody accepts on (a process that inherited it): connections queue unanswered.
  "never accepts": "setInterval(() => {}, 1000);",
  // A listener that reads each request and hangs up without a byte.
  "hangs up": "for await (const conn of listener) " +
    "conn.read(new Uint8Array(4096)).then(() => conn.close());",
};

for (const [kind, script] of Object.entries(SILENT_HOLDERS)) {
  boundedTest(
    `torpool: a socket held by a process that ${kind} is taken over, with a warning`,
    async () => {
      await withPoolFolder(async (dir, config, socket) => {
        await Deno.mkdir(join(dir, "run"), { mode: 0o700 });
        const holder = new Deno.Command(Deno.execPath(), {
          args: [
            "eval",
            `const listener = Deno.listen({ transport: "unix", path: ${
              JSON.stringify(socket)
            } }); ` +
            `console.log("bound"); ${script}`,
          ],
          stdout: "piped",
          stderr: "inherit",
        }).spawn();
        const reader = holder.stdout.pipeThrough(new TextDecoderStream()).getReader();
        assert.match((await reader.read()).value ?? "", /bound/);
        try {
          const pool = await PoolProcess.start(config);
          try {
            await pool.ready();
            await waitFor(
              "the pool answering on the socket",
              async () => (await poolGet(socket, "/health"))?.status === 200,
            );
            const taken = diagLines(pool.stderr).find((l) => l.msg.includes("stale socket"));
            assert.equal(taken?.level, "warn", pool.stderr);
            assert.match(
              taken!.msg,
              new RegExp(
                `removed a stale socket at ${socket} \\(nothing answered within 2000 ms\\)`,
              ),
            );
            assert.equal((await Deno.stat(socket)).mode! & 0o777, 0o600);
          } finally {
            await pool.stop();
          }
        } finally {
          await reader.cancel();
          holder.kill("SIGKILL");
          await holder.status;
        }
      });
    },
    60_000,
  );
}

boundedTest(
  "torpool: a file that is not a socket, or an open folder, refuses the start as one JSON line",
  async () => {
    await withPoolFolder(async (dir, config, socket) => {
      await Deno.mkdir(join(dir, "run"), { mode: 0o700 });
      await Deno.writeTextFile(socket, "not a socket\n");
      const notSocket = await PoolProcess.start(config);
      assert.equal((await notSocket.exited).code, 1);
      assertJsonOnly(notSocket.stderr);
      assert.match(
        messages(notSocket.stderr),
        new RegExp(`Cannot serve the pool API: ${socket} exists and is not a socket`),
      );
      assert.doesNotMatch(messages(notSocket.stderr), /spawned/);
      assert.equal(await Deno.readTextFile(socket), "not a socket\n", "the file is untouched");
      await Deno.remove(socket);
      await Deno.chmod(join(dir, "run"), 0o777);
      const open = await PoolProcess.start(config);
      assert.equal((await open.exited).code, 1);
      assertJsonOnly(open.stderr);
      assert.match(messages(open.stderr), /the folder is writable by others \(mode 777\)/);
    });
  },
  60_000,
);

boundedTest(
  "torpool: a deleted API socket is served again, mode 0600, with one warning line",
  async () => {
    await withPoolFolder(async (_dir, config, socket) => {
      const pool = await PoolProcess.start(config);
      try {
        await pool.ready();
        await waitFor("healthy", async () => (await poolGet(socket, "/health"))?.status === 200);
        await Deno.remove(socket);
        await waitFor(
          "the socket served again",
          async () => (await poolGet(socket, "/health"))?.status === 200,
          10_000,
        );
        // The line comes once the new socket is chmod-ed; the answer above may come first.
        const said = await waitFor(
          "the rebind said",
          () => {
            const lines = diagLines(pool.stderr).filter((l) => l.msg.includes("was deleted"));
            return lines.length > 0 && lines;
          },
        );
        assert.equal((await Deno.stat(socket)).mode! & 0o777, 0o600);
        assert.deepEqual(said.map((l) => [l.level, l.msg]), [[
          "warn",
          `torpool: api socket ${socket} was deleted: serving it again`,
        ]]);
        const stats = await poolGet(socket, "/stats");
        assert.equal(stats?.body.apiSocketRebinds, 1);
        assert.equal(stats?.body.spawns, 1, "the instances were not touched");
      } finally {
        const status = await pool.stop();
        assert.equal(status.code, 0, pool.stderr);
      }
      await assert.rejects(() => Deno.lstat(socket), Deno.errors.NotFound, "removed on exit");
    });
  },
  60_000,
);
