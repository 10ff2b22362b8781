/**
 * The local_health lane on a Unix socket, in process.
 *
 * Deno 2 checks Unix sockets against `--allow-net=unix:<path>`, which the test task does not grant
 * (it grants loopback TCP only). So the parent test re-runs this file in a child `deno test` that
 * holds the test task's permissions plus that one socket grant, and the socket scenarios run there
 * (they are ignored in the parent).
 *
 * @module
 */
import assert from "node:assert/strict";
import { BootError } from "../src/boot/boot_error.ts";
import type { LedgerSnapshot } from "../src/ledger/snapshot.ts";
import { exchange, json, parseResponses, renderRequest } from "./fixtures/http_client.ts";
import { bootEdge, type EdgeSetup, isBalanced, withEdge } from "./fixtures/in_process.ts";

const ROOT = new URL("../", import.meta.url).pathname;
const SOCKET_DIR = Deno.env.get("PORTCULLIS_TEST_SOCKET_DIR");
const IN_CHILD = SOCKET_DIR !== undefined;
const SOCKET = `${SOCKET_DIR}/local.sock`;
const CHILD_TESTS = 4;

Deno.test({
  name: "unix socket lane: the socket scenarios pass in a child granted --allow-net=unix:<path>",
  ignore: IN_CHILD,
  async fn() {
    const dir = await Deno.makeTempDir({ prefix: "portcullis-unix-" });
    try {
      const output = await new Deno.Command(Deno.execPath(), {
        args: [
          "test",
          "--no-prompt",
          "--allow-run",
          "--allow-read",
          "--allow-write",
          "--allow-env",
          `--allow-net=127.0.0.1,[::1],unix:${dir}/local.sock`,
          new URL(import.meta.url).pathname,
        ],
        cwd: ROOT,
        env: { PORTCULLIS_TEST_SOCKET_DIR: dir, NO_COLOR: "1" },
        stdin: "null",
        stdout: "piped",
        stderr: "piped",
      }).output();
      const text = new TextDecoder().decode(output.stdout) +
        new TextDecoder().decode(output.stderr);
      assert.equal(output.code, 0, text);
      assert.match(text, new RegExp(`ok \\| ${CHILD_TESTS} passed \\| 0 failed \\| 1 ignored`));
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});

const UNIX: EdgeSetup = {
  lanes: ["public"],
  edit: (config) => {
    config.lanes.local_health = { listen: [{ path: SOCKET }] };
    config.ledger.lanes.local_health = { reserve: 4, footprint_bytes: 16384, deadline_ms: 5000 };
  },
};

async function overSocket(path: string) {
  const [response] = parseResponses(await exchange({ path: SOCKET }, renderRequest({ path })));
  return response;
}

/** Leaves a socket file nobody listens on, as a crashed previous run would. */
async function leaveStaleSocket(): Promise<void> {
  const child = new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "--no-prompt",
      `--allow-read=${SOCKET}`,
      `--allow-write=${SOCKET}`,
      `--allow-net=unix:${SOCKET}`,
      "-",
    ],
    stdin: "piped",
    stdout: "piped",
    stderr: "null",
  }).spawn();
  const writer = child.stdin.getWriter();
  await writer.write(new TextEncoder().encode(
    `Deno.listen({ transport: "unix", path: ${JSON.stringify(SOCKET)} });\n` +
      `console.log("listening");\nsetInterval(() => {}, 1000);\n`,
  ));
  await writer.close();
  const reader = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
  let seen = "";
  while (!seen.includes("listening")) {
    const { value, done } = await reader.read();
    if (done) break;
    seen += value;
  }
  child.kill("SIGKILL");
  await reader.cancel();
  await child.status;
  assert.equal((await Deno.lstat(SOCKET)).isSocket, true, "a stale socket file is left");
}

Deno.test({
  name: "unix socket lane: local_health serves /healthz and /v1/ledger over its socket",
  ignore: !IN_CHILD,
  async fn() {
    await withEdge(UNIX, async (t) => {
      assert.ok(t.edge.listeners.some((l) => l.address === `unix:${SOCKET}`));
      const health = await overSocket("/healthz");
      assert.equal(health.status, 200);
      assert.deepEqual(json(health), { status: "ok" });
      const denied = await overSocket("/");
      assert.equal(denied.status, 404, "the socket is the local_health lane, not public");
      const ledger = json<LedgerSnapshot>(await overSocket("/v1/ledger"));
      assert.equal(ledger.excludes_observer, true);
      assert.equal(ledger.lanes.local_health.admitted, 2);
      assert.equal(ledger.lanes.local_health.denied_route, 1);
      assert.equal(ledger.lanes.public.admitted, 0);
      assert.equal(ledger.release_balanced, true);
    });
  },
});

Deno.test({
  name: "unix socket lane: a stale socket file from a previous run is replaced",
  ignore: !IN_CHILD,
  async fn() {
    await leaveStaleSocket();
    await withEdge(UNIX, async () => {
      const health = await overSocket("/healthz");
      assert.equal(health.status, 200);
    });
  },
});

Deno.test({
  name: "unix socket lane: the socket file is removed when the edge closes",
  ignore: !IN_CHILD,
  async fn() {
    const t = await bootEdge(UNIX);
    try {
      assert.equal((await Deno.lstat(SOCKET)).isSocket, true);
      assert.equal((await overSocket("/readyz")).status, 200);
    } finally {
      await t.dispose();
    }
    await assert.rejects(Deno.lstat(SOCKET), Deno.errors.NotFound);
    assert.ok(isBalanced(t.snapshot()));
  },
});

Deno.test({
  name: "unix socket lane: a live socket or a regular file at the path refuses the boot",
  ignore: !IN_CHILD,
  async fn() {
    const live = Deno.listen({ transport: "unix", path: SOCKET });
    try {
      const error = await bootEdge(UNIX).then((t) => t.dispose(), (e) => e);
      assert.ok(error instanceof BootError, `expected a BootError, got ${error}`);
      assert.deepEqual(error.reasons, [
        `Cannot bind lane "local_health" on unix:${SOCKET}: ${SOCKET} is in use by another process`,
      ]);
    } finally {
      live.close();
    }
    await Deno.writeTextFile(SOCKET, "not a socket");
    try {
      const error = await bootEdge(UNIX).then((t) => t.dispose(), (e) => e);
      assert.ok(error instanceof BootError, `expected a BootError, got ${error}`);
      assert.match(error.message, /local\.sock exists and is not a socket/);
      assert.equal(await Deno.readTextFile(SOCKET), "not a socket", "the file is left alone");
    } finally {
      await Deno.remove(SOCKET);
    }
  },
});
