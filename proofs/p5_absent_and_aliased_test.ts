/**
 * Proof 5 — absent authority and aliased grants: with no protected listener the gateway behaves
 * exactly like a single-listener gateway (same answers, no protected port bound, the whole pool
 * general); two lanes aliasing one address refuse the boot with a diagnostic naming both lanes,
 * before anything is bound.
 */
import assert from "node:assert/strict";
import {
  checkConfig,
  derivedFlags,
  freePorts,
  Gateway,
  proofConfig,
  runCli,
  writeConfig,
} from "../tests/fixtures/gateway.ts";
import { request, type RequestSpec } from "../tests/fixtures/http_client.ts";
import { connectionRefused } from "../tests/fixtures/in_process.ts";

const PROBES: RequestSpec[] = [
  { path: "/healthz" },
  { path: "/", headers: [["Host", "demo.test"]] },
  { path: "/old/a?b=1", headers: [["Host", "demo.test"]] },
  { path: "/missing", headers: [["Host", "demo.test"]] },
  { path: "/", headers: [["Host", "unknown.test"]] },
  { path: "/v1/ledger", headers: [["Host", "demo.test"]] },
];

/** A response with its per-request parts (request id, date) removed. */
async function observe(port: number, spec: RequestSpec): Promise<string> {
  const response = await request(port, spec);
  const id = response.headers["x-request-id"];
  const headers = Object.entries(response.headers)
    .filter(([name]) => !["x-request-id", "date"].includes(name))
    .sort();
  return JSON.stringify([response.status, headers, response.body.replaceAll(id, "<id>")]);
}

Deno.test("proof 5: without protected listeners the public lane behaves identically", async () => {
  const [fullPublic, local, provider, alonePublic, unusedLocal, unusedProvider] = freePorts(6);
  const full = { public: fullPublic, local_health: local, provider_health: provider };
  const alone = { public: alonePublic, local_health: 0, provider_health: 0 };
  const fullGateway = await Gateway.start(await writeConfig(proofConfig(full)), full);
  const aloneDir = await writeConfig(proofConfig(alone));
  const aloneGateway = await Gateway.start(aloneDir, alone);
  try {
    assert.ok(!aloneGateway.flags.join(" ").includes(String(unusedLocal)));
    for (const spec of PROBES) {
      assert.equal(await observe(alonePublic, spec), await observe(fullPublic, spec), spec.path);
    }
    assert.equal(await connectionRefused(unusedLocal), true);
    assert.equal(await connectionRefused(unusedProvider), true);
    const check = await checkConfig(aloneDir.config);
    assert.equal(check.code, 0, check.stderr);
    assert.match(check.stdout, /lane public:/);
    assert.doesNotMatch(check.stdout, /lane (local_health|provider_health)/);
    assert.match(check.stdout, /16 slots \(general pool 16\)/, "no reserve is carved");
  } finally {
    await aloneGateway.dispose();
    await fullGateway.dispose();
  }
});

const ALIASES: [string, (p: number, q: number) => Record<string, unknown>][] = [
  ["the same address", (p) => ({ hostname: "127.0.0.1", port: p })],
  ["0.0.0.0 and 127.0.0.1 on one port", (p) => ({ hostname: "0.0.0.0", port: p })],
];

for (const [name, providerListener] of ALIASES) {
  Deno.test(`proof 5: lanes aliasing ${name} refuse the boot, naming both lanes`, async () => {
    const [publicPort, localPort] = freePorts(2);
    const ports = { public: publicPort, local_health: localPort, provider_health: publicPort };
    const config = proofConfig(ports);
    (config.lanes as Record<string, unknown>).provider_health = {
      listen: [providerListener(publicPort, localPort)],
    };
    const dir = await writeConfig(config);
    try {
      const check = await checkConfig(dir.config);
      assert.equal(check.code, 1);
      assert.match(check.stderr, /lane "provider_health".*overlaps lane "public"/);
      const serve = await runCli(await derivedFlags(dir.config), ["serve", dir.config]);
      assert.equal(serve.code, 1);
      assert.match(serve.stderr, /lane "provider_health".*overlaps lane "public"/);
      assert.doesNotMatch(serve.stderr, /listening/);
      assert.equal(await connectionRefused(publicPort), true, "nothing was bound");
    } finally {
      await Deno.remove(dir.dir, { recursive: true });
    }
  });
}

Deno.test("proof 5: two lanes on one Unix socket path refuse the boot", async () => {
  const [publicPort] = freePorts(1);
  const config = proofConfig({ public: publicPort, local_health: 1, provider_health: 1 });
  const lanes = config.lanes as Record<string, unknown>;
  lanes.local_health = { listen: [{ path: "run/lanes.sock" }] };
  lanes.provider_health = { listen: [{ path: "./run/../run/lanes.sock" }] };
  const dir = await writeConfig(config);
  try {
    const check = await checkConfig(dir.config);
    assert.equal(check.code, 1);
    assert.match(check.stderr, /lane "provider_health".*overlaps lane "local_health"/);
  } finally {
    await Deno.remove(dir.dir, { recursive: true });
  }
});
