/**
 * Proof 16 — no socket without an owner: no request can end a request worker or the process.
 *
 * node's HTTP server removes its own `error` listener from a socket before it emits `upgrade`; on
 * the main issue 31 started from, one `GET /` with `Upgrade: websocket` whose client reset the
 * connection after the first bytes of the answer stopped a public request worker, and with
 * `shared_event_loop` the whole process. Here the real gateway runs as a subprocess under the flags
 * `main.ts flags` derives, in each isolate layout — `workers: 1`, `workers: 2` and
 * `shared_event_loop: true` (this proof sets them itself, so the matrix runs it once) — with a
 * tenant proxying to a real upstream (plain answers, long bodies, 101 echo tunnels, resets of its
 * own): one gateway with a plain public listener and SNI passthrough beside it, one whose public
 * listener speaks TLS and offers HTTP/2. Every request kind the gateway accepts is left at every
 * stage, with a reset and with a FIN (tests/fixtures/abrupt_http1.ts, abrupt_tls.ts). Afterwards,
 * from outside:
 *
 * - no worker stopped and the process still runs (its log has no `stopped` or `Uncaught`);
 * - a client whose upstream reset its tunnel or body, or whose passthrough backend reset, was
 *   closed rather than left hanging;
 * - every lane answers: the public lane through fresh connections (ten, so both workers are hit;
 *   TLS and HTTP/2 too; passthrough reaches its backend), local_health `/readyz` and `/v1/health`,
 *   provider_health `/healthz`;
 * - the ledger balances once quiet (`completed + cancelled == admitted`, nothing outstanding, no
 *   public connection left open), and the owners met the resets
 *   (`portcullis_connection_errors_total` counted them);
 * - no upstream socket is left in use (`/v1/health` `connections.upstream`: none active,
 *   connecting or tunnelling): the ledger balances even when a released reservation's upstream
 *   exchange still holds its socket, so it cannot see that leak on its own.
 *
 * The kinds include requests pipelined with an `Upgrade` behind them, left while the answers
 * before it are owed (tests/fixtures/abrupt_pipelined.ts): before the `Upgrade` waited its turn,
 * each such connection left seven upstream sockets open for good, and a POST's answer arrived
 * inside the tunnel of the `Upgrade` pipelined behind it.
 *
 * @module
 */
import assert from "node:assert/strict";
import { LEAVINGS } from "../tests/fixtures/abrupt_client.ts";
import {
  abruptConfig,
  type AbruptPeers,
  abruptTenants,
  connectionErrors,
  type EdgeKind,
  lanesAnswer,
  quiet,
  quietTerms,
  startAbruptPeers,
} from "../tests/fixtures/abrupt_edge.ts";
import { http1Scenarios } from "../tests/fixtures/abrupt_http1.ts";
import { pipelinedUpgradeScenarios } from "../tests/fixtures/abrupt_pipelined.ts";
import { runScenarios, type Targets } from "../tests/fixtures/abrupt_scenarios.ts";
import { passthroughScenarios, tlsScenarios } from "../tests/fixtures/abrupt_tls.ts";
import { freePorts, Gateway, proofConfig, writeConfig } from "../tests/fixtures/gateway.ts";
import { noneHeld, upstreamSocketsWhen } from "../tests/fixtures/upstream_sockets.ts";

/** The isolate layouts a gateway can run in. */
const MODES: readonly { name: string; config: Record<string, unknown> }[] = [
  { name: "workers: 1", config: { workers: 1 } },
  { name: "workers: 2", config: { workers: 2 } },
  { name: "shared_event_loop", config: { workers: 1, shared_event_loop: true } },
];

/** Every kind at every stage, for both gateways. */
const SCENARIOS = [
  ...http1Scenarios("plain"),
  ...pipelinedUpgradeScenarios("plain"),
  ...passthroughScenarios(),
  ...http1Scenarios("tls"),
  ...pipelinedUpgradeScenarios("tls"),
  ...tlsScenarios(),
];

for (const mode of MODES) {
  Deno.test(`proof 16 (${mode.name}): no reset or FIN at any stage ends a worker or the process`, async () => {
    const peers = await startAbruptPeers();
    try {
      const [plain, secure] = await Promise.all([
        bootGateway(mode.config, peers, "plain"),
        bootGateway(mode.config, peers, "tls"),
      ]);
      try {
        const targets: Targets = {
          plain: plain.gateway.ports.public,
          tls: secure.gateway.ports.public,
          passthrough: plain.passthrough,
          hellos: peers.hellos,
        };
        const findings = await runScenarios(SCENARIOS, targets, LEAVINGS);
        for (const { gateway, kind } of [plain, secure]) await stillStanding(gateway, kind);
        assert.deepEqual(findings, [], findings.join("\n"));
        for (const { gateway, kind } of [plain, secure]) {
          await lanesAnswer(gateway.ports, targets, kind);
          const reading = await gateway.ledgerWhen(quiet, 20_000);
          assert.ok(quiet(reading), `${kind}: not quiet: ${quietTerms(reading)}\n${tail(gateway)}`);
          const sockets = await upstreamSocketsWhen(gateway.ports.local_health);
          assert.ok(
            noneHeld(sockets),
            `${kind}: upstream sockets held: ${JSON.stringify(sockets)}`,
          );
        }
        const errors = await connectionErrors(plain.gateway.ports.local_health);
        assert.ok(errors > 0, `the owners counted ${errors} connection errors`);
        assert.ok(peers.upstream.heads.length > 0, "the upstream was reached");
        assert.ok(peers.resetBackend.resets > 0, "the passthrough backend reset connections");
      } finally {
        await plain.gateway.dispose();
        await secure.gateway.dispose();
      }
    } finally {
      await peers.stop();
    }
  });
}

/** Boots one gateway of a mode under its derived flags. */
async function bootGateway(
  mode: Record<string, unknown>,
  peers: AbruptPeers,
  kind: EdgeKind,
): Promise<{ gateway: Gateway; kind: EdgeKind; passthrough: number }> {
  const [publicPort, localPort, providerPort, passthrough] = freePorts(4);
  const ports = { public: publicPort, local_health: localPort, provider_health: providerPort };
  const config = proofConfig(ports, mode);
  abruptConfig(config, peers, kind, passthrough);
  const gateway = await Gateway.start(await writeConfig(config, abruptTenants(peers, kind)), ports);
  return { gateway, kind, passthrough };
}

/** No worker stopped and the process runs. */
async function stillStanding(gateway: Gateway, kind: EdgeKind): Promise<void> {
  const exited = await Promise.race([
    gateway.exited().then(() => true),
    new Promise<false>((resolve) => setTimeout(() => resolve(false), 200)),
  ]);
  assert.equal(exited, false, `the ${kind} gateway exited:\n${tail(gateway)}`);
  const fatal = gateway.stderr.split("\n").filter((line) => /stopped|Uncaught|panicked/.test(line));
  assert.deepEqual(fatal, [], `the ${kind} gateway lost an isolate:\n${tail(gateway)}`);
}

function tail(gateway: Gateway): string {
  return gateway.stderr.split("\n").slice(-30).join("\n");
}
