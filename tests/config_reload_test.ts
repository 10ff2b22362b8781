/**
 * Local mode's live configuration on an in-process edge: the watched tenants folder becomes a new
 * generation when it changes, an invalid change is rejected whole (the live generation serves on,
 * `/v1/config` shows why), `POST /v1/config/reload` forces a read, policy state survives a reload
 * that leaves the policy alone, and a stream of reloads under steady proxied load fails no request.
 *
 * @module
 */
import assert from "node:assert/strict";
import { stringify } from "yaml";
import { json, request } from "./fixtures/http_client.ts";
import { bootEdge, type TestEdge, waitFor } from "./fixtures/in_process.ts";
import { UpstreamFixture } from "./fixtures/upstream.ts";
import { ADMIN_AUTH } from "./fixtures/gateway.ts";

/** `/v1/config` as served. */
interface ConfigView {
  generation: number;
  hash: string;
  source: string;
  tenants: number;
  last_rejected: null | {
    generation: number;
    problems: { file: string; path: string; value?: unknown; message: string }[];
  };
}

async function configOf(t: TestEdge): Promise<ConfigView> {
  const response = await request(t.ports.local_health, { path: "/v1/config" });
  assert.equal(response.status, 200);
  return json<ConfigView>(response);
}

/** GET `path` on the public lane for `host`: status and body. */
async function get(t: TestEdge, host: string, path = "/"): Promise<[number, string]> {
  const response = await request(t.ports.public, { path, headers: [["Host", host]] });
  return [response.status, response.body];
}

function tenantsDir(t: TestEdge): string {
  return `${t.dir.dir}/tenants`;
}

/** Writes a tenant file the way an editor does: a temporary file renamed over the target. */
async function saveTenant(t: TestEdge, document: Record<string, unknown>): Promise<void> {
  const target = `${tenantsDir(t)}/${document.host}.yaml`;
  const temporary = `${tenantsDir(t)}/.${document.host}.yaml.swp`;
  await Deno.writeTextFile(temporary, stringify(document));
  await Deno.rename(temporary, target);
}

function site(host: string, body: string) {
  return { host, routes: [{ name: "home", match: { path: "/" }, respond: { body } }] };
}

const FAST = (config: Record<string, unknown>) => {
  config.runtime = { watch: true, debounce_ms: 50 };
};

Deno.test("a changed tenants folder becomes the next generation", async () => {
  const t = await bootEdge({ lanes: ["public", "local_health"], edit: FAST });
  try {
    const first = await configOf(t);
    assert.equal(first.generation, 1);
    assert.equal(first.source, "directory");
    assert.equal((await get(t, "new.test"))[0], 421);

    await saveTenant(t, site("new.test", "fresh"));
    const second = await waitFor(() => configOf(t), (c) => c.generation === 2, 5000);
    assert.notEqual(second.hash, first.hash);
    assert.equal(second.tenants, 2);
    assert.deepEqual(await get(t, "new.test"), [200, "fresh"]);
    assert.equal((await get(t, "demo.test"))[0], 200, "untouched tenants serve on");

    await Deno.remove(`${tenantsDir(t)}/new.test.yaml`);
    await waitFor(() => configOf(t), (c) => c.generation === 3, 5000);
    assert.equal((await get(t, "new.test"))[0], 421);
    assert.ok(t.lines.some((l) => /config generation 3 loaded/.test(l)));
  } finally {
    await t.dispose();
  }
});

Deno.test("an invalid change is rejected whole: the live generation serves on", async () => {
  const t = await bootEdge({ lanes: ["public", "local_health"], edit: FAST });
  try {
    // One good file and one bad one arrive together: neither may go live.
    await saveTenant(t, site("good.test", "good"));
    await Deno.writeTextFile(
      `${tenantsDir(t)}/bad.test.yaml`,
      "host: bad.test\nroutes:\n  - match: { path: / }\n    respond: { status: 99 }\n",
    );
    const view = await waitFor(() => configOf(t), (c) => c.last_rejected !== null, 5000);
    assert.equal(view.generation, 1, "nothing was swapped in");
    assert.equal((await get(t, "good.test"))[0], 421, "not even the valid file");
    assert.equal((await get(t, "demo.test"))[0], 200);
    const problem = view.last_rejected!.problems.find((p) => p.file.endsWith("bad.test.yaml"));
    assert.equal(problem?.path, "routes[0].respond.status");
    assert.equal(problem?.value, 99);
    assert.ok(t.lines.some((l) => l.includes("config rejected; generation 1 stays live")));

    // Fixing the file makes the whole set live at once, and the log says so.
    await saveTenant(t, site("bad.test", "fixed"));
    await waitFor(() => configOf(t), (c) => c.generation === 2, 5000);
    assert.deepEqual(await get(t, "good.test"), [200, "good"]);
    assert.deepEqual(await get(t, "bad.test"), [200, "fixed"]);
    const config = t.lines.filter((l) => /config (rejected|accepted|generation)/.test(l));
    assert.match(
      config.at(-1) ?? "",
      /^portcullis: config accepted, generation 2: .* is valid again/,
    );
  } finally {
    await t.dispose();
  }
});

