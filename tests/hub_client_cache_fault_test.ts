/**
 * A remote edge whose cache folder refuses writes, against a real hub (`main.ts hub`) and a real
 * remote edge (`main.ts serve`), each under the flags `main.ts flags` derives: the cache folder is a
 * small tmpfs filled to the brim, or remounted read-only (both need root to mount; the tests are
 * skipped otherwise). Issue 32: the edge took a set it could not write as received, told the hub it
 * had it, and never tried again; staging folders were left behind.
 *
 * What is observed: what the edge serves, its `/v1/config` and `/metrics`, the hub's view of the
 * node, the cache folder's entries, and the time from freeing the disk to the set being served.
 *
 * @module
 */
import assert from "node:assert/strict";
import { readCache, stageCache } from "../src/live/cache.ts";
import { CacheWriteError, cleanStaging } from "../src/live/cache_faults.ts";
import { boundedTest } from "./fixtures/bounded_test.ts";
import { messages } from "./fixtures/diag_lines.ts";
import { ADMIN_AUTH, Gateway } from "./fixtures/gateway.ts";
import {
  disposeAll,
  type EdgeStatus,
  edgeStatus,
  getFrom,
  HubProcess,
  tenantText,
  writeRemoteEdge,
} from "./fixtures/hub.ts";
import { json, request } from "./fixtures/http_client.ts";
import { waitFor } from "./fixtures/in_process.ts";
import { siteYaml, startTestHub } from "./fixtures/hub_in_process.ts";
import { bootRemoteEdge, configView, getHost } from "./fixtures/remote_edge.ts";

const LIMIT_MS = 60_000;
const OLD = { "old.test.yaml": tenantText("old.test", "old") };
/** `backoff_max_ms` of the edges `writeRemoteEdge` writes: no wait between tries is longer. */
const BACKOFF_MAX_MS = 1000;
/** What a try, a poll and reading `/v1/config` may add to the backoff on a busy 2-core machine. */
const SLACK_MS = 3000;
/** Mounting a tmpfs needs root; without it those tests are reported ignored, not passed. */
const asRoot: typeof boundedTest = new TextDecoder()
    .decode(new Deno.Command("id", { args: ["-u"], stderr: "null" }).outputSync().stdout).trim() ===
    "0"
  ? boundedTest
  : (name) => Deno.test({ name, ignore: true, fn() {} });

/** The pending set as `/v1/config` shows it. */
interface PendingView {
  readonly hash: string;
  readonly retries: number;
  readonly last_error: { readonly message: string; readonly fault: string };
}

/** The hub's view of one node. */
interface NodeView {
  readonly node_id: string;
  readonly have: string;
  readonly seen: string;
  readonly current: boolean;
  readonly polls: number;
}

const pendingOf = (s: EdgeStatus) => (s.hub as unknown as { pending: PendingView | null }).pending;

/** Runs a command; throws with its stderr when it fails. */
async function run(command: string, ...args: string[]): Promise<void> {
  const out = await new Deno.Command(command, { args, stdout: "null", stderr: "piped" }).output();
  if (!out.success) {
    throw new Error(`${command} ${args.join(" ")}: ${new TextDecoder().decode(out.stderr)}`);
  }
}

/** A tmpfs mounted on an edge's cache folder, which a test fills, frees and remounts. */
class CacheDisk {
  readonly dir: string;
  readonly #filler: string;

  private constructor(dir: string) {
    this.dir = dir;
    this.#filler = `${dir}/filler`;
  }

  static async mount(dir: string, size: string): Promise<CacheDisk> {
    await Deno.mkdir(dir, { recursive: true });
    await run("mount", "-t", "tmpfs", "-o", `size=${size},mode=0700`, "tmpfs", dir);
    return new CacheDisk(dir);
  }

