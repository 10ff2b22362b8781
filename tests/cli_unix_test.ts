/**
 * The CLI with a Unix socket lane: `flags` derives `unix:<path>` net plus read and write on the
 * path, and `serve` under exactly those flags answers on the socket and removes it on exit.
 */
import assert from "node:assert/strict";
import {
  derivedFlags,
  freePorts,
  Gateway,
  proofConfig,
  runCli,
  writeConfig,
} from "./fixtures/gateway.ts";
import { unixRequest } from "./fixtures/unix_request.ts";
import { messages } from "./fixtures/diag_lines.ts";

async function unixGet(socket: string, path: string): Promise<string> {
  return await unixRequest(socket, path);
}

function unixConfig(publicPort: number) {
  const config = proofConfig({ public: publicPort, local_health: 1, provider_health: 0 });
  (config.lanes as Record<string, unknown>).local_health = { listen: [{ path: "run/local.sock" }] };
  return config;
}

Deno.test("serve with a Unix socket lane runs under exactly the derived flags", async () => {
  const [publicPort] = freePorts(1);
  const dir = await writeConfig(unixConfig(publicPort));
  await Deno.mkdir(`${dir.dir}/run`);
  const socket = `${dir.dir}/run/local.sock`;
  const flags = await derivedFlags(dir.config);
  assert.ok(flags.includes(`--allow-net=127.0.0.1:${publicPort},unix:${socket}`), flags.join(" "));
  assert.ok(flags.some((f) => f.startsWith("--allow-read=") && f.includes(socket)));
  assert.ok(flags.includes(`--allow-write=${socket}`));

  const gateway = await Gateway.start(dir, {
    public: publicPort,
    local_health: 0,
    provider_health: 0,
  });
  try {
    const health = await unixGet(socket, "/v1/health");
    assert.match(health, /^HTTP\/1\.1 200 /);
    assert.match(health, /"status":"ok"/);
    const denied = await unixGet(socket, "/");
    assert.match(denied, /^HTTP\/1\.1 404 /);
    assert.match(denied, /"code":"route_not_allowed"/);
    assert.equal((await gateway.stop()).code, 0);
    await assert.rejects(() => Deno.lstat(socket), Deno.errors.NotFound, "socket removed on exit");
  } finally {
    await gateway.dispose();
  }
});

Deno.test("serve refuses a Unix socket lane whose folder does not exist, naming it", async () => {
  const [publicPort] = freePorts(1);
  const dir = await writeConfig(unixConfig(publicPort));
  try {
    const result = await runCli(await derivedFlags(dir.config), ["serve", dir.config]);
    assert.equal(result.code, 1);
    assert.match(
      messages(result.stderr),
      /Cannot bind lane "local_health" on unix:.*\/run\/local\.sock: its folder does not exist/,
    );
  } finally {
    await Deno.remove(dir.dir, { recursive: true });
  }
});
