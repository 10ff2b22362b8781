/**
 * Remote mode on an in-process edge following an in-process hub: the first snapshot, deltas as the
 * hub's folder changes, the generation cache (written only for sets the edge accepts, read at the
 * next boot), a set the edge itself refuses, a hub that is away, a hub that sends a damaged set, and
 * `POST /v1/config/reload` in both cases.
 *
 * @module
 */
import assert from "node:assert/strict";
import http from "node:http";
import { stringify } from "yaml";
import { readCache } from "../src/live/cache.ts";
import { hashFileSet } from "../src/config/file_set.ts";
import { ADMIN_AUTH, freePorts } from "./fixtures/gateway.ts";
import { siteYaml, startTestHub, type TestHub } from "./fixtures/hub_in_process.ts";
import { json, request } from "./fixtures/http_client.ts";
import { type TestEdge, waitFor } from "./fixtures/in_process.ts";
import { bootRemoteEdge, configView, getHost } from "./fixtures/remote_edge.ts";

/** `/v1/config` of a remote edge, as far as these tests read it. */
interface RemoteView {
  generation: number;
  hash: string;
  source: string;
  tenants: number;
  last_rejected: null | { source: string; problems: { file: string; path: string }[] };
  hub: {
    connected: boolean;
    failures: number;
    last_error: null | { message: string };
    received_hash: string | null;
    hub: null | { last_rejected: unknown };
  };
}

/** Boots a remote-mode edge that follows `url` with a token, caching into `cacheDir`. */
async function remoteEdge(
  url: string,
  token: string,
  cacheDir: string,
  mode = 0o600,
): Promise<TestEdge> {
  const secrets = await Deno.makeTempDir({ prefix: "portcullis-node-" });
  await Deno.writeTextFile(`${secrets}/node.token`, `${token}\n`, { mode });
  await Deno.chmod(`${secrets}/node.token`, mode);
  return bootRemoteEdge(url, `${secrets}/node.token`, cacheDir);
}

const view = (edge: TestEdge) => configView<RemoteView>(edge);
const get = (edge: TestEdge, host: string) => getHost(edge, host);

async function following(
  body: (hub: TestHub, edge: TestEdge, cacheDir: string) => Promise<void>,
): Promise<void> {
  const hub = await startTestHub();
  const cacheDir = await Deno.makeTempDir({ prefix: "portcullis-cache-" });
  const edge = await remoteEdge(hub.url, await hub.token("edge-a"), cacheDir);
  try {
    await body(hub, edge, cacheDir);
  } finally {
    await edge.dispose();
    await hub.dispose();
    await Deno.remove(cacheDir, { recursive: true }).catch(() => {});
  }
}

Deno.test("remote edge: serves the hub's snapshot, then each change, and caches what it serves", async () => {
  await following(async (hub, edge, cacheDir) => {
    await waitFor(() => get(edge, "demo.test"), ([status]) => status === 200);
    assert.deepEqual(await get(edge, "demo.test"), [200, "demo v1\n"]);
    const first = await view(edge);
    assert.equal(first.source, "hub");
    assert.equal(first.hash, hub.hub.store.current.hash, "the edge holds the hub's set");
    assert.equal(first.hub.connected, true);

    await hub.write("demo.test.yaml", siteYaml("demo.test", "demo v2\n"));
    await hub.write("new.test.yaml", siteYaml("new.test", "new\n"));
    await waitFor(() => get(edge, "new.test"), ([status]) => status === 200);
    await waitFor(() => get(edge, "demo.test"), ([, body]) => body === "demo v2\n");
    const second = await view(edge);
    assert.ok(second.generation > first.generation);
    assert.equal(second.hash, hub.hub.store.current.hash);

    // The cache is written just after the set goes live: poll for it (deadline 5 s).
    let cached = await readCache(cacheDir);
    for (const until = Date.now() + 5000; cached?.hash !== second.hash && Date.now() < until;) {
      await new Promise((resolve) => setTimeout(resolve, 20));
      cached = await readCache(cacheDir);
    }
    assert.equal(cached?.hash, second.hash, "the cache points at the live set");
    assert.equal(
      await Deno.readTextFile(`${cached!.folder}/new.test.yaml`),
      siteYaml("new.test", "new\n"),
    );
    const folders = [];
    for await (const entry of Deno.readDir(cacheDir)) {
      if (entry.name.startsWith("gen-")) folders.push(entry.name);
    }
    assert.ok(folders.length <= 2, `old generations are pruned: ${folders}`);
  });
});

