/**
 * A public request worker that dies after boot is replaced, and readiness tells the truth meanwhile.
 * The real gateway runs as a subprocess under the flags `main.ts flags` derives, with its request
 * workers wrapped by tests/fixtures/dying_workers.ts so the test can make them die of an error
 * nothing catches (the way issue 31's upgrade socket killed one) — no hook in the gateway.
 *
 * With `workers: 1` and `2`, once every public worker is dead and every replacement dies at boot:
 * `/readyz` answers 503 naming the public lane, `/v1/health` says `ready: false`, the lane's live
 * workers (0 of N) and why, `/metrics` counts the workers by state; every death is one JSON line
 * with its restart delay, and the delays double. Let the replacements live and a replacement is
 * armed: `/readyz` is 200 again, the public lane serves, the ledger balances (what the dead held
 * was reclaimed), and SIGTERM still drains to exit 0. A replacement reads the config text the
 * owner booted with, not the file as an operator left it meanwhile. A worker that dies right after
 * each arming is retried with 100, 200, 400, 800 … ms, never in a tight loop. The backoff's reset
 * and the late-join check of the arm gate are tested on their own at the end.
 *
 * @module
 */
import assert from "node:assert/strict";
import { BootError } from "../src/boot/boot_error.ts";
import type { LaneListener } from "../src/boot/distinct.ts";
import { ArmGate } from "../src/edge/arm_gate.ts";
import { RestartBackoff } from "../src/edge/restart_backoff.ts";
import { MirrorRelay } from "../src/edge/mirror_relay.ts";
import type { ToWorker } from "../src/edge/worker_messages.ts";
import type { Generation } from "../src/live/generations.ts";
import type { ConfigProblem } from "../src/config/problems.ts";
import { type DiagLine, diagLines, parseDiag } from "./fixtures/diag_lines.ts";
import { DYING_WORKERS, KILL, RELEASE } from "./fixtures/dying_workers.ts";
import {
  ADMIN_AUTH,
  DEMO_TENANT,
  freePorts,
  Gateway,
  type LanePorts,
  proofConfig,
  writeConfig,
} from "./fixtures/gateway.ts";
import { json, request } from "./fixtures/http_client.ts";
import { isBalanced, waitFor, within } from "./fixtures/in_process.ts";
import { sumOf, valueOf } from "./fixtures/metrics_page.ts";
import { stringify } from "yaml";

/** A gateway with `workers` public workers, run by the dying-workers wrapper. */
async function dyingGateway(workers: number, dieAt: "boot" | "armed"): Promise<Gateway> {
  const [p, l, h] = freePorts(3);
  const ports: LanePorts = { public: p, local_health: l, provider_health: h };
  const dir = await writeConfig(proofConfig(ports, { workers }));
  return await Gateway.start(dir, ports, undefined, { script: [DYING_WORKERS, `--die=${dieAt}`] });
}

/** The gateway's diagnostic lines (Deno's own free text, if any, left out). */
function lines(gateway: Gateway): DiagLine[] {
  return gateway.stderr.split("\n").flatMap((line) => parseDiag(line) ?? []);
}

/** The death lines of public workers, in order. */
function deaths(gateway: Gateway): DiagLine[] {
  return lines(gateway).filter((line) => /^public request worker \d+ stopped/.test(line.msg));
}

/** The demo tenant's second generation: the same routes, a different home body. */
const V2_TENANT = {
  ...DEMO_TENANT,
  routes: [
    { name: "home", match: { path: "/" }, respond: { status: 200, body: "tenant-home-v2" } },
  ],
};

/** Waits until `/metrics` counts `count` public requests (every worker's, the dead ones' too). */
async function publicRequests(gateway: Gateway, count: number): Promise<void> {
  const counted = async () =>
    sumOf((await local(gateway, "/metrics")).body, "portcullis_requests_total", { lane: "public" });
  await waitFor(counted, (n) => n === count, 10_000);
}

/** `GET path` on local_health. */
function local(gateway: Gateway, path: string) {
  return request(gateway.ports.local_health, { path });
}

interface Health {
  ready: boolean;
  reason?: string;
  lanes: Record<string, { workers: number; live: number; restarts: number; up: boolean }>;
}