Deno.test("a rejected change that is undone logs config accepted for the live generation", async () => {
  const t = await bootEdge({ lanes: ["public", "local_health"], edit: FAST });
  try {
    await Deno.writeTextFile(`${tenantsDir(t)}/bad.test.yaml`, "host: bad.test\nroutes: 7\n");
    await waitFor(() => configOf(t), (c) => c.last_rejected !== null, 5000);
    assert.ok(t.lines.some((l) => l.includes("config rejected; generation 1 stays live")));
    assert.ok(!t.lines.some((l) => l.includes("config accepted")), "nothing accepted yet");
    // The folder is as it was: no new generation, but the rejection no longer describes it.
    await Deno.remove(`${tenantsDir(t)}/bad.test.yaml`);
    const accepted = await waitFor(
      () => t.lines.filter((l) => l.includes("config accepted")),
      (lines) => lines.length > 0,
      5000,
    );
    assert.equal(accepted.length, 1);
    assert.match(accepted[0], /^portcullis: config accepted, generation 1: /);
    assert.equal((await configOf(t)).generation, 1);
    assert.equal((await get(t, "demo.test"))[0], 200);
  } finally {
    await t.dispose();
  }
});

Deno.test("POST /v1/config/reload reads the folder now, watch or not", async () => {
  const t = await bootEdge({
    lanes: ["public", "local_health"],
    edit: (config) => config.runtime = { watch: false },
  });
  try {
    await saveTenant(t, site("manual.test", "manual"));
    await new Promise((resolve) => setTimeout(resolve, 300));
    assert.equal((await get(t, "manual.test"))[0], 421, "no watch: nothing happens by itself");
    const reload = await request(t.ports.local_health, {
      method: "POST",
      path: "/v1/config/reload",
      headers: [ADMIN_AUTH],
    });
    assert.equal(reload.status, 200);
    assert.equal(json(reload).outcome, "loaded");
    assert.deepEqual(await get(t, "manual.test"), [200, "manual"]);
    const again = await request(t.ports.local_health, {
      method: "POST",
      path: "/v1/config/reload",
      headers: [ADMIN_AUTH],
    });
    assert.equal(json(again).outcome, "unchanged");
    assert.equal(json(again).generation, 2);

    await Deno.writeTextFile(`${tenantsDir(t)}/manual.test.yaml`, "host: [unclosed\n");
    const bad = await request(t.ports.local_health, {
      method: "POST",
      path: "/v1/config/reload",
      headers: [ADMIN_AUTH],
    });
    assert.equal(bad.status, 422);
    assert.equal(json(bad).outcome, "rejected");
    assert.deepEqual(await get(t, "manual.test"), [200, "manual"]);
  } finally {
    await t.dispose();
  }
});

Deno.test("a reload that leaves a policy alone keeps its state", async () => {
  const limited = {
    ...site("limited.test", "ok"),
    policies: { rate_limit: { per_second: 0.01, burst: 1 } },
  };
  const t = await bootEdge({ lanes: ["public", "local_health"], edit: FAST, tenants: [limited] });
  try {
    assert.equal((await get(t, "limited.test"))[0], 200);
    assert.equal((await get(t, "limited.test"))[0], 429);
    await saveTenant(t, {
      ...limited,
      routes: [...limited.routes, { match: { path: "/x" }, respond: { body: "x" } }],
    });
    await waitFor(() => configOf(t), (c) => c.generation === 2, 5000);
    assert.equal((await get(t, "limited.test", "/x"))[0], 429, "the emptied bucket carried over");
  } finally {
    await t.dispose();
  }
});

Deno.test("reloads under steady proxied load fail no request", async () => {
  const upstream = await UpstreamFixture.start();
  const backend = `http://127.0.0.1:${upstream.port}`;
  const shop = {
    host: "shop.test",
    routes: [{ name: "api", match: { prefix: "/api/" }, proxy: { backends: [{ url: backend }] } }],
  };
  const t = await bootEdge({
    lanes: ["public", "local_health"],
    tenants: [shop],
    edit(config) {
      FAST(config);
      config.egress = { direct: [`127.0.0.1:${upstream.port}`] };
    },
  });
  try {
    let stop = false;
    const statuses: number[] = [];
    const clients = Array.from({ length: 4 }, async () => {
      while (!stop) {
        const response = await request(t.ports.public, {
          path: "/api/echo",
          headers: [["Host", "shop.test"]],
        });
        statuses.push(response.status);
      }
    });
    // Add and remove a tenant, and change the proxied tenant itself, over and over: eight rounds,
    // and more (up to 40) while fewer than eight generations went live — on a busy machine the
    // watcher reads late and folds changes together.
    const live = async () => (await configOf(t)).generation;
    for (let i = 0; i < 8 || (i < 40 && await live() < 8); i++) {
      await saveTenant(t, site(`churn${i}.test`, `v${i}`));
      await saveTenant(t, { ...shop, aliases: [`alias${i}.shop.test`] });
      await new Promise((resolve) => setTimeout(resolve, 120));
      await Deno.remove(`${tenantsDir(t)}/churn${i}.test.yaml`);
      await new Promise((resolve) => setTimeout(resolve, 120));
    }
    // The last change may still be waiting out its debounce: poll, with a deadline.
    for (const until = Date.now() + 10_000; await live() < 8 && Date.now() < until;) {
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    stop = true;
    await Promise.all(clients);
    const view = await configOf(t);
    assert.ok(view.generation >= 8, `only ${view.generation} generations went live`);
    assert.ok(statuses.length > 50, `only ${statuses.length} requests`);
    assert.deepEqual(
      statuses.filter((s) => s !== 200),
      [],
      `${statuses.length} requests, generation ${view.generation}`,
    );
  } finally {
    await t.dispose();
    await upstream.stop();
  }
});
