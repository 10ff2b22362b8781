/**
 * Proof 8 — capability posture: started with ambient authority the gateway refuses to boot
 * before binding anything; started with the flags `flags` prints it serves; and that flag set
 * leaves a connection to any host outside the granted set failing with Deno's permission error.
 */
import assert from "node:assert/strict";
import {
  derivedFlags,
  freePorts,
  Gateway,
  proofConfig,
  runCli,
  writeConfig,
} from "../tests/fixtures/gateway.ts";
import { request } from "../tests/fixtures/http_client.ts";
import { connectionRefused } from "../tests/fixtures/in_process.ts";

Deno.test("proof 8: ambient or over-broad authority refuses the boot before any bind", async () => {
  const [publicPort, localPort, providerPort] = freePorts(3);
  const ports = { public: publicPort, local_health: localPort, provider_health: providerPort };
  const dir = await writeConfig(proofConfig(ports));
  try {
    const exact = await derivedFlags(dir.config);
    const reads = exact.filter((flag) => !flag.startsWith("--allow-net"));
    const cases: [string, string[], RegExp][] = [
      ["-A", ["-A"], /Unscoped --allow-net \(or -A\)/],
      ["--allow-all", ["--allow-all"], /--allow-run grants running programs/],
      ["unscoped --allow-net", ["--allow-net", ...reads], /Unscoped --allow-net/],
      [
        "every port of the host",
        ["--allow-net=127.0.0.1", ...reads],
        /grants every port of 127\.0\.0\.1/,
      ],
      [
        "a CIDR reaching other hosts",
        ["--allow-net=0.0.0.0/0", ...reads],
        /reaches 203\.0\.113\.77:443/,
      ],
      ["--allow-run", [...exact, "--allow-run"], /--allow-run/],
      ["--allow-ffi", [...exact, "--allow-ffi"], /--allow-ffi/],
      ["unscoped --allow-write", [...exact, "--allow-write"], /Unscoped --allow-write/],
      [
        "a missing listener grant",
        [`--allow-net=127.0.0.1:${publicPort},127.0.0.1:${localPort}`, ...reads],
        new RegExp(
          `Missing --allow-net=127\\.0\\.0\\.1:${providerPort} \\(needed by the lane "provider_health" listener\\)`,
        ),
      ],
    ];
    for (const [name, flags, reason] of cases) {
      const result = await runCli(flags, ["serve", dir.config]);
      assert.equal(result.code, 1, `${name}: ${result.stderr}`);
      assert.match(result.stderr, reason, name);
      assert.match(result.stderr, /portcullis: boot refused/, name);
      assert.doesNotMatch(result.stderr, /listening on/, name);
      for (const port of [publicPort, localPort, providerPort]) {
        assert.equal(await connectionRefused(port), true, `${name}: port ${port} stayed unbound`);
      }
    }
  } finally {
    await Deno.remove(dir.dir, { recursive: true });
  }
});

Deno.test("proof 8: the derived flags serve, and reach nothing outside the granted set", async () => {
  const [publicPort, localPort, providerPort] = freePorts(3);
  const ports = { public: publicPort, local_health: localPort, provider_health: providerPort };
  const gateway = await Gateway.start(await writeConfig(proofConfig(ports)), ports);
  const outside = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const accepting = (async () => {
    for await (const conn of outside) conn.close();
  })();
  try {
    assert.equal((await request(publicPort, { path: "/healthz" })).status, 200);
    assert.equal((await request(providerPort, { path: "/healthz" })).status, 200);
    assert.doesNotMatch(gateway.stderr, /warning/);

    const probe = new URL("./fixtures/egress_probe.ts", import.meta.url).pathname;
    const outsidePort = (outside.addr as Deno.NetAddr).port;
    const run = await new Deno.Command(Deno.execPath(), {
      args: ["run", "--no-prompt", ...gateway.flags, probe, String(outsidePort)],
      stdout: "piped",
      stderr: "piped",
    }).output();
    const seen = JSON.parse(new TextDecoder().decode(run.stdout));
    assert.deepEqual(seen, { connect: "NotCapable", fetch: "NotCapable" });
  } finally {
    outside.close();
    await accepting.catch(() => {});
    await gateway.dispose();
  }
});