for (const workers of [1, 2]) {
  Deno.test(`worker restarts: workers: ${workers}, every public worker dead → /readyz 503 naming the lane, then a replacement serves`, async () => {
    const gateway = await dyingGateway(workers, "boot");
    try {
      const home = () =>
        request(gateway.ports.public, { path: "/", headers: [["Host", "demo.test"]] });
      const served = async (body: string) => {
        for (let i = 0; i < 6; i++) {
          const answer = await home();
          assert.equal(answer.status, 200);
          assert.equal(answer.body, body);
        }
      };
      await served("tenant-home");
      // A second generation goes live before the deaths: replacements must serve it, not the first.
      await Deno.writeTextFile(`${gateway.dir.dir}/tenants/demo.test.yaml`, stringify(V2_TENANT));
      const reload = await request(gateway.ports.local_health, {
        path: "/v1/config/reload",
        method: "POST",
        headers: [ADMIN_AUTH],
      });
      assert.equal(json<{ outcome: string }>(reload).outcome, "loaded");
      await served("tenant-home-v2");
      // Workers report their counters twice a second; what the dead counted must not be lost.
      await publicRequests(gateway, 12);
      assert.equal((await local(gateway, "/readyz")).status, 200);
      // A connection the public lane holds (a head never finished), reclaimed when its worker dies.
      const held = await Deno.connect({ hostname: "127.0.0.1", port: gateway.ports.public });
      await held.write(new TextEncoder().encode("GET / HTTP/1.1\r\nHost: demo.test\r\n"));
      await gateway.ledgerWhen((r) => r.lanes.public.connections === 1);

      Deno.kill(gateway.pid, KILL);
      const down = await waitFor(() => local(gateway, "/readyz"), (r) => r.status === 503, 10_000);
      const refusal = json<{ error: { code: string }; lanes_down: string[] }>(down);
      assert.equal(refusal.error.code, "lane_down");
      assert.deepEqual(refusal.lanes_down, ["public"]);
      const health = json<Health>(await local(gateway, "/v1/health"));
      assert.equal(health.ready, false);
      assert.equal(health.lanes.public.live, 0);
      assert.equal(health.lanes.public.workers, workers);
      assert.equal(health.lanes.public.up, false);
      assert.equal(health.lanes.local_health.up, true);
      assert.match(
        health.reason ?? "",
        new RegExp(`^lane "public" has no live request worker \\(0 of ${workers}; `),
      );
      const page = (await local(gateway, "/metrics")).body;
      assert.equal(
        valueOf(page, "portcullis_request_workers", { lane: "public", state: "live" }),
        0,
      );
      assert.equal(valueOf(page, "portcullis_ready"), 0);

      // Replacements die at boot while held: at least one more death per worker, delays doubling.
      await waitFor(() => deaths(gateway).length, (n) => n >= 2 * workers, 15_000);
      for (let slot = 1; slot <= workers; slot++) {
        const delays = deaths(gateway).filter((l) => l.request_worker === slot).map((l) =>
          l.delay_ms
        );
        assert.deepEqual(delays.slice(0, 2), [100, 200], `worker ${slot}: ${delays}`);
      }
      const reclaimed = deaths(gateway).reduce((n, l) => n + Number(l.reclaimed_connections), 0);
      assert.equal(reclaimed, 1, "the held connection was reclaimed once");
      held.close();
      // An operator's half-edited config file: a replacement runs the text the owner booted with.
      await Deno.writeTextFile(gateway.dir.config, "workers: [\n");

      Deno.kill(gateway.pid, RELEASE);
      await waitFor(() => local(gateway, "/readyz"), (r) => r.status === 200, 30_000);
      // Ready once one public worker serves; every slot is filled again soon after.
      const back = await waitFor(
        async () => json<Health>(await local(gateway, "/v1/health")),
        (h) => h.lanes.public.live === workers,
        30_000,
      );
      assert.equal(back.ready, true);
      assert.equal(back.lanes.public.live, workers);
      assert.ok(back.lanes.public.restarts >= workers, `restarts: ${back.lanes.public.restarts}`);
      const restarted = lines(gateway).filter((l) => /restarted and serving/.test(l.msg));
      assert.equal(restarted.length, back.lanes.public.restarts);
      await served("tenant-home-v2");
      await publicRequests(gateway, 18);
      const quiet = await gateway.ledgerWhen(
        (r) => isBalanced(r as never) && r.lanes.public.connections === 0,
      );
      assert.equal(quiet.completed + quiet.cancelled, quiet.admitted);
      assert.equal(quiet.outstanding, 0);
      assert.equal(quiet.lanes.public.connections, 0);
      const after = (await local(gateway, "/metrics")).body;
      assert.equal(
        valueOf(after, "portcullis_request_workers", { lane: "public", state: "live" }),
        workers,
      );
      assert.ok(
        valueOf(after, "portcullis_request_worker_deaths_total", { lane: "public" }) >= 2 * workers,
      );
      assert.equal((await gateway.stop("SIGTERM")).code, 0, gateway.stderr);
      // Deaths were reported as JSON lines, like everything else: no free text from Deno.
      assert.doesNotThrow(() => diagLines(gateway.stderr));
    } finally {
      await gateway.dispose();
    }
  });
}

