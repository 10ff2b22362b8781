/**
 * Proof 11 — live config from a hub: real `main.ts hub` and remote-mode `main.ts serve` processes,
 * each under the flags its `flags` command prints, on loopback. Edges follow the hub's stream, keep
 * serving through a hub crash and catch up when it returns, refuse an invalid push (visible on hub
 * and edges), serve every request from one whole generation while tenants churn, boot from their
 * cache while the hub is away, and refuse ambient authority before binding anything.
 *
 * @module
 */
import assert from "node:assert/strict";
import { stringify } from "yaml";
import { boundedTest } from "../tests/fixtures/bounded_test.ts";
import { TestPki } from "../tests/fixtures/certs.ts";
import { derivedFlags, Gateway, runCli } from "../tests/fixtures/gateway.ts";
import { type RawResponse, renderRequest, writeAll } from "../tests/fixtures/http_client.ts";
import {
  disposeAll,
  edgeStatus,
  getFrom,
  HubProcess,
  startRemoteEdge,
  tenantText,
  writeRemoteEdge,
} from "../tests/fixtures/hub.ts";
import { connectionRefused, readResponse, waitFor } from "../tests/fixtures/in_process.ts";
import { messages } from "../tests/fixtures/diag_lines.ts";

const LIMIT_MS = 30_000;
const OLD = { "old.test.yaml": tenantText("old.test", "old") };

/** Waits until every edge serves the hub's live hash; returns that hash. */
async function inSync(hub: HubProcess, edges: readonly Gateway[], timeoutMs = 5000) {
  const { hash } = await hub.status();
  for (const edge of edges) {
    await waitFor(() => edgeStatus(edge), (s) => s.hash === hash && s.hub.connected, timeoutMs);
  }
  return hash;
}