Deno.test("remote edge: a set valid at the hub but not here is refused once; the cache keeps the last good", async () => {
  await following(async (hub, edge, cacheDir) => {
    await waitFor(() => get(edge, "demo.test"), ([status]) => status === 200);
    const before = await view(edge);
    // The edge has no egress, so a proxy route cannot leave it: the edge refuses the set.
    await hub.write(
      "far.test.yaml",
      stringify({
        host: "far.test",
        routes: [{ match: { path: "/" }, proxy: { backends: [{ url: "http://10.9.9.9:80" }] } }],
      }),
    );
    const after = await waitFor(() => view(edge), (v) => v.last_rejected !== null);
    assert.equal(after.last_rejected!.source, "hub");
    assert.ok(
      after.last_rejected!.problems.some((p) => p.file.endsWith("far.test.yaml")),
      JSON.stringify(after.last_rejected),
    );
    assert.equal(after.hash, before.hash, "the live generation stays");
    // Received means applied: the edge tells the hub what it serves, and the refused set as seen.
    assert.equal(after.hub.received_hash, before.hash);
    const node = await waitFor(() => hub.hub.nodes.get("edge-a")!, (n) => n.holding);
    assert.deepEqual([node.have, node.seen], [before.hash, hub.hub.store.current.hash]);
    assert.deepEqual(await get(edge, "demo.test"), [200, "demo v1\n"]);
    assert.equal((await readCache(cacheDir))?.hash, before.hash);
    const polls = hub.hub.nodes.get("edge-a")!.polls;
    await new Promise((resolve) => setTimeout(resolve, 500));
    assert.ok(hub.hub.nodes.get("edge-a")!.polls <= polls + 1, "no retry loop on a refused set");
  });
});

Deno.test("remote edge: the hub's own rejections show on the edge", async () => {
  await following(async (hub, edge) => {
    await waitFor(() => get(edge, "demo.test"), ([status]) => status === 200);
    await hub.write("bad.test.yaml", "host: bad.test\nroutes: 7\n");
    const seen = await waitFor(() => view(edge), (v) => v.hub.hub?.last_rejected != null);
    assert.match(JSON.stringify(seen.hub.hub!.last_rejected), /bad\.test\.yaml/);
    assert.equal(seen.last_rejected, null, "nothing reached the edge to reject");
  });
});

Deno.test("remote edge: with the hub away it serves on, backs off, and restarts from its cache", async () => {
  const hub = await startTestHub();
  const cacheDir = await Deno.makeTempDir({ prefix: "portcullis-cache-" });
  const token = await hub.token("edge-a");
  let edge = await remoteEdge(hub.url, token, cacheDir);
  try {
    await waitFor(() => get(edge, "demo.test"), ([status]) => status === 200);
    await hub.dispose();
    const away = await waitFor(() => view(edge), (v) => !v.hub.connected, 5000);
    assert.ok(away.hub.last_error?.message, "the reason is shown");
    assert.deepEqual(await get(edge, "demo.test"), [200, "demo v1\n"]);
    const reload = await request(edge.ports.local_health, {
      path: "/v1/config/reload",
      method: "POST",
      headers: [ADMIN_AUTH],
    });
    assert.equal(reload.status, 502);
    assert.equal(json<{ outcome: string }>(reload).outcome, "unreachable");
    await new Promise((resolve) => setTimeout(resolve, 1000));
    const failures = (await view(edge)).hub.failures;
    // Delays of 25–200 ms: about 5 to 40 attempts in a second, never a hot loop.
    assert.ok(failures >= 3 && failures <= 60, `failures after ~1 s: ${failures}`);

    await edge.dispose();
    edge = await remoteEdge(hub.url, token, cacheDir);
    assert.deepEqual(await get(edge, "demo.test"), [200, "demo v1\n"], "served from the cache");
    const restarted = await view(edge);
    assert.equal(restarted.source, "cache");
    assert.equal(restarted.hub.connected, false);
  } finally {
    await edge.dispose();
    await Deno.remove(cacheDir, { recursive: true }).catch(() => {});
  }
});

Deno.test("remote edge: POST /v1/config/reload asks the hub at once", async () => {
  await following(async (_hub, edge) => {
    await waitFor(() => get(edge, "demo.test"), ([status]) => status === 200);
    // The hub holds the edge's poll for 1.5 s; a reload does not wait for it.
    const started = Date.now();
    const reload = await request(edge.ports.local_health, {
      path: "/v1/config/reload",
      method: "POST",
      headers: [ADMIN_AUTH],
    });
    assert.equal(reload.status, 200);
    assert.equal(json<{ outcome: string }>(reload).outcome, "unchanged");
    assert.ok(Date.now() - started < 1000, "not held");
  });
});