  /** Fills the disk, and proves it: a one-byte write then fails with ENOSPC. */
  async fill(): Promise<void> {
    await Deno.writeFile(this.#filler, new Uint8Array(4 << 20)).catch(() => {});
    await assert.rejects(
      () => Deno.writeTextFile(`${this.dir}/probe`, "x"),
      /No space left on device/,
    );
    await Deno.remove(`${this.dir}/probe`).catch(() => {});
  }

  free(): Promise<void> {
    return Deno.remove(this.#filler);
  }

  readOnly(): Promise<void> {
    return run("mount", "-o", "remount,ro", this.dir);
  }

  writable(): Promise<void> {
    return run("mount", "-o", "remount,rw", this.dir);
  }

  unmount(): Promise<void> {
    return run("umount", this.dir);
  }
}

/** Entries a cache write leaves only while it runs (staging folders, pointers not yet renamed). */
async function leftovers(dir: string): Promise<string[]> {
  const names: string[] = [];
  for await (const entry of Deno.readDir(dir)) {
    if (entry.name.startsWith(".staging-") || entry.name.startsWith(".current.json.")) {
      names.push(entry.name);
    }
  }
  return names;
}

/** The hub's view of `edge-a`. */
async function nodeOf(hub: HubProcess): Promise<NodeView | undefined> {
  const nodes = (await hub.status()).nodes as unknown as NodeView[];
  return nodes.find((node) => node.node_id === "edge-a");
}

/** The edge's `/metrics` text. */
async function metricsOf(edge: Gateway): Promise<string> {
  const response = await request(edge.ports.local_health, { path: "/metrics" });
  assert.equal(response.status, 200);
  return response.body;
}

/** The value of the first sample line that starts with `series`. */
function sample(text: string, series: string): number | undefined {
  const line = text.split("\n").find((l) => l.startsWith(`${series} `));
  return line === undefined ? undefined : Number(line.slice(series.length + 1));
}

async function get(edge: Gateway, host: string): Promise<[number, string]> {
  const response = await getFrom(edge, host);
  return [response.status, response.body];
}

/** A hub serving {@link OLD} and an edge whose cache folder is a tmpfs of `size`, in sync. */
async function withCacheDisk(
  size: string,
  body: (hub: HubProcess, edge: Gateway, disk: CacheDisk, old: string) => Promise<void>,
): Promise<void> {
  const hub = await HubProcess.start({ runtime: OLD });
  let edge: Gateway | undefined;
  let disk: CacheDisk | undefined;
  const written = await writeRemoteEdge(hub, "edge-a").catch(async (error) => {
    await hub.dispose();
    throw error;
  });
  try {
    disk = await CacheDisk.mount(`${written.dir.dir}/cache`, size);
    edge = await Gateway.start(written.dir, written.ports);
    const { hash } = await hub.status();
    await waitFor(() => edgeStatus(edge!), (s) => s.hash === hash && s.hub.connected, 10_000);
    await body(hub, edge, disk, hash);
  } finally {
    await edge?.stop();
    await disk?.writable().catch(() => {});
    await disk?.unmount().catch(() => {});
    await disposeAll(edge, hub);
    await Deno.remove(written.dir.dir, { recursive: true }).catch(() => {});
  }
}

/** Publishes `new.test` at the hub; returns the hub's new hash. */
async function publish(hub: HubProcess, old: string): Promise<string> {
  await hub.writeTenant("new.test.yaml", tenantText("new.test", "new"));
  return (await waitFor(() => hub.status(), (s) => s.hash !== old && s.tenants === 2, 5000)).hash;
}

/**
 * While the set waits: the old set is served; `/v1/config` shows the pending hash, the error and
 * the retries; the hub's view says the node serves the old set; no staging folder stays.
 */
async function assertWaiting(
  hub: HubProcess,
  edge: Gateway,
  disk: CacheDisk,
  expect: { old: string; pushed: string; message: RegExp; fault: string },
): Promise<void> {
  const { old, pushed, message, fault } = expect;
  const during = await waitFor(
    () => edgeStatus(edge),
    (s) => (pendingOf(s)?.retries ?? 0) >= 2,
    15_000,
  );
  const pending = pendingOf(during)!;
  assert.equal(pending.hash, pushed, "the pending set is the hub's");
  assert.match(pending.last_error.message, message);
  assert.equal(pending.last_error.fault, fault);
  assert.equal(during.hash, old, "the old set stays live");
  assert.equal(during.hub.received_hash, old, "received means applied");
  assert.deepEqual(await get(edge, "old.test"), [200, "old"]);
  assert.equal((await get(edge, "new.test"))[0], 421);

  const polls = (await nodeOf(hub))!.polls;
  const node = await waitFor(() => nodeOf(hub), (n) => n!.polls > polls, 10_000);
  assert.deepEqual(
    [node!.have, node!.seen, node!.current],
    [old, pushed, false],
    "the hub sees the node serve the old set",
  );

  const text = await metricsOf(edge);
  assert.equal(sample(text, "portcullis_config_pending"), 1);
  assert.equal(
    sample(text, `portcullis_config_pending_info{hash="${pushed}",error="${fault}"}`),
    1,
  );
  assert.ok(sample(text, "portcullis_config_pending_retries")! >= 2, text);
  assert.ok(sample(text, "portcullis_config_cache_write_failures_total")! >= 3, text);

  await waitFor(() => leftovers(disk.dir), (names) => names.length === 0, 5000);
  const said = messages(edge.stderr).split("\n").filter((l) =>
    l.includes(`set ${pushed.slice(0, 12)}`) && /waits/.test(l)
  );
  assert.equal(said.length, 1, `one line for the episode, not one per try: ${said.join("\n")}`);
}

/** Once the disk takes writes again: the set is served within the backoff, and the hub sees it. */
async function assertApplied(
  hub: HubProcess,
  edge: Gateway,
  disk: CacheDisk,
  pushed: string,
  freedAt: number,
): Promise<void> {
  const applied = await waitFor(() => edgeStatus(edge), (s) => s.hash === pushed, 15_000);
  const took = Date.now() - freedAt;
  assert.ok(took <= BACKOFF_MAX_MS + SLACK_MS, `applied ${took} ms after the disk was freed`);
  assert.equal(pendingOf(applied), null);
  assert.equal(applied.hub.received_hash, pushed);
  assert.deepEqual(await get(edge, "new.test"), [200, "new"]);
  const node = await waitFor(() => nodeOf(hub), (n) => n!.have === pushed, 5000);
  assert.deepEqual([node!.seen, node!.current], ["", true]);
  assert.equal(sample(await metricsOf(edge), "portcullis_config_pending"), 0);
  assert.equal((await readCache(disk.dir))?.hash, pushed, "the cache holds what is served");
  assert.deepEqual(await leftovers(disk.dir), []);
}

asRoot(
  "remote edge: a set a full cache refused is applied once space is freed, with no new publish",
  async () => {
    await withCacheDisk("64k", async (hub, edge, disk, old) => {
      await disk.fill();
      const pushed = await publish(hub, old);
      await waitFor(() => edgeStatus(edge), (s) => pendingOf(s)?.hash === pushed, 15_000);
      // A leftover made after the first failure (an empty folder needs no space on a tmpfs): a
      // later failure removes it too.
      await Deno.mkdir(`${disk.dir}/.staging-gen-77-${crypto.randomUUID()}`);
      await assertWaiting(hub, edge, disk, {
        old,
        pushed,
        message: /No space left on device/,
        fault: "no_space",
      });
      const freedAt = Date.now();
      await disk.free();
      await assertApplied(hub, edge, disk, pushed, freedAt);
    });
  },
  LIMIT_MS,
);

asRoot(
  "remote edge: a set a read-only cache refused is applied once the folder is writable again",
  async () => {
    await withCacheDisk("1m", async (hub, edge, disk, old) => {
      await disk.readOnly();
      const pushed = await publish(hub, old);
      await assertWaiting(hub, edge, disk, {
        old,
        pushed,
        message: /Read-only file system/,
        fault: "read_only",
      });
      const freedAt = Date.now();
      await disk.writable();
      await assertApplied(hub, edge, disk, pushed, freedAt);
    });
  },
  LIMIT_MS,
);

asRoot(
  "remote edge: a pending set is dropped when the hub goes back to the set the edge serves",
  async () => {
    await withCacheDisk("64k", async (hub, edge, disk, old) => {
      await disk.fill();
      const pushed = await publish(hub, old);
      await waitFor(() => edgeStatus(edge), (s) => pendingOf(s)?.hash === pushed, 15_000);
      await hub.removeTenant("new.test.yaml");
      await waitFor(() => hub.status(), (s) => s.hash === old, 5000);
      const back = await waitFor(() => edgeStatus(edge), (s) => pendingOf(s) === null, 10_000);
      assert.equal(back.hash, old);
      // The first poll after the hub went back may still name the dropped set; the next does not.
      const node = await waitFor(() => nodeOf(hub), (n) => n!.current && n!.seen === "", 5000);
      assert.equal(node!.have, old);
      assert.match(messages(edge.stderr), /pending set \w+ dropped/);
      assert.equal(sample(await metricsOf(edge), "portcullis_config_pending"), 0);
    });
  },
  LIMIT_MS,
);

boundedTest(
  "remote edge: staging leftovers in the cache are removed at start",
  async () => {
    const hub = await HubProcess.start({ runtime: OLD });
    const written = await writeRemoteEdge(hub, "edge-a");
    let edge: Gateway | undefined;
    try {
      edge = await Gateway.start(written.dir, written.ports);
      const { hash } = await hub.status();
      await waitFor(() => edgeStatus(edge!), (s) => s.hash === hash && s.hub.connected, 10_000);
      await edge.stop();
      // What a write killed part way leaves: a staging folder, a pointer not yet renamed.
      const cache = `${written.dir.dir}/cache`;
      const staging = `${cache}/.staging-gen-9-${crypto.randomUUID()}`;
      await Deno.mkdir(staging);
      await Deno.writeTextFile(`${staging}/half.test.yaml`, "host: half");
      await Deno.writeTextFile(`${cache}/.current.json.${crypto.randomUUID()}`, "{");
      assert.equal((await leftovers(cache)).length, 2);

      const polls = (await nodeOf(hub))!.polls;
      edge = await Gateway.start(written.dir, written.ports);
      // The hub holds the poll of a node that has its live set: it saw the node ask, nothing more.
      await waitFor(() => nodeOf(hub), (n) => n!.polls > polls && n!.have === hash, 10_000);
      const status = await edgeStatus(edge);
      assert.deepEqual([status.hash, status.source], [hash, "cache"], "no new set was written");
      await waitFor(() => leftovers(cache), (names) => names.length === 0, 5000);
      assert.match(messages(edge.stderr), /removed 2 staging leftovers at start/);
      assert.equal((await readCache(cache))?.hash, hash, "the cache itself is untouched");
    } finally {
      await disposeAll(edge, hub);
      await Deno.remove(written.dir.dir, { recursive: true }).catch(() => {});
    }
  },
  LIMIT_MS,
);

asRoot(
  "stageCache() on a full disk fails with a no_space CacheWriteError and leaves no staging folder",
  async () => {
    const dir = await Deno.makeTempDir({ prefix: "portcullis-cache-" });
    const disk = await CacheDisk.mount(`${dir}/cache`, "64k");
    try {
      await disk.fill();
      const files = new Map([["a.test.yaml", new TextEncoder().encode("host: a.test\n")]]);
      const error = await stageCache(disk.dir, files).then(() => undefined, (e) => e);
      assert.ok(error instanceof CacheWriteError, String(error));
      assert.equal(error.fault, "no_space");
      assert.match(error.message, /^Cannot stage a generation in the cache ".*\/cache": No space/);
      assert.deepEqual(await leftovers(disk.dir), []);
    } finally {
      await disk.unmount().catch(() => {});
      await Deno.remove(dir, { recursive: true });
    }
  },
  LIMIT_MS,
);

Deno.test("cleanStaging() removes only what a write leaves: staging folders, unrenamed pointers", async () => {
  const dir = await Deno.makeTempDir({ prefix: "portcullis-cache-" });
  try {
    const uuid = crypto.randomUUID();
    const left = [`.current.json.${uuid}`, `.staging-gen-3-${uuid}`];
    const kept = ["current.json", "gen-3", ".staging-notes", "filler", `.current.json.${uuid}x`];
    for (const name of [...left, ...kept]) {
      if (name.includes("gen-")) await Deno.mkdir(`${dir}/${name}`);
      else await Deno.writeTextFile(`${dir}/${name}`, "x");
    }
    assert.deepEqual(await cleanStaging(dir), left);
    const found = (await Array.fromAsync(Deno.readDir(dir))).map((e) => e.name).sort();
    assert.deepEqual(found, [...kept].sort());
    assert.deepEqual(await cleanStaging(`${dir}/missing`), [], "no folder: nothing to clean");
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

asRoot(
  "POST /v1/config/reload while a set waits for its cache answers 503 pending, and 200 once it can be written",
  async () => {
    const hub = await startTestHub();
    const dir = await Deno.makeTempDir({ prefix: "portcullis-node-" });
    const disk = await CacheDisk.mount(`${dir}/cache`, "1m");
    await Deno.writeTextFile(`${dir}/node.token`, `${await hub.token("edge-a")}\n`, {
      mode: 0o600,
    });
    const edge = await bootRemoteEdge(hub.url, `${dir}/node.token`, disk.dir);
    const reload = () =>
      request(edge.ports.local_health, {
        path: "/v1/config/reload",
        method: "POST",
        headers: [ADMIN_AUTH],
      });
    type View = { hub: { pending: PendingView | null } };
    try {
      await waitFor(() => getHost(edge, "demo.test"), ([status]) => status === 200);
      await disk.readOnly();
      await hub.write("new.test.yaml", siteYaml("new.test", "new\n"));
      await waitFor(() => configView<View>(edge), (v) => v.hub.pending !== null, 5000);
      const waiting = await reload();
      assert.equal(waiting.status, 503, waiting.body);
      assert.equal(json<{ outcome: string }>(waiting).outcome, "pending");
      assert.equal((await getHost(edge, "new.test"))[0], 421);
      await disk.writable();
      const applied = await reload();
      assert.equal(applied.status, 200, applied.body);
      assert.deepEqual(await getHost(edge, "new.test"), [200, "new\n"]);
      assert.equal((await configView<View>(edge)).hub.pending, null);
    } finally {
      await edge.dispose();
      await disk.writable().catch(() => {});
      await disk.unmount().catch(() => {});
      await hub.dispose();
      await Deno.remove(dir, { recursive: true }).catch(() => {});
    }
  },
  LIMIT_MS,
);
