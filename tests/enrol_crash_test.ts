/**
 * Issue 32, finding 3: a node killed between the steps that write its key and certificate must
 * start again with a pair that works. The renewal (and registration) wrote `key.new` and `crt.new`
 * and renamed them into place, key first; killed between the renames, the node held a new key and
 * the old certificate and could not start again until it was provisioned anew.
 *
 * Real processes: a hub with the fleet CA and an edge, each under the flags `main.ts flags`
 * derives. The edge is first run under `strace` to learn the steps it takes on its key,
 * certificate, their `.new` files and its secret; then, for each step, run again and killed at it
 * (strace's fault injection), and started again without strace: it must come up, its hub poll
 * must be answered, and the pair on disk must be one the hub takes.
 */
import assert from "node:assert/strict";
import { stringify } from "yaml";
import { boundedTest } from "./fixtures/bounded_test.ts";
import { type Step, traced } from "./fixtures/crash_points.ts";
import { COVER } from "./fixtures/door.ts";
import { FleetProcess } from "./fixtures/fleet_process.ts";
import {
  derivedFlags,
  freePorts,
  Gateway,
  type LanePorts,
  MAIN,
  proofConfig,
} from "./fixtures/gateway.ts";
import { edgeStatus } from "./fixtures/hub.ts";
import { waitFor } from "./fixtures/in_process.ts";
import { ServedProcess } from "./fixtures/served_process.ts";

/** An edge's folder: its config, its files, the flags derived for it. */
interface Node {
  readonly nodeId: string;
  readonly dir: { readonly dir: string; readonly config: string };
  ports: LanePorts;
  readonly keyFile: string;
  readonly certFile: string;
  readonly secretFile: string;
  readonly flags: string[];
}

/**
 * Writes an edge that registers with `fleet` (a fresh secret from `hub add-node`), its key and
 * certificate in separate folders; `renew` makes its certificate due for renewal at every start.
 */
async function writeNode(fleet: FleetProcess, nodeId: string, renew: boolean): Promise<Node> {
  const added = await fleet.addNode(nodeId);
  assert.equal(added.code, 0, added.stderr);
  const dir = await Deno.makeTempDir({ prefix: "portcullis-node-" });
  await Deno.mkdir(`${dir}/keys`, { mode: 0o700 });
  await Deno.mkdir(`${dir}/certs`);
  await Deno.writeTextFile(`${dir}/hub-ca.pem`, fleet.rootPem);
  await Deno.copyFile(`${fleet.files.secretsDir}/${nodeId}.secret`, `${dir}/node.secret`);
  await Deno.chmod(`${dir}/node.secret`, 0o600);
  const [publicPort, localPort] = freePorts(2);
  const ports: LanePorts = { public: publicPort, local_health: localPort, provider_health: 0 };
  const config = proofConfig(ports, {
    node_id: nodeId,
    mode: "remote",
    hub: {
      url: fleet.hub.url,
      ca_file: "hub-ca.pem",
      cert_file: "certs/node.crt",
      key_file: "keys/node.key",
      register: { secret_file: "node.secret" },
      backoff_initial_ms: 100,
      backoff_max_ms: 500,
      ...(renew ? { renew_before_days: 400 } : {}),
    },
    cache_dir: "cache",
  });
  delete config.tenants_dir;
  await Deno.writeTextFile(`${dir}/config.yaml`, stringify(config));
  return {
    nodeId,
    dir: { dir, config: `${dir}/config.yaml` },
    ports,
    keyFile: `${dir}/keys/node.key`,
    certFile: `${dir}/certs/node.crt`,
    secretFile: `${dir}/node.secret`,
    flags: await derivedFlags(`${dir}/config.yaml`),
  };
}

/** The files whose steps are crash points. */
function pairFiles(node: Node): string[] {
  const { keyFile, certFile, secretFile } = node;
  return [keyFile, `${keyFile}.new`, certFile, `${certFile}.new`, secretFile];
}

/** Runs the edge under strace: to learn its steps (no `kill`), or killed at `kill`. */
function tracedEdge(node: Node, until: RegExp, kill?: Step) {
  const command = [Deno.execPath(), "run", "--no-prompt", ...node.flags, MAIN, "serve"];
  return traced([...command, node.dir.config], { paths: pairFiles(node), until, kill });
}

/**
 * Starts the edge again (no strace) and shows its pair works: it is ready, its own hub poll is
 * answered (connected, no error), the key and certificate on disk belong together and the hub
 * answers a poll made with them.
 */