Deno.test("worker restarts: a worker that dies right after every arming is retried with doubling delays until a drain", async () => {
  const gateway = await dyingGateway(1, "armed");
  try {
    Deno.kill(gateway.pid, KILL);
    const seen = await waitFor(() => deaths(gateway), (d) => d.length >= 5, 30_000);
    assert.deepEqual(seen.slice(0, 5).map((line) => line.delay_ms), [100, 200, 400, 800, 1600]);
    assert.deepEqual(seen.slice(0, 5).map((line) => line.deaths), [1, 2, 3, 4, 5]);
    // Each replacement was armed (one restart line each) before it died: never a tight loop.
    const restarts = lines(gateway).filter((l) => /restarted and serving/.test(l.msg)).length;
    assert.ok(restarts >= 4, `restarts: ${restarts}`);
    // A drain cancels the restart now pending (1.6 s away): the process exits, well before.
    const status = await within(gateway.stop("SIGTERM"), 10_000);
    assert.notEqual(status, "timeout", `no exit after SIGTERM:\n${gateway.stderr}`);
    assert.equal((status as Deno.CommandStatus).code, 0, gateway.stderr);
    const all = lines(gateway);
    const drained = all.findIndex((line) => line.msg === "drained" && line.worker === undefined);
    assert.ok(drained > 0, gateway.stderr);
    const after = all.slice(all.findIndex((line) => line.msg.startsWith("draining")));
    assert.deepEqual(after.filter((line) => /restart/.test(line.msg)), []);
  } finally {
    await gateway.dispose();
  }
});

Deno.test("worker restarts: the backoff doubles from 100 ms to 30 s and resets after a minute of serving", () => {
  const backoff = new RestartBackoff();
  const delays = Array.from({ length: 12 }, (_, i) => backoff.died(i));
  assert.deepEqual(delays, [
    100,
    200,
    400,
    800,
    1600,
    3200,
    6400,
    12800,
    25600,
    30000,
    30000,
    30000,
  ]);
  // Served 59.999 s: still doubling from the cap.
  backoff.served(1000);
  assert.equal(backoff.died(60_999), 30000);
  // Served a minute: a fresh start.
  backoff.served(100_000);
  assert.equal(backoff.died(160_000), 100);
  assert.equal(backoff.died(160_001), 200);
});

Deno.test("worker restarts: a replacement that binds a different listener set is refused", async () => {
  const tcp = (port: number) => ({ kind: "tcp" as const, hostname: "127.0.0.1", port });
  const at = (port: number): LaneListener[] => [{ lane: "public", index: 0, address: tcp(port) }];
  const gate = new ArmGate(3);
  assert.throws(() => gate.join(1, at(8080)), /Worker 1 joined before the boot was armed/);
  const owner: LaneListener[] = [{ lane: "local_health", index: 0, address: tcp(9901) }];
  const decided = Promise.all([
    gate.report(0, owner),
    gate.report(1, at(8080)),
    gate.report(2, at(8080)),
  ]);
  await decided;
  gate.join(1, at(8080));
  gate.join(2, at(8080));
  assert.throws(() => gate.join(1, at(8081)), (error: unknown) => {
    assert.ok(error instanceof BootError);
    assert.deepEqual(error.reasons, [
      'Worker 1 bound lane "public" listener 0 on 127.0.0.1:8081; the public workers at boot did not',
      'Worker 1 did not bind lane "public" listener 0 on 127.0.0.1:8080',
    ]);
    return true;
  });
  assert.throws(
    () => gate.join(2, [...at(8080), ...owner]),
    /Worker 2 bound lane "local_health" listener 0 on 127\.0\.0\.1:9901; only worker 0 may/,
  );
  assert.throws(() => gate.join(2, []), /Worker 2 did not bind lane "public" listener 0/);
});

Deno.test("worker restarts: a replacement joining while a generation is built gets it, and the swap waits for it", async () => {
  const generation = (number: number) =>
    ({
      number,
      hash: `hash-${number}`,
      loadedAt: 0,
      source: "directory",
      dir: "/tenants",
      texts: new Map([["demo.test.yaml", `# ${number}`]]),
      registry: { environment: { tables: { share: () => undefined } } },
    }) as unknown as Generation;
  const relay = new MirrorRelay();
  const sent = new Map<number, string[]>();
  const to = (index: number) => (message: ToWorker) =>
    sent.set(index, [
      ...sent.get(index) ?? [],
      `${message.type}${"number" in message ? ` ${message.number}` : ""}`,
    ]);
  relay.joined(1, to(1), 1);
  let settled: ConfigProblem[] | undefined;
  const building = relay.prepareElsewhere(generation(2)).then((problems) => settled = problems);
  // Worker 2 dies and its replacement is spawned from generation 1 while 2 is being built.
  relay.joined(2, to(2), 1);
  relay.prepared(1, 2, []);
  await new Promise((resolve) => setTimeout(resolve, 20));
  assert.equal(settled, undefined, "the swap waits for the replacement");
  relay.prepared(2, 2, [{ file: "/tenants/demo.test.yaml", path: [], message: "bad" }]);
  const problems = await building;
  assert.deepEqual(problems.map((p) => p.message), ["Worker 2 could not build it: bad"]);
  // One spawned from generation 2 is not sent it again.
  relay.joined(3, to(3), 2);
  const third = relay.prepareElsewhere(generation(3));
  relay.prepared(1, 3, []);
  relay.prepared(2, 3, []);
  relay.lost(3);
  assert.deepEqual(await third, []);
  assert.deepEqual(Object.fromEntries(sent), {
    1: ["prepare 2", "prepare 3"],
    2: ["prepare 2", "prepare 3"],
    3: ["prepare 3"],
  });
});
