/**
 * The tenants folder's watch against the writers fault injection found (issue 13, items 3 and 4):
 * a file cut mid-write whose prefix parses never becomes a generation, whether the watch or
 * `POST /v1/config/reload` reads it; a file written once goes live promptly; and the watch survives
 * its folder being deleted and made again, moved away, or replaced by a rename — in process, and in
 * the real gateway under its derived permission flags, which grant no read on the folder's parent.
 *
 * @module
 */
import assert from "node:assert/strict";
import { stringify } from "yaml";
import type { Generation } from "../src/live/generations.ts";
import {
  ADMIN_AUTH,
  DEMO_TENANT,
  freePorts,
  Gateway,
  proofConfig,
  writeConfig,
} from "./fixtures/gateway.ts";
import { json, type RawResponse, request } from "./fixtures/http_client.ts";
import { bootEdge, type TestEdge, waitFor } from "./fixtures/in_process.ts";

/** `/v1/config` as served (the fields these tests read). */
interface ConfigView {
  generation: number;
  last_rejected: null | { superseded: boolean; problems: { message: string }[] };
}

async function configOf(port: number): Promise<ConfigView> {
  const response = await request(port, { path: "/v1/config" });
  assert.equal(response.status, 200);
  return json<ConfigView>(response);
}

/** GET `/` on the public lane for `host`: status and body. */
async function get(port: number, host: string): Promise<[number, string]> {
  const response = await request(port, { path: "/", headers: [["Host", host]] });
  return [response.status, response.body];
}

/** Polls until `host` answers 200 with `body` (10 s: a busy machine, a one-second folder check). */
function servedAs(port: number, host: string, body: string): Promise<[number, string]> {
  return waitFor(() => get(port, host), ([s, b]) => s === 200 && b === body, 10_000);
}

/** Polls `/v1/config` until its last rejection says the folder cannot be read. */
function folderGone(port: number): Promise<ConfigView> {
  const gone = (c: ConfigView) =>
    c.last_rejected?.problems.some((p) => p.message.startsWith("Cannot read tenants folder")) ??
      false;
  return waitFor(() => configOf(port), gone, 10_000);
}

function site(host: string, body: string) {
  return { host, routes: [{ name: "home", match: { path: "/" }, respond: { body } }] };
}

/** Writes a tenant file the way an editor does: a temporary file renamed over the target. */
async function saveTenant(dir: string, document: { host: string }): Promise<void> {
  await Deno.writeTextFile(`${dir}/.${document.host}.yaml.swp`, stringify(document));
  await Deno.rename(`${dir}/.${document.host}.yaml.swp`, `${dir}/${document.host}.yaml`);
}