async function assertUsable(fleet: FleetProcess, node: Node, what: string): Promise<Gateway> {
  // As every launcher starts it: the flags derived again from the config, on what the crash left
  // (`flags` refuses whatever `check` refuses, before the boot could complete the pair).
  const flags = await derivedFlags(node.dir.config).catch((error) => {
    throw new Error(`${what}: main.ts flags refused the node: ${error.message}`);
  });
  assert.deepEqual(flags, node.flags, `${what}: the same flags`);
  const edge = await Gateway.start(node.dir, node.ports, flags).catch((error) => {
    throw new Error(`${what}: the edge did not start again: ${error.message}`);
  });
  try {
    await waitFor(() => edgeStatus(edge), (s) => s.hub.connected && !s.hub.last_error, 15_000)
      .catch((error) => {
        throw new Error(`${what}: no hub poll answered: ${error.message}\n${edge.stderr}`);
      });
    const credentials = {
      keyPem: await Deno.readTextFile(node.keyFile),
      chainPem: await Deno.readTextFile(node.certFile),
    };
    const poll = await fleet.get("config", node.nodeId, credentials);
    assert.equal(poll.status, 200, `${what}: a poll with the pair on disk`);
    return edge;
  } catch (error) {
    await edge.stop();
    throw error;
  }
}

/** Steps with paths relative to the node's folder (so they apply to another node's). */
function relative(steps: readonly Step[], node: Node): Step[] {
  return steps.map((s) => ({ syscall: s.syscall, path: s.path.slice(node.dir.dir.length + 1) }));
}

/**
 * Kills the edge at each step of `steps` (paths relative to its folder) and shows it starts again
 * usable each time.
 */