/** A hub double that answers every poll with `answer`. */
async function fakeHub(answer: unknown, body: (url: string) => Promise<void>): Promise<void> {
  const [port] = freePorts(1);
  const server = http.createServer((_request, response) => {
    response.writeHead(200, { "content-type": "application/json" });
    response.end(JSON.stringify(answer));
  });
  await new Promise<void>((resolve) => server.listen(port, "127.0.0.1", resolve));
  try {
    await body(`http://127.0.0.1:${port}`);
  } finally {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  }
}

for (
  const [what, files, expected] of [
    ["a set that does not match its hash", { "x.test.yaml": "aG9zdDogeC50ZXN0Cg==" }, /hashes to/],
    ["a path that climbs out of the folder", { "../x.yaml": "eA==" }, /unsafe path/],
  ] as const
) {
  Deno.test(`remote edge: ${what} is refused and never cached`, async () => {
    const cacheDir = await Deno.makeTempDir({ prefix: "portcullis-cache-" });
    const answer = { type: "snapshot", generation: 1, hash: "0".repeat(64), files, hub: null };
    await fakeHub(answer, async (url) => {
      const edge = await remoteEdge(url, "token", cacheDir);
      try {
        const seen = await waitFor(() => view(edge), (v) => v.hub.last_error !== null);
        assert.match(seen.hub.last_error!.message, expected);
        assert.equal(seen.tenants, 0);
        assert.equal(await readCache(cacheDir), undefined);
      } finally {
        await edge.dispose();
        await Deno.remove(cacheDir, { recursive: true }).catch(() => {});
      }
    });
  });
}

Deno.test("remote edge: a hub that sends a refused set again at once is asked with a backoff, not in a loop", async () => {
  // A hub that does not read `seen` answers every poll, held or not, with the set the edge refused.
  const text = stringify({
    host: "far.test",
    routes: [{ match: { path: "/" }, proxy: { backends: [{ url: "http://10.9.9.9:80" }] } }],
  });
  const files = new Map([["far.test.yaml", new TextEncoder().encode(text)]]);
  const hash = await hashFileSet(files);
  const answer = { type: "snapshot", generation: 1, hash, files: { "far.test.yaml": btoa(text) } };
  const [port] = freePorts(1);
  let polls = 0;
  const server = http.createServer((_request, response) => {
    polls++;
    response.writeHead(200, { "content-type": "application/json" });
    response.end(JSON.stringify(answer));
  });
  await new Promise<void>((resolve) => server.listen(port, "127.0.0.1", resolve));
  const cacheDir = await Deno.makeTempDir({ prefix: "portcullis-cache-" });
  const edge = await remoteEdge(`http://127.0.0.1:${port}`, "token", cacheDir);
  try {
    const refused = await waitFor(() => view(edge), (v) => v.last_rejected !== null);
    assert.equal(refused.hub.received_hash, null, "nothing was applied");
    const before = polls;
    await new Promise((resolve) => setTimeout(resolve, 1000));
    // Backoff 25–200 ms between repeats: about 5 to 40 polls in a second; a loop makes hundreds.
    assert.ok(polls - before <= 40, `polls in ~1 s: ${polls - before}`);
    assert.equal((await view(edge)).tenants, 0);
  } finally {
    await edge.dispose();
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
    await Deno.remove(cacheDir, { recursive: true }).catch(() => {});
  }
});

Deno.test("remote edge: a hub token file open to others refuses the boot, naming file and mode", async () => {
  const cacheDir = await Deno.makeTempDir({ prefix: "portcullis-cache-" });
  try {
    for (const mode of [0o644, 0o640, 0o604]) {
      await assert.rejects(
        () => remoteEdge("http://127.0.0.1:9", "token", cacheDir, mode),
        (error: Error) => {
          const octal = `0${mode.toString(8)}`;
          assert.match(
            String((error as { reasons?: string[] }).reasons ?? error.message),
            new RegExp(
              `hub\\.token_file \\S*node\\.token is open to group or others \\(mode ${octal}`,
            ),
          );
          return true;
        },
      );
    }
  } finally {
    await Deno.remove(cacheDir, { recursive: true });
  }
});