/** Makes a tenants folder from scratch: the demo tenant's asset and `tenants`. */
async function fillFolder(dir: string, tenants: { host: string }[]): Promise<void> {
  await Deno.mkdir(`${dir}/assets`, { recursive: true });
  await Deno.writeTextFile(`${dir}/assets/big.bin`, "small");
  for (const tenant of tenants) {
    await Deno.writeTextFile(`${dir}/${tenant.host}.yaml`, stringify(tenant));
  }
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** A tenant file cut just before its body: it parses, and would serve empty 200s. */
const cut = (host: string) =>
  `host: ${host}\nroutes:\n  - name: home\n    match: { path: / }\n    respond:\n      status: 200\n`;
const REST = "      body: complete\n";

/**
 * Writes `host`'s file in place in two parts, `pauseMs` apart (the writer the README warns about),
 * calling `between` after the first.
 *
 * @returns how far apart the two writes landed, by the file's own mtimes
 */
async function writeInTwoParts(
  dir: string,
  host: string,
  pauseMs: number,
  between: () => void = () => {},
): Promise<number> {
  const path = `${dir}/${host}.yaml`;
  await Deno.writeTextFile(path, cut(host));
  const first = (await Deno.stat(path)).mtime!.getTime();
  between();
  await sleep(pauseMs);
  await Deno.writeTextFile(path, REST, { append: true });
  return (await Deno.stat(path)).mtime!.getTime() - first;
}

/** The debounce of the pausing-writer tests; the gateway waits for twice that of quiet. */
const DEBOUNCE = 200;

/**
 * Runs a pausing-writer trial up to three times: a trial whose writer the machine stalled past the
 * quiet window proves nothing (its cut may rightly be read), so another host is tried.
 */
async function withPausedWriter(trial: (host: string) => Promise<number>): Promise<void> {
  const gaps: number[] = [];
  for (let i = 0; i < 3; i++) {
    const gap = await trial(`paused${i}.test`);
    if (gap < 2 * DEBOUNCE) return;
    gaps.push(gap);
  }
  assert.fail(`The writer never paused less than ${2 * DEBOUNCE} ms (${gaps.join(", ")} ms)`);
}

function bootWithDebounce(watch: boolean, debounceMs: number): Promise<TestEdge> {
  return bootEdge({
    lanes: ["public", "local_health"],
    edit: (config) => config.runtime = { watch, debounce_ms: debounceMs },
  });
}

Deno.test("runtimeReloader never makes a file cut mid-write a generation, though the cut parses", async () => {
  const t = await bootWithDebounce(true, DEBOUNCE);
  const live: Generation[] = [];
  t.edge.services.config.onSwap((generation) => live.push(generation));
  try {
    await withPausedWriter(async (host) => {
      const gap = await writeInTwoParts(`${t.dir.dir}/tenants`, host, DEBOUNCE * 1.4);
      assert.ok(gap > DEBOUNCE, `writes ${gap} ms apart: the debounce alone would join them`);
      assert.deepEqual(await servedAs(t.ports.public, host, "complete"), [200, "complete"]);
      const cuts = live.filter((g) => g.texts.get(`${host}.yaml`) === cut(host));
      if (gap < 2 * DEBOUNCE) {
        assert.deepEqual(cuts.map((g) => g.number), [], `writes ${gap} ms apart`);
      }
      return gap;
    });
  } finally {
    await t.dispose();
  }
});

Deno.test("POST /v1/config/reload waits for a file still being written", async () => {
  const t = await bootWithDebounce(false, DEBOUNCE);
  try {
    await withPausedWriter(async (host) => {
      let answer!: Promise<RawResponse>;
      const reload = () => {
        answer = request(t.ports.local_health, {
          method: "POST",
          path: "/v1/config/reload",
          headers: [ADMIN_AUTH],
        });
      };
      const gap = await writeInTwoParts(`${t.dir.dir}/tenants`, host, DEBOUNCE / 2, reload);
      const reloaded = await answer;
      if (gap < 2 * DEBOUNCE) {
        assert.equal(reloaded.status, 200);
        assert.equal(json(reloaded).outcome, "loaded");
        assert.deepEqual(await get(t.ports.public, host), [200, "complete"]);
      }
      return gap;
    });
  } finally {
    await t.dispose();
  }
});

Deno.test("runtimeReloader makes a file written once and left alone live promptly", async () => {
  const t = await bootWithDebounce(true, 50);
  try {
    await Deno.writeTextFile(
      `${t.dir.dir}/tenants/once.test.yaml`,
      stringify(site("once.test", "once")),
    );
    await waitFor(() => get(t.ports.public, "once.test"), ([s]) => s === 200, 5000);
    const view = await configOf(t.ports.local_health);
    assert.equal(view.generation, 2);
    assert.equal(view.last_rejected, null);
  } finally {
    await t.dispose();
  }
});

Deno.test("runtimeReloader keeps watching a tenants folder deleted and made again", async () => {
  const t = await bootWithDebounce(true, 50);
  const tenants = `${t.dir.dir}/tenants`;
  try {
    await Deno.remove(tenants, { recursive: true });
    assert.equal((await folderGone(t.ports.local_health)).generation, 1);
    assert.deepEqual(await get(t.ports.public, "demo.test"), [200, "tenant-home"]);

    await fillFolder(tenants, [DEMO_TENANT, site("back.test", "back")]);
    await servedAs(t.ports.public, "back.test", "back");
    await saveTenant(tenants, site("back.test", "edited"));
    await servedAs(t.ports.public, "back.test", "edited");
    assert.equal((await configOf(t.ports.local_health)).last_rejected?.superseded, true);
  } finally {
    await t.dispose();
  }
});

Deno.test("runtimeReloader follows a tenants folder moved away and replaced by a rename", async () => {
  const t = await bootWithDebounce(true, 50);
  const tenants = `${t.dir.dir}/tenants`;
  try {
    await Deno.rename(tenants, `${tenants}.old`);
    await folderGone(t.ports.local_health);
    assert.deepEqual(await get(t.ports.public, "demo.test"), [200, "tenant-home"]);
    await fillFolder(`${tenants}.new`, [DEMO_TENANT, site("renamed.test", "renamed")]);
    await Deno.rename(`${tenants}.new`, tenants);
    await servedAs(t.ports.public, "renamed.test", "renamed");
    await saveTenant(tenants, site("renamed.test", "edited"));
    await servedAs(t.ports.public, "renamed.test", "edited");

    // Swapped back to back: the path never goes missing, only the folder behind it changes.
    await fillFolder(`${tenants}.next`, [DEMO_TENANT, site("next.test", "next")]);
    await Deno.rename(tenants, `${tenants}.previous`);
    await Deno.rename(`${tenants}.next`, tenants);
    await servedAs(t.ports.public, "next.test", "next");
    await saveTenant(tenants, site("next.test", "edited"));
    await servedAs(t.ports.public, "next.test", "edited");
  } finally {
    await t.dispose();
  }
});

Deno.test("the gateway re-arms its tenants watch under its derived flags, no read on the parent", async () => {
  const [publicPort, healthPort] = freePorts(2);
  const ports = { public: publicPort, local_health: healthPort, provider_health: 0 };
  const config = proofConfig(ports, { runtime: { watch: true, debounce_ms: 50 } });
  const gateway = await Gateway.start(await writeConfig(config), ports);
  const tenants = `${gateway.dir.dir}/tenants`;
  try {
    const reads = gateway.flags.find((f) => f.startsWith("--allow-read="))!.split("=")[1];
    assert.ok(reads.split(",").includes(tenants), reads);
    assert.ok(!reads.split(",").includes(gateway.dir.dir), reads);

    await Deno.remove(tenants, { recursive: true });
    assert.equal((await folderGone(healthPort)).generation, 1);
    assert.deepEqual(await get(publicPort, "demo.test"), [200, "tenant-home"]);
    await fillFolder(tenants, [DEMO_TENANT, site("back.test", "back")]);
    await servedAs(publicPort, "back.test", "back");
    await saveTenant(tenants, site("back.test", "edited"));
    await servedAs(publicPort, "back.test", "edited");

    await fillFolder(`${tenants}.next`, [DEMO_TENANT, site("next.test", "next")]);
    await Deno.rename(tenants, `${tenants}.previous`);
    await Deno.rename(`${tenants}.next`, tenants);
    await servedAs(publicPort, "next.test", "next");
    await saveTenant(tenants, site("next.test", "edited"));
    await servedAs(publicPort, "next.test", "edited");
    assert.doesNotMatch(gateway.stderr, /NotCapable|cannot watch/i);
  } finally {
    await gateway.dispose();
  }
});