async function killAtEach(
  fleet: FleetProcess,
  steps: readonly Step[],
  nodeFor: (index: number) => Promise<Node>,
  until: RegExp,
  settled: (node: Node, edge: Gateway, step: string) => Promise<void>,
): Promise<void> {
  for (const [index, relativeStep] of steps.entries()) {
    const node = await nodeFor(index);
    const step = { syscall: relativeStep.syscall, path: `${node.dir.dir}/${relativeStep.path}` };
    const what = `killed at ${step.syscall}(${relativeStep.path})`;
    const run = await tracedEdge(node, until, step);
    assert.ok(run.killed, `${what}: the kill did not land\n${run.stderr}`);
    const edge = await assertUsable(fleet, node, what);
    try {
      await settled(node, edge, `${relativeStep.syscall} ${relativeStep.path}`);
      if (PENDING_WHOLE.includes(`${relativeStep.syscall} ${relativeStep.path}`)) {
        assert.match(edge.stderr, /completed the node's key and certificate/, what);
      }
    } finally {
      await edge.stop();
    }
  }
}

/** Killed at these steps, the new pair is whole on disk: the next boot must complete it. */
const PENDING_WHOLE = [
  "fdatasync certs/node.crt.new",
  "rename keys/node.key.new",
  "rename certs/node.crt.new",
];

/** The steps that must be among those learnt: both files written, both renamed. */
function assertPairSteps(steps: readonly Step[], node: Node): void {
  for (const file of [node.keyFile, node.certFile]) {
    assert.ok(steps.some((s) => s.syscall === "write" && s.path === `${file}.new`), file);
    assert.ok(steps.some((s) => s.syscall === "rename" && s.path === `${file}.new`), file);
  }
}

boundedTest(
  "renewal killed at any step of writing the new pair leaves an edge that starts with a working certificate",
  async () => {
    const fleet = await FleetProcess.start({
      ca: { renew_before_days: 400, renew_interval_seconds: 0 },
    });
    const node = await writeNode(fleet, "edge-renew", true);
    try {
      const first = await Gateway.start(node.dir, node.ports, node.flags);
      await waitFor(() => first.stderr, (s) => /certificate renewed/.test(s), 15_000);
      await first.stop();
      const renewed = /certificate renewed/;
      const learnt = await tracedEdge(node, renewed);
      assertPairSteps(learnt.steps, node);
      const steps = relative(learnt.steps, node);
      await killAtEach(fleet, steps, () => Promise.resolve(node), renewed, async (_node, edge) => {
        // The edge renews again at start: that, too, is authenticated by the pair on disk.
        await waitFor(() => edge.stderr, (s) => /certificate renew/.test(s), 15_000);
        assert.doesNotMatch(edge.stderr, /certificate renewal failed/);
      });

      // The completion itself killed between its renames: the next boot completes the rest.
      const at = (syscall: string, file: string) => ({ syscall, path: `${file}.new` });
      assert.ok((await tracedEdge(node, renewed, at("fdatasync", node.certFile))).killed);
      const completing = await tracedEdge(node, /ready/, at("rename", node.certFile));
      assert.ok(completing.killed, completing.stderr);
      const edge = await assertUsable(fleet, node, "killed while completing");
      try {
        assert.match(edge.stderr, /completed the node's key and certificate/);
      } finally {
        await edge.stop();
      }
    } finally {
      await fleet.dispose();
      await Deno.remove(node.dir.dir, { recursive: true });
    }
  },
  300_000,
);

boundedTest(
  "registration killed at any step leaves an edge that starts registered, its secret gone",
  async () => {
    const fleet = await FleetProcess.start();
    const folders: string[] = [];
    const nodeFor = async (index: number) => {
      const node = await writeNode(fleet, `edge-reg-${index}`, false);
      folders.push(node.dir.dir);
      return node;
    };
    try {
      const registered = /registered with the hub/;
      const probe = await nodeFor(99);
      const learnt = await tracedEdge(probe, registered);
      assertPairSteps(learnt.steps, probe);
      assert.ok(learnt.steps.some((s) => s.syscall === "unlink" && s.path === probe.secretFile));
      await killAtEach(
        fleet,
        relative(learnt.steps, probe),
        nodeFor,
        registered,
        async (node, edge, step) => {
          await assert.rejects(Deno.stat(node.secretFile), Deno.errors.NotFound, step);
          if (step === "unlink node.secret") {
            assert.match(edge.stderr, /removed the registration secret/);
          }
          const issued = [...Deno.readDirSync(`${fleet.files.issuedDir}/${node.nodeId}`)];
          assert.equal(issued.length, 1, "one certificate for one secret");
        },
      );
    } finally {
      await fleet.dispose();
      for (const dir of folders) await Deno.remove(dir, { recursive: true });
    }
  },
  300_000,
);

boundedTest(
  "a door without hub.register killed between its renewal's renames starts with a working certificate",
  async () => {
    const fleet = await FleetProcess.start({
      doors: {},
      ca: { renew_before_days: 400, renew_interval_seconds: 0 },
    });
    const dir = await Deno.makeTempDir({ prefix: "portcullis-door-" });
    try {
      // Provisioned by hand (no `register`): its pair from the CA, its renewal due at every start.
      const pair = await fleet.enrol("door-1", "door");
      await Deno.writeTextFile(`${dir}/door.key`, pair.keyPem, { mode: 0o600 });
      await Deno.writeTextFile(`${dir}/door.crt`, pair.chainPem);
      await Deno.writeTextFile(`${dir}/hub-ca.pem`, fleet.rootPem);
      await Deno.writeTextFile(`${dir}/cover.html`, COVER);
      await Deno.writeTextFile(
        `${dir}/door.yaml`,
        stringify({
          role: "door",
          node_id: "door-1",
          listen: [{ hostname: "127.0.0.1", port: freePorts(1)[0] }],
          cover_file: "cover.html",
          hub: {
            url: fleet.hub.url,
            ca_file: "hub-ca.pem",
            cert_file: "door.crt",
            key_file: "door.key",
            backoff_initial_ms: 50,
            backoff_max_ms: 500,
            renew_before_days: 400,
          },
          cache_dir: "cache",
        }),
      );
      const flags = await derivedFlags(`${dir}/door.yaml`);
      const command = [Deno.execPath(), "run", "--no-prompt", ...flags, MAIN, "serve"];
      const step = { syscall: "rename", path: `${dir}/door.crt.new` };
      const paths = [`${dir}/door.key.new`, `${dir}/door.crt.new`];
      const run = await traced([...command, `${dir}/door.yaml`], {
        paths,
        until: /certificate renewed/,
        kill: step,
      });
      assert.ok(run.killed, run.stderr);
      const door = new ServedProcess(command[0], [...command.slice(1), `${dir}/door.yaml`]);
      try {
        await door.line(/door ready/);
        // Its renewal at start is authenticated by the pair on disk.
        await door.line(/certificate renew/);
        assert.doesNotMatch(door.stderr, /certificate renewal failed/);
        assert.match(door.stderr, /completed the node's key and certificate/);
        const credentials = {
          keyPem: await Deno.readTextFile(`${dir}/door.key`),
          chainPem: await Deno.readTextFile(`${dir}/door.crt`),
        };
        assert.equal((await fleet.get("doors", "door-1", credentials)).status, 200);
      } finally {
        await door.dispose();
      }
    } finally {
      await fleet.dispose();
      await Deno.remove(dir, { recursive: true });
    }
  },
  60_000,
);
