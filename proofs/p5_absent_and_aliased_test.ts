/**
 * Proof 5 — absent authority and aliased grants: with no protected listener the gateway behaves
 * exactly like a single-listener gateway (same answers, no protected port bound, the whole pool
 * general); two lanes aliasing one address refuse the boot with a diagnostic naming both lanes,
 * before anything is bound.
 *
 * Evidence from outside the gateway: what each client saw, the addresses each running process
 * holds (read from the kernel while it serves, so "no protected port is bound" covers every
 * port), the flags `flags` derives, and, for refused boots, lane ports this proof holds itself —
 * a gateway that tried to bind before refusing would die of "address already in use" instead.
 */
import assert from "node:assert/strict";
import {
  checkConfig,
  derivedFlags,
  freePorts,
  Gateway,
  type LanePorts,
  proofConfig,
  runCli,
  writeConfig,
} from "../tests/fixtures/gateway.ts";
import { request, type RequestSpec } from "../tests/fixtures/http_client.ts";
import { explained } from "./fixtures/evidence.ts";
import { holdPorts, listeningAddresses } from "./fixtures/listening.ts";
import { messages } from "../tests/fixtures/diag_lines.ts";
import { formatFlags, requiredGrants } from "../src/boot/flags.ts";
import { type EdgeConfig, loadConfig } from "../src/config/load.ts";

const PROBES: RequestSpec[] = [
  { path: "/healthz" },
  { path: "/", headers: [["Host", "demo.test"]] },
  { path: "/old/a?b=1", headers: [["Host", "demo.test"]] },
  { path: "/missing", headers: [["Host", "demo.test"]] },
  { path: "/", headers: [["Host", "unknown.test"]] },
  { path: "/v1/ledger", headers: [["Host", "demo.test"]] },
  { path: "/metrics", headers: [["Host", "demo.test"]] },
  { path: "/readyz" },
];

const IN_USE = /address already in use|AddrInUse/;

/** A response with its per-request parts (request id, date) removed. */
async function observe(port: number, spec: RequestSpec): Promise<string> {
  const response = await request(port, spec);
  const id = response.headers["x-request-id"];
  const headers = Object.entries(response.headers)
    .filter(([name]) => !["x-request-id", "date"].includes(name))
    .sort();
  return JSON.stringify([response.status, headers, response.body.replaceAll(id, "<id>")]);
}

/** The addresses `--allow-net=` grants in a flag list. */
function netGrants(flags: readonly string[]): string[] {
  const net = flags.find((flag) => flag.startsWith("--allow-net="));
  return net ? net.slice("--allow-net=".length).split(",").sort() : [];
}

/**
 * The full config with its protected listeners taken out. Their ledger settings stay, with
 * `reserve` set to `reserve` — what an operator who commented out two listeners would leave.
 */
function withoutProtectedListeners(
  full: Record<string, unknown>,
  reserve: number,
): Record<string, unknown> {
  const config = structuredClone(full);
  const lanes = config.lanes as Record<string, unknown>;
  delete lanes.local_health;
  delete lanes.provider_health;
  const ledgerLanes = (config.ledger as { lanes: Record<string, Record<string, unknown>> }).lanes;
  ledgerLanes.local_health.reserve = reserve;
  ledgerLanes.provider_health.reserve = reserve;
  return config;
}

Deno.test("proof 5: without protected listeners the public lane behaves identically", async () => {
  const [fullPublic, local, provider, alonePublic] = freePorts(4);
  const full = { public: fullPublic, local_health: local, provider_health: provider };
  const alone = { public: alonePublic, local_health: 0, provider_health: 0 };
  const fullConfig = proofConfig(full);
  const fullGateway = await Gateway.start(await writeConfig(fullConfig), full);
  // The same config, public moved to its own port, protected listeners removed.
  const aloneConfig = withoutProtectedListeners(fullConfig, 0);
  (aloneConfig.lanes as Record<string, unknown>).public = {
    listen: [{ hostname: "127.0.0.1", port: alonePublic }],
  };
  const aloneDir = await writeConfig(aloneConfig);
  let aloneGateway: Gateway | undefined;
  await explained(() => [fullGateway, aloneGateway], async () => {
    aloneGateway = await Gateway.start(aloneDir, alone);
    // Authority offered: only the public listener is granted, nothing for the absent lanes.
    assert.deepEqual(netGrants(aloneGateway.flags), [`127.0.0.1:${alonePublic}`]);
    assert.deepEqual(
      netGrants(fullGateway.flags),
      [`127.0.0.1:${fullPublic}`, `127.0.0.1:${local}`, `127.0.0.1:${provider}`].sort(),
    );
    // Authority held, read from the kernel while both serve: the full gateway holds its three
    // listeners (so the reading sees protected listeners when there are some); the gateway
    // without protected listeners holds the public one and nothing else, on any port.
    assert.deepEqual(
      await listeningAddresses(fullGateway.pid),
      [fullPublic, local, provider].map((port) => `127.0.0.1:${port}`).sort(),
    );
    assert.deepEqual(await listeningAddresses(aloneGateway.pid), [`127.0.0.1:${alonePublic}`]);

    for (const spec of PROBES) {
      assert.equal(await observe(alonePublic, spec), await observe(fullPublic, spec), spec.path);
    }
    const check = await checkConfig(aloneDir.config);
    assert.equal(check.code, 0, check.stderr);
    assert.match(check.stdout, /lane public:/);
    assert.doesNotMatch(check.stdout, /lane (local_health|provider_health)/);
    assert.match(check.stdout, /16 slots \(general pool 16\)/, "no reserve is carved");

    // The other side: a reserve left for an absent lane is refused, naming it (fail closed).
    const reserved = await writeConfig(withoutProtectedListeners(aloneConfig, 1));
    try {
      const refused = await checkConfig(reserved.config);
      assert.equal(refused.code, 1, refused.stdout);
      assert.match(refused.stderr, /Lane "local_health" has no listener, so its reserve must be 0/);
      assert.match(
        refused.stderr,
        /Lane "provider_health" has no listener, so its reserve must be 0/,
      );
    } finally {
      await Deno.remove(reserved.dir, { recursive: true });
    }
  }).finally(async () => {
    await aloneGateway?.dispose();
    await Deno.remove(aloneDir.dir, { recursive: true }).catch(() => {});
    await fullGateway.dispose();
  });
});