/** Status and body of `GET /` for `host` on `edge`. */
async function get(edge: Gateway, host: string): Promise<[number, string]> {
  const response = await getFrom(edge, host);
  return [response.status, response.body];
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

boundedTest(
  "proof 11: two edges follow one hub, and a tenant added at the hub reaches both",
  async () => {
    const hub = await HubProcess.start({ runtime: OLD });
    const edges: Gateway[] = [];
    try {
      assert.deepEqual(hub.flags.filter((f) => f.startsWith("--allow-net")), [
        `--allow-net=127.0.0.1:${hub.apiPort},127.0.0.1:${hub.healthPort}`,
      ]);
      edges.push(await startRemoteEdge(hub, "edge-a"), await startRemoteEdge(hub, "edge-b"));
      const first = await inSync(hub, edges);
      for (const edge of edges) {
        assert.ok(
          edge.flags.join(" ").includes(`127.0.0.1:${hub.apiPort}`),
          "edge flags grant the hub",
        );
        assert.deepEqual(await get(edge, "old.test"), [200, "old"]);
        assert.equal((await get(edge, "new.test"))[0], 421);
      }

      const pushed = Date.now();
      await hub.writeTenant("new.test.yaml", tenantText("new.test", "new"));
      await waitFor(() => hub.status(), (s) => s.hash !== first && s.tenants === 2, 5000);
      const second = await inSync(hub, edges);
      const took = Date.now() - pushed;
      assert.ok(took < 3000, `the new tenant took ${took} ms to reach both edges`);
      for (const edge of edges) {
        const status = await edgeStatus(edge);
        assert.deepEqual([status.hash, status.source, status.tenants], [second, "hub", 2]);
        assert.deepEqual(await get(edge, "new.test"), [200, "new"]);
        assert.deepEqual(await get(edge, "old.test"), [200, "old"]);
        assert.match(edge.stderr, /config generation 2 loaded from hub/);
      }
      const nodes = (await hub.status()).nodes.map((n) => n.node_id).sort();
      assert.deepEqual(nodes, ["edge-a", "edge-b"]);
    } finally {
      await disposeAll(...edges, hub);
    }
  },
  LIMIT_MS,
);

boundedTest(
  "proof 11: edges serve through a hub crash mid-poll and catch up when it restarts",
  async () => {
    const hub = await HubProcess.start({ runtime: OLD });
    const edges: Gateway[] = [];
    let stop = false;
    const seen: string[] = [];
    let load: Promise<void> | undefined;
    try {
      edges.push(await startRemoteEdge(hub, "edge-a"), await startRemoteEdge(hub, "edge-b"));
      const before = await inSync(hub, edges);
      await waitFor(() => hub.status(), (s) => s.held_polls === 2, 5000);
      // The old tenant is asked for on both edges for the whole test.
      load = (async () => {
        while (!stop) {
          for (const edge of edges) {
            const [status, body] = await get(edge, "old.test").catch((e) => [0, String(e)]);
            seen.push(`${status} ${body}`);
          }
          await sleep(20);
        }
      })();

      await hub.kill();
      for (const edge of edges) {
        const status = await waitFor(() => edgeStatus(edge), (s) => !s.hub.connected, 5000);
        assert.ok(status.hub.last_error?.message, "the edge says why it lost the hub");
        assert.deepEqual([status.hash, status.source], [before, "hub"]);
      }
      await hub.writeTenant("late.test.yaml", tenantText("late.test", "late"));
      await sleep(300);
      for (const edge of edges) assert.equal((await get(edge, "late.test"))[0], 421);

      await hub.restart();
      const after = await inSync(hub, edges, 8000);
      assert.notEqual(after, before);
      for (const edge of edges) {
        assert.deepEqual(await get(edge, "late.test"), [200, "late"]);
        assert.equal((await edgeStatus(edge)).hub.failures, 0, "the backoff was reset");
      }
      stop = true;
      await load;
      assert.ok(seen.length >= 20, `only ${seen.length} requests ran across the crash`);
      assert.deepEqual(seen.filter((s) => s !== "200 old"), [], `${seen.length} requests`);
    } finally {
      stop = true;
      await load?.catch(() => {});
      await disposeAll(...edges, hub);
    }
  },
  LIMIT_MS,
);

boundedTest(
  "proof 11: an invalid tenant pushed at the hub is refused there and shown on the edge, which serves on",
  async () => {
    const hub = await HubProcess.start({ runtime: OLD });
    let edge: Gateway | undefined;
    try {
      edge = await startRemoteEdge(hub, "edge-a");
      await inSync(hub, [edge]);
      const before = await edgeStatus(edge);
      const bad = stringify({
        host: "bad.test",
        routes: [{ name: "home", match: { path: "/" }, respond: { status: 99, body: "x" } }],
      });
      await hub.writeTenant("bad.test.yaml", bad);

      const rejected = (await waitFor(() => hub.status(), (s) => s.last_rejected !== null, 5000))
        .last_rejected!;
      const problem = rejected.problems.find((p) => p.file.endsWith("/bad.test.yaml"));
      assert.ok(problem, JSON.stringify(rejected.problems));
      assert.equal(problem.path, "routes[0].respond.status");
      assert.equal(problem.value, 99);
      const hubNow = await hub.status();
      assert.deepEqual([hubNow.generation, hubNow.tenants], [1, 1], "the hub serves on");

      const seen = await waitFor(() => edgeStatus(edge!), (s) => s.hub.hub.last_rejected !== null);
      assert.deepEqual(seen.hub.hub.last_rejected, rejected, "the edge shows the hub's rejection");
      assert.deepEqual([seen.generation, seen.hash, seen.tenants], [
        before.generation,
        before.hash,
        1,
      ]);
      assert.equal(seen.last_rejected, null, "nothing invalid ever reached the edge");
      assert.deepEqual(await get(edge, "old.test"), [200, "old"]);
      assert.equal((await get(edge, "bad.test"))[0], 421);

      const reload = await hub.reload();
      assert.equal(reload.status, 422);
      assert.equal(JSON.parse(reload.body).outcome, "rejected");
    } finally {
      await disposeAll(edge, hub);
    }
  },
  LIMIT_MS,
);

/** Generation `n` of the churn: globals and both tenants carry `n`; `churn.test` only when odd. */
function churnSet(n: number): [Record<string, string>, string[]] {
  const files: Record<string, string> = {
    "globals.yaml": stringify({ policies: { security_headers: { add: { "x-gen": `${n}` } } } }),
    "stable.test.yaml": tenantText("stable.test", `${n}`),
  };
  if (n % 2 === 1) files["churn.test.yaml"] = tenantText("churn.test", `${n}`);
  return [files, n % 2 === 1 ? [] : ["churn.test.yaml"]];
}

/** One observed response: host, status, and its two generation markers (header and body). */
type Seen = { host: string; status: number; gen: string; body: string };

/** Asks for `host` on fresh connections until `done()`. */
async function freshLoop(edge: Gateway, host: string, done: () => boolean, out: Seen[]) {
  while (!done()) out.push(observe(host, await getFrom(edge, host)));
}

/** Asks for `host` over one kept-alive connection (reopened when the edge closes it). */
async function keptLoop(edge: Gateway, host: string, done: () => boolean, out: Seen[]) {
  const request = new TextEncoder().encode(renderRequest({ headers: [["Host", host]] }, true));
  while (!done()) {
    const conn = await Deno.connect({ hostname: "127.0.0.1", port: edge.ports.public });
    try {
      for (let closed = false; !closed && !done();) {
        await writeAll(conn, request);
        const response = await readResponse(conn);
        out.push(observe(host, response));
        closed = response.headers.connection === "close";
      }
    } finally {
      conn.close();
    }
  }
}

function observe(host: string, response: RawResponse): Seen {
  return { host, status: response.status, gen: response.headers["x-gen"], body: response.body };
}

boundedTest(
  "proof 11: under tenant churn at the hub every request is served whole from one generation",
  async () => {
    const [files] = churnSet(0);
    const hub = await HubProcess.start({ runtime: files });
    let edge: Gateway | undefined;
    try {
      edge = await startRemoteEdge(hub, "edge-a");
      await inSync(hub, [edge]);
      let stop = false;
      const done = () => stop;
      const seen: Seen[] = [];
      const errors: string[] = [];
      const loops = [
        freshLoop(edge, "stable.test", done, seen),
        freshLoop(edge, "churn.test", done, seen),
        keptLoop(edge, "stable.test", done, seen),
        keptLoop(edge, "churn.test", done, seen),
      ].map((loop) => loop.catch((error) => void errors.push(String(error))));
      let n = 0;
      for (const started = Date.now(); Date.now() - started < 3000;) {
        await hub.swap(...churnSet(++n));
        await sleep(150);
      }
      // The hub reads its folder after a debounce: wait until the edge serves the last set (under
      // load the hub may still be loading it), then until both agree on its hash.
      await waitFor(
        () => get(edge!, "stable.test"),
        ([s, body]) => s === 200 && body === `${n}`,
        15_000,
      );
      const last = await inSync(hub, [edge], 15_000);
      await sleep(100);
      stop = true;
      await Promise.all(loops);

      assert.deepEqual(errors, [], "no connection failed");
      const status = await edgeStatus(edge);
      assert.equal(status.hash, last);
      assert.ok(status.generation >= 8, `only ${status.generation} generations went live`);
      assert.deepEqual(await get(edge, "stable.test"), [200, `${n}`]);
      const stable = seen.filter((s) => s.host === "stable.test");
      const churn = seen.filter((s) => s.host === "churn.test");
      assert.ok(
        stable.length > 100 && churn.length > 100,
        `${stable.length}/${churn.length} requests`,
      );
      assert.deepEqual(
        stable.filter((s) => s.status !== 200),
        [],
        "the stable tenant never failed",
      );
      assert.deepEqual(churn.filter((s) => s.status !== 200 && s.status !== 421), []);
      assert.ok(churn.some((s) => s.status === 421) && churn.some((s) => s.status === 200));
      const mixed = seen.filter((s) => s.status === 200 && s.gen !== s.body);
      assert.deepEqual(mixed.slice(0, 3), [], `${mixed.length} responses mix two generations`);
      const generations = new Set(stable.map((s) => s.body));
      assert.ok(generations.size >= 5, `requests saw only ${generations.size} generations`);
    } finally {
      await disposeAll(edge, hub);
    }
  },
  LIMIT_MS,
);

boundedTest(
  "proof 11: an edge restarted while the hub is down serves its cached generation",
  async () => {
    const hub = await HubProcess.start({ runtime: OLD });
    let first: Gateway | undefined;
    let second: Gateway | undefined;
    try {
      first = await startRemoteEdge(hub, "edge-a");
      const hash = await inSync(hub, [first]);
      assert.equal((await first.stop()).code, 0);
      await hub.kill();

      second = await Gateway.start(first.dir, first.ports);
      const status = await edgeStatus(second);
      assert.deepEqual([status.source, status.hash, status.tenants], ["cache", hash, 1]);
      assert.deepEqual(await get(second, "old.test"), [200, "old"]);
      const away = await waitFor(() => edgeStatus(second!), (s) => s.hub.last_error !== null, 5000);
      assert.equal(away.hub.connected, false);
      assert.deepEqual(await get(second, "old.test"), [200, "old"]);
      assert.match(second.stderr, /ready: node edge-a, 2 lanes, 1 tenants/);
    } finally {
      await disposeAll(second, first, hub);
    }
  },
  LIMIT_MS,
);

boundedTest(
  "proof 11: a hub or a remote edge started with ambient authority refuses to boot, binding nothing",
  async () => {
    const hub = await HubProcess.write({ runtime: OLD });
    const edge = await writeRemoteEdge(hub, "edge-a");
    try {
      const reads = (await derivedFlags(hub.config)).filter((flag) =>
        !flag.startsWith("--allow-net")
      );
      const cases: [string, string[], string, number[]][] = [
        ["hub with -A", ["-A"], hub.config, [hub.apiPort, hub.healthPort]],
        ["hub with unscoped --allow-net", ["--allow-net", ...reads], hub.config, [hub.apiPort]],
        ["edge with -A", ["-A"], edge.dir.config, [edge.ports.public, edge.ports.local_health]],
      ];
      for (const [name, flags, config, ports] of cases) {
        const verb = config === hub.config ? "hub" : "serve";
        const result = await runCli(flags, [verb, config]);
        assert.equal(result.code, 1, `${name}: ${result.stderr}`);
        assert.match(messages(result.stderr), /^boot refused/m, name);
        assert.match(result.stderr, /Unscoped --allow-net/, name);
        assert.doesNotMatch(result.stderr, /listening on|ready/, name);
        for (const port of ports) {
          assert.equal(await connectionRefused(port), true, `${name}: ${port}`);
        }
      }
      await assert.rejects(Deno.stat(`${edge.dir.dir}/cache`), Deno.errors.NotFound);
    } finally {
      await Deno.remove(edge.dir.dir, { recursive: true });
      await hub.dispose();
    }
  },
  LIMIT_MS,
);

boundedTest(
  "proof 11: with mutual TLS an edge follows by certificate; another node's or CA's certificate is refused",
  async () => {
    const pki = await TestPki.create();
    const stranger = await TestPki.create();
    const edges: Gateway[] = [];
    let hub: HubProcess | undefined;
    try {
      hub = await HubProcess.start({ runtime: OLD, pki });
      assert.ok(hub.url.startsWith("https://"));
      const good = await startRemoteEdge(hub, "edge-a", { pki });
      edges.push(good);
      await inSync(hub, [good]);
      assert.deepEqual(await get(good, "old.test"), [200, "old"]);

      const impostor = await startRemoteEdge(hub, "edge-b", { pki, cn: "edge-a" });
      const foreign = await startRemoteEdge(hub, "edge-c", {
        pki: stranger,
        hubCa: pki.ca.certPem,
      });
      edges.push(impostor, foreign);
      for (const edge of [impostor, foreign]) {
        await waitFor(() => edgeStatus(edge), (s) => s.hub.last_error !== null, 5000);
      }
      const wrongNode = await edgeStatus(impostor);
      assert.match(wrongNode.hub.last_error!.message, /403 \(wrong_node/);
      const wrongCa = await edgeStatus(foreign);
      assert.doesNotMatch(wrongCa.hub.last_error!.message, /answered/, "refused in the handshake");
      for (const status of [wrongNode, wrongCa]) {
        assert.deepEqual([status.hub.connected, status.tenants, status.hash], [false, 0, ""]);
      }
      for (const edge of [impostor, foreign]) assert.equal((await get(edge, "old.test"))[0], 421);
      const nodes = (await hub.status()).nodes.map((n) => n.node_id);
      assert.deepEqual(nodes, ["edge-a"], "only the authenticated node is recorded");
    } finally {
      await disposeAll(...edges, hub, pki, stranger);
    }
  },
  LIMIT_MS,
);
