/**
 * Remote mode's generation cache is verified before it is served or its hash is sent (issue 13,
 * item 4). Each case seeds a cache the way an edge does (following an in-process hub), stops the
 * hub, damages the cache on disk, and boots an edge from it with the hub down: nothing of the
 * damaged set is served, the reason is logged and shown in `/v1/config`, and once a hub answers on
 * the same port the edge converges to the hub's set. The last test damages the cache of a running
 * edge while the hub is away and checks that the reconnect repairs it.
 *
 * @module
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { stringify } from "yaml";
import { readCache } from "../src/live/cache.ts";
import { boundedTest } from "./fixtures/bounded_test.ts";
import { freePorts } from "./fixtures/gateway.ts";
import { siteYaml, startTestHub, type TestHub } from "./fixtures/hub_in_process.ts";
import { type TestEdge, waitFor } from "./fixtures/in_process.ts";
import { bootRemoteEdge, configView, getHost } from "./fixtures/remote_edge.ts";

const LIMIT_MS = 20_000;
const HOSTS = ["demo.test", "page.test", "extra.test"];

/** The hub's runtime set: a tenant with an inline body, and one that serves a body file. */
function runtimeSet(demo: string): Record<string, string> {
  return {
    "demo.test.yaml": siteYaml("demo.test", demo),
    "page.test.yaml": stringify({
      host: "page.test",
      routes: [{ name: "home", match: { path: "/" }, respond: { body_file: "pages/page.html" } }],
    }),
    "pages/page.html": "page v1\n",
  };
}

/** `/v1/config` of a remote edge, as far as these tests read it. */
interface RemoteView {
  hash: string;
  source: string;
  tenants: number;
  hub: {
    connected: boolean;
    failures: number;
    cache: null | {
      state: string;
      reason?: string;
      hash?: string;
      last_refused: null | { at: string; reason: string };
    };
  };
}

/** Where a hub is (or will be) and how an edge authenticates to it. */
interface Place {
  readonly port: number;
  readonly url: string;
  readonly token: string;
  /** The folder of the edge's cache and token file. */
  readonly dir: string;
  readonly cacheDir: string;
}

async function newPlace(): Promise<Place> {
  const [port] = freePorts(1);
  const dir = await Deno.makeTempDir({ prefix: "portcullis-cache-verify-" });
  const token = crypto.randomUUID();
  await Deno.writeTextFile(join(dir, "node.token"), `${token}\n`, { mode: 0o600 });
  return { port, url: `http://127.0.0.1:${port}`, token, dir, cacheDir: join(dir, "cache") };
}

/** Starts a hub on the place's port serving `files`, accepting the place's token. */
async function hubAt(place: Place, files: Record<string, string>): Promise<TestHub> {
  const runtimeDir = await Deno.makeTempDir({ prefix: "portcullis-cache-verify-runtime-" });
  for (const [name, text] of Object.entries(files)) {
    await Deno.mkdir(join(runtimeDir, name, ".."), { recursive: true });
    await Deno.writeTextFile(join(runtimeDir, name), text);
  }
  const hub = await startTestHub({
    runtimeDir,
    edit(config) {
      config.api.listen = [{ hostname: "127.0.0.1", port: place.port }];
    },
  });
  await Deno.writeTextFile(join(hub.dir, "tokens", "edge-a.token"), `${place.token}\n`, {
    mode: 0o600, // a secret: the hub refuses a token file group or others may read
  });
  return {
    ...hub,
    async dispose() {
      await hub.dispose();
      await Deno.remove(runtimeDir, { recursive: true }).catch(() => {});
    },
  };
}

/** Boots a remote-mode edge following the place's hub (up or not), caching into its folder. */
function remoteEdge(place: Place): Promise<TestEdge> {
  return bootRemoteEdge(place.url, join(place.dir, "node.token"), place.cacheDir);
}

const view = (edge: TestEdge) => configView<RemoteView>(edge);
const get = (edge: TestEdge, host: string) => getHost(edge, host);

/** Waits until `edge` serves `hub`'s live set, connected. */
function synced(edge: TestEdge, hub: TestHub, timeoutMs = 5000): Promise<RemoteView> {
  const hash = hub.hub.store.current.hash;
  return waitFor(() => view(edge), (v) => v.hash === hash && v.hub.connected, timeoutMs);
}

/** The folder `current.json` names. */
async function liveFolder(cacheDir: string): Promise<string> {
  const pointer = JSON.parse(await Deno.readTextFile(join(cacheDir, "current.json")));
  return join(cacheDir, pointer.folder);
}

/**
 * Seeds the place's cache as an edge does: an edge follows a hub serving `demo v1`, then (with
 * `second`) `demo v2`; both stop. Returns the files of the hub's last set.
 */