const ALIASES: [string, (p: number) => Record<string, unknown>][] = [
  ["the same address", (p) => ({ hostname: "127.0.0.1", port: p })],
  ["0.0.0.0 and 127.0.0.1 on one port", (p) => ({ hostname: "0.0.0.0", port: p })],
];

/** A config whose provider_health listener is `listener`; public and local on their own ports. */
function laneConfig(ports: LanePorts, listener: Record<string, unknown>) {
  const config = proofConfig(ports);
  (config.lanes as Record<string, unknown>).provider_health = { listen: [listener] };
  return config;
}

/** The permission flags of a config's grants, as `flags` printed them before it ran `check`. */
function grantFlags(config: EdgeConfig): string[] {
  return formatFlags(requiredGrants(config)).split(" ");
}

for (const [name, providerListener] of ALIASES) {
  Deno.test(`proof 5: lanes aliasing ${name} refuse the boot, naming both lanes`, async () => {
    const [publicPort, localPort] = freePorts(2);
    const ports = { public: publicPort, local_health: localPort, provider_health: publicPort };
    const dir = await writeConfig(laneConfig(ports, providerListener(publicPort)));
    // Both lane ports are taken while the gateway runs: a bind on either fails loudly (the
    // next proof shows it does).
    const held = holdPorts([publicPort, localPort]);
    try {
      const check = await checkConfig(dir.config);
      assert.equal(check.code, 1, check.stdout);
      assert.match(check.stderr, /lane "provider_health".*overlaps lane "public"/);
      // `flags` refuses what `check` refuses: the grants of the config as written, derived here.
      const serve = await runCli(grantFlags(await loadConfig(dir.config)), ["serve", dir.config]);
      assert.equal(serve.code, 1, serve.stderr);
      assert.match(messages(serve.stderr), /lane "provider_health".*overlaps lane "public"/);
      assert.doesNotMatch(serve.stderr, /listening/);
      assert.doesNotMatch(serve.stderr, IN_USE, `it tried to bind first:\n${serve.stderr}`);
    } finally {
      held.close();
      await Deno.remove(dir.dir, { recursive: true });
    }
  });
}

Deno.test("proof 5: without an alias the same boot goes on to bind (the other side)", async () => {
  const [publicPort, localPort, providerPort] = freePorts(3);
  const ports = { public: publicPort, local_health: localPort, provider_health: providerPort };
  const dir = await writeConfig(laneConfig(ports, { hostname: "127.0.0.1", port: providerPort }));
  const held = holdPorts([publicPort, localPort]);
  try {
    // Distinct addresses pass the check and reach the bind, which meets the ports held here —
    // so a refusal that names no bind, with the same ports held, came before any bind.
    const bound = await runCli(await derivedFlags(dir.config), ["serve", dir.config]);
    assert.equal(bound.code, 1, bound.stderr);
    assert.doesNotMatch(bound.stderr, /overlaps/);
    assert.match(messages(bound.stderr), IN_USE, bound.stderr);
  } finally {
    held.close();
    await Deno.remove(dir.dir, { recursive: true });
  }
});

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
    // The other side: two distinct paths pass the same check.
    lanes.provider_health = { listen: [{ path: "run/provider.sock" }] };
    const distinct = await writeConfig(config);
    try {
      const passed = await checkConfig(distinct.config);
      assert.equal(passed.code, 0, passed.stderr);
    } finally {
      await Deno.remove(distinct.dir, { recursive: true });
    }
  } finally {
    await Deno.remove(dir.dir, { recursive: true });
  }
});
