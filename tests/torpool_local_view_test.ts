/**
 * Local mode with a supervised pool: an edge process whose `egress.socks` are a `portcullis torpool`
 * process's ports and whose `egress.torpool` names its API socket (both under their derived
 * flags) reads the pool's view every probe interval.
 * An instance the pool does not list as live has its breaker opened before any request finds it
 * dead, and comes back through the half-open probe once the pool has respawned it on its port.
 *
 * @module
 */
import assert from "node:assert/strict";
import { boundedTest } from "./fixtures/bounded_test.ts";
import { join } from "node:path";
import {
  freePorts,
  Gateway,
  MAIN,
  proofConfig,
  READ_ONLY,
  runCli,
  writeConfig,
} from "./fixtures/gateway.ts";
import { getFrom } from "./fixtures/hub.ts";
import { json, request } from "./fixtures/http_client.ts";
import { freeRanges, makePoolDir, waitFor } from "./fixtures/torpool_harness.ts";
import { unixRequest } from "./fixtures/unix_request.ts";
import { UpstreamFixture } from "./fixtures/upstream.ts";
import { formatFlags, requiredGrants } from "../src/boot/flags.ts";
import { loadConfig } from "../src/config/load.ts";
import { ConfigError, formatPath } from "../src/config/problems.ts";
import { MINIMAL, writeConfigText } from "./fixtures/config_files.ts";

/** `GET /v1/egress` of a gateway process. */
async function egressOf(edge: Gateway): Promise<EgressView> {
  const response = await request(edge.ports.local_health, { path: "/v1/egress" });
  return json<EgressView>(response);
}

interface EgressView {
  readonly instances: { state: string; requests: number; failures: number }[];
}

boundedTest(
  "local torpool view: a dead instance's breaker opens from the pool's view with no request spent or failed, and closes after its respawn",
  async () => {
    const where = await makePoolDir();
    const ranges = freeRanges(2);
    const poolFile = join(where.dir, "pool.yaml");
    const socket = join(where.dir, "run", "pool.sock");
    await Deno.writeTextFile(
      poolFile,
      `role: torpool\ntor_binary: ${where.tor}\ndata_dir: data\napi_socket: run/pool.sock\n` +
        `socks_base_port: ${ranges.socks}\ncontrol_base_port: ${ranges.control}\n` +
        "min_instances: 2\nmax_instances: 2\nprobe_interval_ms: 200\ndead_refusal_ms: 1000\n",
    );
    const upstream = await UpstreamFixture.start();
    const flags = (await runCli(READ_ONLY, ["flags", poolFile])).stdout.trim().split(" ");
    const pool = new Deno.Command(Deno.execPath(), {
      args: ["run", "--no-prompt", ...flags, MAIN, "torpool", poolFile],
      stdin: "null",
      stdout: "null",
      stderr: "null",
    }).spawn();
    let edge: Gateway | undefined;
    try {
      const live = async () => {
        try {
          const reply = await unixRequest(socket, "/backends");
          return (JSON.parse(reply.split("\r\n\r\n")[1]).backends as unknown[]).length;
        } catch {
          return 0;
        }
      };
      await waitFor("two live instances", async () => (await live()) === 2, 30_000);
      const ports = freePorts(2);
      const lanePorts = { public: ports[0], local_health: ports[1], provider_health: 0 };
      const dir = await writeConfig(
        proofConfig(lanePorts, {
          // One isolate: its /v1/egress is the egress that carries the requests.
          shared_event_loop: true,
          egress: {
            socks: [0, 1].map((i) => ({ hostname: "127.0.0.1", port: ranges.socks + i })),
            torpool: { api_socket: socket },
            probe_interval_ms: 200,
          },
        }),
        [{
          host: "shop.test",
          routes: [{
            name: "all",
            match: { prefix: "/" },
            proxy: { backends: [{ url: `http://127.0.0.1:${upstream.port}` }] },
          }],
        }],
      );
      edge = await Gateway.start(dir, lanePorts);
      const get = async (path: string) => (await getFrom(edge!, "shop.test", path)).status;
      for (let i = 0; i < 6; i++) assert.equal(await get(`/echo?i=${i}`), 200);

      const stats = JSON.parse((await unixRequest(socket, "/stats")).split("\r\n\r\n")[1]);
      const victim = stats.each.find((i: { index: number }) => i.index === 0);
      const before = (await egressOf(edge)).instances[0];
      Deno.kill(victim.pid, "SIGKILL");
      // The pool's view opens the breaker: no client request was spent finding the death.
      const open = await waitFor("instance 0's breaker open", async () => {
        const view = await egressOf(edge!);
        return view.instances[0].state !== "healthy" && view;
      }, 10_000);
      assert.equal(open.instances[0].requests, before.requests, JSON.stringify(open.instances[0]));
      assert.equal(open.instances[0].failures, before.failures);
      for (let i = 0; i < 6; i++) assert.equal(await get(`/echo?after=${i}`), 200);

      // Respawned on its port: the half-open probe closes the breaker again.
      await waitFor("instance 0 live again", async () => (await live()) === 2, 30_000);
      let last: unknown;
      await waitFor(
        "instance 0's breaker closed",
        async () => {
          await get("/echo?back=1");
          const view = await egressOf(edge!);
          last = view;
          return view.instances[0].state === "healthy";
        },
        10_000,
        () => last,
      );
    } finally {
      await edge?.dispose();
      pool.kill("SIGTERM");
      await pool.status;
      await upstream.stop();
      await Deno.remove(where.dir, { recursive: true });
    }
  },
  60_000,
);

Deno.test("local torpool view: the edge is granted the pool's socket (net, read, write) and nothing else of it", async () => {
  const file = await writeConfigText(
    MINIMAL +
      "egress:\n  socks: [{ hostname: 127.0.0.1, port: 19050 }]\n" +
      "  torpool: { api_socket: /run/pool/pool.sock }\n",
  );
  const flags = formatFlags(requiredGrants(await loadConfig(file)));
  assert.match(flags, /--allow-net=[^ ]*127\.0\.0\.1:19050,unix:\/run\/pool\/pool\.sock/);
  assert.match(flags, /--allow-read=[^ ]*\/run\/pool\/pool\.sock/);
  assert.match(flags, /--allow-write=\/run\/pool\/pool\.sock/);
});

Deno.test("local torpool view: egress.torpool beside a transport to the hub is a config error naming it", async () => {
  const file = await writeConfigText(
    MINIMAL +
      "egress:\n  torpool: { api_socket: /run/pool/pool.sock }\n" +
      "  transport: { kind: wireguard, hub: 10.0.0.1, ports: [9050] }\n",
  );
  const refused = await loadConfig(file).catch((error) => error);
  assert.ok(refused instanceof ConfigError, String(refused));
  assert.deepEqual(refused.problems.map((p) => formatPath(p.path)), ["egress.torpool"]);
  assert.match(refused.problems[0].message, /a local Tor pool's socket is for local mode/);
});