async function seed(place: Place, second: boolean): Promise<Record<string, string>> {
  const hub = await hubAt(place, runtimeSet("demo v1\n"));
  const edge = await remoteEdge(place).catch(async (error) => {
    await hub.dispose();
    throw error;
  });
  try {
    await synced(edge, hub);
    if (!second) return runtimeSet("demo v1\n");
    await hub.write("demo.test.yaml", siteYaml("demo.test", "demo v2\n"));
    await waitFor(() => get(edge, "demo.test"), ([, body]) => body === "demo v2\n");
    await synced(edge, hub);
    return runtimeSet("demo v2\n");
  } finally {
    await edge.dispose();
    await hub.dispose();
  }
}

/** Rewrites `demo.test.yaml` of the live folder: `GARBAGE` instead of `demo v1`. */
async function garbage(cacheDir: string, replacement = "GARBAGE"): Promise<void> {
  const file = join(await liveFolder(cacheDir), "demo.test.yaml");
  const before = await Deno.readTextFile(file);
  await Deno.writeTextFile(file, before.replace("demo v1", replacement));
  const sameSize = (await Deno.stat(file)).size === new TextEncoder().encode(before).length;
  assert.equal(sameSize, replacement.length === "demo v1".length);
}

const PREFIX = "[0-9a-f]{12}";
const CASES: {
  name: string;
  second?: boolean;
  damage: (cacheDir: string) => Promise<void>;
  reason: RegExp;
}[] = [
  {
    name: "a tenant file rewritten at the same size",
    damage: (cacheDir) => garbage(cacheDir),
    reason: new RegExp(
      `gen-1/demo\\.test\\.yaml: expected sha256 ${PREFIX} \\(\\d+ bytes\\), found sha256 ${PREFIX}`,
    ),
  },
  {
    name: "a tenant file rewritten at another size",
    damage: (cacheDir) => garbage(cacheDir, "GARBAGE GARBAGE GARBAGE"),
    reason: new RegExp(`gen-1/demo\\.test\\.yaml: expected sha256 ${PREFIX} .*found sha256`),
  },
  {
    name: "a body file rewritten",
    damage: async (cacheDir) =>
      await Deno.writeTextFile(join(await liveFolder(cacheDir), "pages/page.html"), "GARBAGE\n"),
    reason: new RegExp(
      `gen-1/pages/page\\.html: expected sha256 ${PREFIX}.*found sha256 ${PREFIX}`,
    ),
  },
  {
    name: "a tenant file deleted",
    damage: async (cacheDir) =>
      await Deno.remove(join(await liveFolder(cacheDir), "page.test.yaml")),
    reason: new RegExp(`gen-1/page\\.test\\.yaml: expected sha256 ${PREFIX}, missing`),
  },
  {
    name: "an extra tenant file",
    damage: async (cacheDir) =>
      await Deno.writeTextFile(
        join(await liveFolder(cacheDir), "extra.test.yaml"),
        siteYaml("extra.test", "GARBAGE\n"),
      ),
    reason: new RegExp(`gen-1/extra\\.test\\.yaml: not in the manifest, found sha256 ${PREFIX}`),
  },
  {
    name: "a tenant file replaced by a link to a file outside the cache",
    damage: async (cacheDir) => {
      const outside = join(cacheDir, "..", "outside.yaml");
      await Deno.writeTextFile(outside, siteYaml("demo.test", "GARBAGE\n"));
      const file = join(await liveFolder(cacheDir), "demo.test.yaml");
      await Deno.remove(file);
      await Deno.symlink(outside, file);
    },
    reason: /gen-1\/demo\.test\.yaml: not a regular file/,
  },
  {
    name: "a folder without a manifest (as an edge before manifests wrote it)",
    // (An edge that predates manifests wrote none: there is then nothing to remove.)
    damage: async (cacheDir) =>
      await Deno.remove(join(await liveFolder(cacheDir), ".manifest.json")).catch((error) => {
        if (!(error instanceof Deno.errors.NotFound)) throw error;
      }),
    reason: /gen-1: no \.manifest\.json/,
  },
  {
    name: "a truncated current.json",
    damage: async (cacheDir) => {
      const file = join(cacheDir, "current.json");
      await Deno.truncate(file, Math.floor((await Deno.stat(file)).size / 2));
    },
    reason: /current\.json is damaged \(not JSON/,
  },
  {
    name: "current.json naming a folder whose manifest is another set's",
    second: true,
    damage: async (cacheDir) => {
      const file = join(cacheDir, "current.json");
      const pointer = JSON.parse(await Deno.readTextFile(file));
      assert.equal(pointer.folder, "gen-2");
      // gen-1 still holds demo v1; the pointer keeps the hash of demo v2.
      await Deno.writeTextFile(
        file,
        JSON.stringify({ ...pointer, generation: 1, folder: "gen-1" }),
      );
    },
    reason: new RegExp(
      `current\\.json names generation 1, set ${PREFIX}; the manifest of gen-1 is generation 1, ` +
        `set ${PREFIX}`,
    ),
  },
];

for (const { name, second, damage, reason } of CASES) {
  boundedTest(
    `cache: ${name} is refused at boot (421, logged, shown), then the edge converges to the hub`,
    async () => {
      const place = await newPlace();
      let edge: TestEdge | undefined;
      let hub: TestHub | undefined;
      try {
        const files = await seed(place, second ?? false);
        await damage(place.cacheDir);

        edge = await remoteEdge(place);
        for (const host of HOSTS) assert.equal((await get(edge, host))[0], 421, host);
        const refused = await waitFor(() => view(edge!), (v) => v.hub.cache?.state === "refused");
        assert.deepEqual([refused.hash, refused.tenants, refused.hub.connected], ["", 0, false]);
        assert.match(refused.hub.cache!.reason!, reason);
        const logged = edge.lines.filter((line) => /cache .* refused: /.test(line));
        assert.equal(logged.length, 1, edge.lines.join("\n"));
        assert.match(logged[0], reason);
        assert.ok(!edge.lines.some((line) => line.includes("GARBAGE")), "no contents in the log");
        for (const host of HOSTS) assert.equal((await get(edge, host))[0], 421, host);

        hub = await hubAt(place, files);
        // The cache is written once the set is live: wait for both.
        const converged = await waitFor(
          () => view(edge!),
          (v) => v.hash === hub!.hub.store.current.hash && v.hub.cache?.state === "written",
          5000,
        );
        assert.deepEqual([converged.source, converged.tenants], ["hub", 2]);
        assert.match(converged.hub.cache!.last_refused!.reason, reason);
        assert.deepEqual(await get(edge, "demo.test"), [200, second ? "demo v2\n" : "demo v1\n"]);
        assert.deepEqual(await get(edge, "page.test"), [200, "page v1\n"]);
        assert.equal((await get(edge, "extra.test"))[0], 421);
        assert.equal((await readCache(place.cacheDir))?.hash, hub.hub.store.current.hash);
      } finally {
        await edge?.dispose();
        await hub?.dispose();
        await Deno.remove(place.dir, { recursive: true }).catch(() => {});
      }
    },
    LIMIT_MS,
  );
}

boundedTest(
  "cache: a reconnecting edge verifies its cache before sending its hash, and repairs it",
  async () => {
    const place = await newPlace();
    let edge: TestEdge | undefined;
    let hub: TestHub | undefined;
    try {
      hub = await hubAt(place, runtimeSet("demo v1\n"));
      edge = await remoteEdge(place);
      const before = await synced(edge, hub);
      await hub.dispose();
      hub = undefined;
      await waitFor(() => view(edge!), (v) => !v.hub.connected && v.hub.failures >= 1);
      await garbage(place.cacheDir);

      const refused = await waitFor(() => view(edge!), (v) => v.hub.cache?.state === "refused");
      assert.match(refused.hub.cache!.reason!, /gen-1\/demo\.test\.yaml: expected sha256/);
      assert.equal(refused.hash, before.hash, "the live set in memory stays");
      assert.ok(edge.lines.some((line) => /cache .* refused: .*demo\.test\.yaml/.test(line)));

      hub = await hubAt(place, runtimeSet("demo v1\n"));
      const repaired = await waitFor(() => view(edge!), (v) => v.hub.cache?.state === "written");
      assert.equal(repaired.hash, before.hash);
      assert.equal((await readCache(place.cacheDir))?.hash, before.hash, "it verifies");
      assert.notEqual(await liveFolder(place.cacheDir), join(place.cacheDir, "gen-1"));
      await edge.dispose();
      await hub.dispose();
      hub = undefined;

      // The repaired cache serves the hub's set to an edge restarted with the hub down.
      edge = await remoteEdge(place);
      const restarted = await view(edge);
      assert.deepEqual([restarted.source, restarted.hash], ["cache", before.hash]);
      assert.deepEqual(await get(edge, "demo.test"), [200, "demo v1\n"]);
      assert.deepEqual(await get(edge, "page.test"), [200, "page v1\n"]);
      const verified = await waitFor(() => view(edge!), (v) => v.hub.cache !== null);
      assert.equal(verified.hub.cache!.state, "verified");
    } finally {
      await edge?.dispose();
      await hub?.dispose();
      await Deno.remove(place.dir, { recursive: true }).catch(() => {});
    }
  },
  LIMIT_MS,
);
