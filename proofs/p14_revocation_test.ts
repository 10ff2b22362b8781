/**
 * Proof 14 — a revoked edge stops: real `main.ts` processes under the flags `flags` prints. The
 * operator makes the fleet CA (`hub init-ca`) and a node secret (`hub add-node`); the edge
 * registers at boot with that secret and serves its hub-fed tenants under load. Then `hub revoke`
 * puts its certificate on the CRL. The claim: within `grace_seconds` + 60 s (the hub's CRL look
 * interval) the edge stops taking public connections; it kept serving during the grace; a request
 * in flight when the grace ended is answered; its cached runtime set is gone from disk; it says why
 * (`revoked.json`, exit status 3); and started again it refuses to run without contacting the hub,
 * until it is provisioned anew — after which it registers and serves again.
 *
 * @module
 */
import assert from "node:assert/strict";
import { stringify } from "yaml";
import { boundedTest } from "../tests/fixtures/bounded_test.ts";
import {
  Gateway,
  type LanePorts,
  proofConfig,
  runCli,
  TEST_PRIVATE,
} from "../tests/fixtures/gateway.ts";
import { disposeAll, getFrom, HubProcess, tenantText } from "../tests/fixtures/hub.ts";
import { freePorts } from "../tests/fixtures/gateway.ts";
import { connectionRefused, waitFor } from "../tests/fixtures/in_process.ts";
import { HeldUpstream, proxyTenant } from "./fixtures/held_upstream.ts";
import { parseDiag } from "../tests/fixtures/diag_lines.ts";

const GRACE_SECONDS = 2;
/** The hub's CRL look interval (its default): the bound the claim allows beyond the grace. */
const LOOK_MS = 60_000;
const CA_FLAGS = ["--allow-read", "--allow-write", "--ignore-env=LOG_STREAM,LOG_TOKENS"];

/** Writes the edge's folder: registration secret, remote mode, a direct upstream for held.test. */
async function writeEdge(hub: HubProcess, upstreamPort: number) {
  const dir = await Deno.makeTempDir({ prefix: "portcullis-edge-" });
  const [publicPort, localPort] = freePorts(2);
  const ports: LanePorts = { public: publicPort, local_health: localPort, provider_health: 0 };
  const config = proofConfig(ports, {
    node_id: "edge-1",
    mode: "remote",
    hub: {
      url: hub.url,
      ca_file: "hub-ca.pem",
      cert_file: "node.crt",
      key_file: "node.key",
      register: { secret_file: "node.secret" },
      grace_seconds: GRACE_SECONDS,
      backoff_initial_ms: 100,
      backoff_max_ms: 1000,
    },
    cache_dir: "cache",
    egress: { direct: [`127.0.0.1:${upstreamPort}`], allow_private: [...TEST_PRIVATE] },
  });
  delete config.tenants_dir;
  await Deno.writeTextFile(`${dir}/config.yaml`, stringify(config));
  await Deno.copyFile(`${hub.dir}/ca/root.crt`, `${dir}/hub-ca.pem`);
  return { dir: { dir, config: `${dir}/config.yaml` }, ports };
}

/** The time stamped on the edge's "revoked by the hub" line, in ms since the epoch. */
function revokedLineTime(stderr: string): number {
  const line = stderr.split("\n").map(parseDiag).find((d) => d?.msg.includes("revoked by the hub"));
  assert.ok(line, `no "revoked by the hub" line:\n${stderr}`);
  const at = Date.parse(line.time);
  assert.ok(Number.isFinite(at), `unreadable time on ${JSON.stringify(line)}`);
  return at;
}

/**
 * Hands the edge a fresh secret made by `hub add-node` (mode 0600); `--reprovision` for an id
 * revoked before (a new incarnation: its old certificates stay refused).
 */
async function provision(hub: HubProcess, edgeDir: string, again = false): Promise<void> {
  const args = ["hub", "add-node", hub.config, "edge-1", ...(again ? ["--reprovision"] : [])];
  const added = await runCli(CA_FLAGS, args);
  assert.equal(added.code, 0, added.stderr);
  await Deno.copyFile(`${hub.dir}/ca/secrets/edge-1.secret`, `${edgeDir}/node.secret`);
  await Deno.chmod(`${edgeDir}/node.secret`, 0o600);
}

