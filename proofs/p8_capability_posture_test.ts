/**
 * Proof 8 — capability posture: started with ambient authority the gateway refuses to boot
 * before binding anything; started with the flags `flags` prints it serves, holding exactly its
 * configured listeners; and that flag set leaves a connection to any host outside the granted set
 * failing with Deno's permission error.
 *
 * "Before binding anything" is shown while the process runs: the proof holds every lane port
 * itself, so a gateway that tried to bind first would die of "address already in use" instead of
 * naming the authority it refused — and with the exact flags, it does reach that bind.
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
import { explained, pollUntil } from "./fixtures/evidence.ts";
import { holdPorts, listeningAddresses } from "./fixtures/listening.ts";
import { messages } from "../tests/fixtures/diag_lines.ts";

const IN_USE = /address already in use|AddrInUse/;

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
    // Every lane port is taken while the gateway runs: binding any of them fails loudly.
    const held = holdPorts([publicPort, localPort, providerPort]);
    try {
      // The other side: the exact flags pass the audit and reach the bind, which fails on the
      // ports held here — so a refusal that names no bind came before any bind.
      const exactRun = await runCli(exact, ["serve", dir.config]);
      assert.equal(exactRun.code, 1, exactRun.stderr);
      assert.match(
        messages(exactRun.stderr),
        /Cannot bind lane "\w+" on 127\.0\.0\.1:\d+: address already in use/,
      );
      // Three at a time: each is a whole Deno start-up.
      const results = await inBatches(
        cases,
        3,
        ([, flags]) => runCli(flags, ["serve", dir.config]),
      );
      cases.forEach(([name, , reason], i) => {
        const result = results[i];
        assert.equal(result.code, 1, `${name}: ${result.stderr}`);
        assert.match(messages(result.stderr), reason, `${name}: ${result.stderr}`);
        assert.match(messages(result.stderr), /^boot refused/m, `${name}: ${result.stderr}`);
        assert.doesNotMatch(result.stderr, /listening on/, `${name}: ${result.stderr}`);
        assert.doesNotMatch(
          result.stderr,
          IN_USE,
          `${name}: it tried to bind before refusing:\n${result.stderr}`,
        );
      });
    } finally {
      held.close();
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
  await explained([gateway], async () => {
    assert.equal((await request(publicPort, { path: "/healthz" })).status, 200);
    assert.equal((await request(providerPort, { path: "/healthz" })).status, 200);
    assert.equal((await request(localPort, { path: "/healthz" })).status, 200);
    assert.doesNotMatch(gateway.stderr, /warning/);
    // While it serves, the process holds exactly its three listeners, nothing else.
    assert.deepEqual(
      await listeningAddresses(gateway.pid),
      [publicPort, localPort, providerPort].map((port) => `127.0.0.1:${port}`).sort(),
    );

    const probe = new URL("./fixtures/egress_probe.ts", import.meta.url).pathname;
    const outsidePort = (outside.addr as Deno.NetAddr).port;
    const run = await new Deno.Command(Deno.execPath(), {
      args: ["run", "--no-prompt", ...gateway.flags, probe, String(outsidePort)],
      stdout: "piped",
      stderr: "piped",
    }).output();
    const seen = JSON.parse(new TextDecoder().decode(run.stdout));
    assert.deepEqual(seen, { connect: "NotCapable", fetch: "NotCapable" });
  }).finally(async () => {
    outside.close();
    await accepting.catch(() => {});
    await gateway.dispose();
  });
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
    const log = {
      get stderr() {
        return lines.join("");
      },
    };
    await explained([log], async () => {
      await pollUntil(
        "the unaudited edge is ready",
        () => log.stderr.includes("portcullis: ready") || undefined,
      );
      // No provider_health listener is configured: the edge holds public and local_health only.
      assert.deepEqual(
        await listeningAddresses(child.pid),
        [publicPort, localPort].map((port) => `127.0.0.1:${port}`).sort(),
      );
      const response = await request(publicPort, { path: "/x", headers: [["Host", "shop.test"]] });
      assert.equal(response.status, 502);
      const envelope = JSON.parse(response.body);
      assert.equal(envelope.error.code, "upstream_unreachable");
      assert.doesNotMatch(response.body, new RegExp(String(upstreamPort)), "no address leaks");
      await pollUntil(
        "the gateway logs the refusal",
        () => log.stderr.includes("NotCapable") || undefined,
      );
      assert.match(log.stderr, /upstream_unreachable after 1 attempt\(s\): .*NotCapable/);
      assert.equal(connections, 0, "no connection reached the upstream");
    }).finally(async () => {
      child.kill("SIGTERM");
      await child.status;
      await reading;
    });
  } finally {
    upstream.close();
    await accepting.catch(() => {});
    await Deno.remove(dir.dir, { recursive: true });
  }
});

/** Maps `items` through `run`, at most `size` at a time, keeping their order. */
async function inBatches<T, R>(
  items: readonly T[],
  size: number,
  run: (item: T) => Promise<R>,
): Promise<R[]> {
  const out: R[] = [];
  for (let i = 0; i < items.length; i += size) {
    out.push(...await Promise.all(items.slice(i, i + size).map(run)));
  }
  return out;
}
