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

Deno.test("proof 8: a backend outside the granted set gets a 502 caused by Deno's permission error", async () => {
  const [publicPort, localPort] = freePorts(2);
  const ports = { public: publicPort, local_health: localPort, provider_health: 0 };
  const upstream = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const upstreamPort = (upstream.addr as Deno.NetAddr).port;
  let connections = 0;
  const accepting = (async () => {
    for await (const conn of upstream) {
      connections++;
      conn.close();
    }
  })();
  const config = proofConfig(ports, { egress: { direct: [`127.0.0.1:${upstreamPort}`] } });
  const tenant = {
    host: "shop.test",
    routes: [{
      name: "api",
      match: { prefix: "/" },
      proxy: { backends: [{ url: `http://127.0.0.1:${upstreamPort}` }] },
    }],
  };
  const dir = await writeConfig(config, [tenant]);
  try {
    const exact = await derivedFlags(dir.config);
    assert.ok(exact.join(" ").includes(`127.0.0.1:${upstreamPort}`), "flags grant the upstream");
    const withheld = exact.map((flag) =>
      flag.startsWith("--allow-net=") ? flag.replace(`,127.0.0.1:${upstreamPort}`, "") : flag
    );
    assert.ok(!withheld.join(" ").includes(String(upstreamPort)));

    // The audited CLI refuses to start without the grant, naming it.
    const refused = await runCli(withheld, ["serve", dir.config]);
    assert.equal(refused.code, 1);
    assert.match(
      refused.stderr,
      new RegExp(
        `Missing --allow-net=127\\.0\\.0\\.1:${upstreamPort} \\(needed by the direct upstream\\)`,
      ),
    );

    // Bypassing the audit (library use), Deno itself refuses the connection.
    const script = new URL("./fixtures/unaudited_edge.ts", import.meta.url).pathname;
    const child = new Deno.Command(Deno.execPath(), {
      args: ["run", "--no-prompt", ...withheld, script, dir.config],
      stdout: "null",
      stderr: "piped",
    }).spawn();
    const lines: string[] = [];
    const reading = (async () => {
      for await (const chunk of child.stderr.pipeThrough(new TextDecoderStream())) {
        lines.push(chunk);
      }
    })();
    try {
      const until = Date.now() + 20_000;
      while (!lines.join("").includes("portcullis: ready")) {
        if (Date.now() > until) throw new Error(`not ready: ${lines.join("")}`);
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      const response = await request(publicPort, { path: "/x", headers: [["Host", "shop.test"]] });
      assert.equal(response.status, 502);
      const envelope = JSON.parse(response.body);
      assert.equal(envelope.error.code, "upstream_unreachable");
      assert.doesNotMatch(response.body, new RegExp(String(upstreamPort)), "no address leaks");
      const until2 = Date.now() + 5000;
      while (!lines.join("").includes("NotCapable") && Date.now() < until2) {
        await new Promise((resolve) => setTimeout(resolve, 25));
      }
      assert.match(lines.join(""), /upstream_unreachable after 1 attempt\(s\): .*NotCapable/);
      assert.equal(connections, 0, "no connection reached the upstream");
    } finally {
      child.kill("SIGTERM");
      await child.status;
      await reading;
    }
  } finally {
    upstream.close();
    await accepting.catch(() => {});
    await Deno.remove(dir.dir, { recursive: true });
  }
});