boundedTest(
  "proof 14: a revoked edge stops within grace_seconds + 60 s, its cache gone",
  async () => {
    const upstream = await HeldUpstream.start();
    const hub = await HubProcess.write({
      https: true,
      nodes: [],
      runtime: {
        "site.test.yaml": tenantText("site.test", "site"),
        "held.test.yaml": stringify(proxyTenant("held.test", upstream.port)),
      },
      edit(config) {
        const api = config.api as Record<string, unknown>;
        delete api.tokens_dir;
        api.tls = { cert_file: "ca/hub.crt", key_file: "ca/hub.key" };
        config.ca = { dir: "ca" };
      },
    });
    let edge: Gateway | undefined;
    let written: Awaited<ReturnType<typeof writeEdge>> | undefined;
    try {
      const made = await runCli(CA_FLAGS, ["hub", "init-ca", hub.config, "--name", "127.0.0.1"]);
      assert.equal(made.code, 0, made.stderr);
      written = await writeEdge(hub, upstream.port);
      assert.equal((await Deno.stat(`${hub.dir}/ca/intermediate.key`)).mode! & 0o777, 0o600);
      // The hub runs with the intermediate only: its flags never grant the root key.
      await Deno.rename(`${hub.dir}/ca/root.key`, `${hub.dir}/root.key.offline`);
      await provision(hub, written.dir.dir);
      await hub.restart();
      assert.ok(!hub.flags.join(" ").includes("root.key"), hub.flags.join(" "));

      const { dir: edgeDir, ports } = written;
      edge = await Gateway.start(edgeDir, ports);
      const flags = edge.flags.join(" ");
      for (const file of ["node.crt", "node.key", "node.secret"]) {
        assert.match(flags, new RegExp(`--allow-write=[^ ]*${file}`), `write grant for ${file}`);
      }
      assert.match(edge.stderr, /registered with the hub as edge edge-1/);
      await assert.rejects(Deno.stat(`${edgeDir.dir}/node.secret`), Deno.errors.NotFound);
      assert.equal((await Deno.stat(`${edgeDir.dir}/node.key`)).mode! & 0o777, 0o600);
      const cache = `${edgeDir.dir}/cache`;
      await waitFor(() => getFrom(edge!, "site.test"), (r) => r.status === 200, 10_000).catch(
        (error) => Promise.reject(new Error(`${error.message}\n${edge!.stderr}\n${hub.stderr}`)),
      );
      const cachedBefore = [...Deno.readDirSync(cache)].map((e) => e.name);
      assert.ok(cachedBefore.length > 0, "the hub's set is cached on disk");

      // Load: one request every 50 ms, noting when each was answered and how.
      const seen: { at: number; status: number | "refused" }[] = [];
      let loading = true;
      const load = (async () => {
        while (loading) {
          const status = await getFrom(edge!, "site.test").then(
            (r) => r.status,
            () => "refused" as const,
          );
          seen.push({ at: Date.now(), status });
          await new Promise((resolve) => setTimeout(resolve, 50));
        }
      })();

      const revokedAt = Date.now();
      const revoked = await runCli(CA_FLAGS, ["hub", "revoke", hub.config, "edge-1"]);
      assert.equal(revoked.code, 0, revoked.stderr);
      await waitFor(() => edge!.stderr, (s) => /revoked by the hub/.test(s), LOOK_MS + 5000);
      // When the edge heard, by the time on its own log line: this test reads the line later, and
      // on a busy machine late enough to see less than the grace between hearing and stopping.
      const heardAt = revokedLineTime(edge.stderr);
      // A request in flight across the end of the grace.
      const inFlight = getFrom(edge, "held.test", "/in-flight");
      await waitFor(() => upstream.held, (n) => n === 1, 5000);
      const stopped = await waitFor(
        () => connectionRefused(edge!.ports.public),
        (refused) => refused,
        GRACE_SECONDS * 1000 + LOOK_MS + 5000,
      );
      const stoppedAt = Date.now();
      assert.ok(stopped);
      upstream.release();
      const answered = await inFlight;
      assert.equal(answered.status, 200, "the in-flight request finished");
      assert.equal(answered.body, "upstream answered /in-flight");
      await waitFor(() => seen.some((s) => s.status === "refused"), (refused) => refused, 5000);
      loading = false;
      await load;

      const took = stoppedAt - revokedAt;
      assert.ok(took <= GRACE_SECONDS * 1000 + LOOK_MS, `stopped ${took} ms after the revocation`);
      assert.ok(stoppedAt - heardAt >= GRACE_SECONDS * 1000 - 100, "it served out the grace");
      const duringGrace = seen.filter((s) =>
        s.at > heardAt && s.at < heardAt + GRACE_SECONDS * 900
      );
      assert.ok(duringGrace.length > 0 && duringGrace.every((s) => s.status === 200));

      const status = await edge.exited();
      assert.equal(status.code, 3, edge.stderr);
      assert.deepEqual([...Deno.readDirSync(cache)].map((e) => e.name), ["revoked.json"]);
      const marker = JSON.parse(await Deno.readTextFile(`${cache}/revoked.json`));
      assert.equal(marker.node_id, "edge-1");
      assert.match(marker.reason, /node_revoked/);

      // Started again, it refuses to run, and does not ask the hub.
      const polls = (await hub.status()).nodes.find((n) => n.node_id === "edge-1")!.polls;
      const again = await runCli(edge.flags, ["serve", edgeDir.config]);
      assert.equal(again.code, 1);
      assert.match(again.stderr, /revoked by its hub/);
      assert.equal((await hub.status()).nodes.find((n) => n.node_id === "edge-1")!.polls, polls);

      // Provisioned anew (old certificate removed, a new secret for a new incarnation — a plain
      // add-node on a revoked id refuses): it registers and serves.
      const plain = await runCli(CA_FLAGS, ["hub", "add-node", hub.config, "edge-1"]);
      assert.equal(plain.code, 1);
      assert.match(plain.stderr, /is revoked.*--reprovision/);
      await Deno.remove(`${edgeDir.dir}/node.crt`);
      await provision(hub, edgeDir.dir, true);
      const back = await Gateway.start(edgeDir, ports, [...edge.flags]);
      edge = back;
      await waitFor(() => getFrom(back, "site.test"), (r) => r.status === 200, 10_000);
      assert.match(back.stderr, /provisioned again after a revocation/);
    } finally {
      upstream.release();
      await upstream.stop();
      await disposeAll(edge, hub);
      if (written) await Deno.remove(written.dir.dir, { recursive: true }).catch(() => {});
    }
  },
  150_000,
);
