/**
 * Unit tests for `loadConfig()`: path resolution against the config file's folder and the defaults
 * of the optional sections.
 *
 * @module
 */
import assert from "node:assert/strict";
import { join, relative } from "node:path";
import { loadConfig, tenantsFolderOf } from "../src/config/load.ts";
import { MINIMAL, writeConfigText } from "./fixtures/config_files.ts";

const ROOT = new URL("../", import.meta.url).pathname;

Deno.test("loadConfig() resolves tenants_dir against the config file's folder", async () => {
  const file = await writeConfigText(
    MINIMAL.replace("tenants_dir: tenants", "tenants_dir: ./a/../t"),
  );
  const config = await loadConfig(file);
  assert.equal(tenantsFolderOf(config)!, join(file, "..", "t"));
});

Deno.test("loadConfig() keeps an absolute tenants_dir as written", async () => {
  const config = await loadConfig(
    await writeConfigText(MINIMAL.replace("tenants_dir: tenants", "tenants_dir: /srv/tenants")),
  );
  assert.equal(tenantsFolderOf(config)!, "/srv/tenants");
});

Deno.test("loadConfig() keeps paths relative when the config path is relative", async () => {
  const config = await loadConfig(relative(Deno.cwd(), join(ROOT, "deploy/example/config.yaml")));
  assert.equal(
    tenantsFolderOf(config)!,
    relative(Deno.cwd(), join(ROOT, "deploy/example/tenants")),
  );
});

Deno.test("loadConfig() resolves unix socket paths against the config folder", async () => {
  const file = await writeConfigText(MINIMAL.replace(
    "ledger:",
    "  local_health:\n    listen: [{ path: run/local.sock }, { path: /run/abs.sock }]\nledger:",
  ));
  const config = await loadConfig(file);
  assert.deepEqual(config.lanes.local_health?.listen, [
    { kind: "unix", path: join(file, "..", "run", "local.sock") },
    { kind: "unix", path: "/run/abs.sock" },
  ]);
});

Deno.test("loadConfig() applies defaults for timeouts, limits and drain", async () => {
  const config = await loadConfig(await writeConfigText(MINIMAL));
  assert.deepEqual(config.timeouts, {
    headerMs: 10_000,
    idleMs: 30_000,
    requestMs: 300_000,
    sendMs: 30_000,
    minSendRate: 1024,
    tunnelIdleMs: undefined,
  });
  assert.deepEqual(config.paths, { mergeSlashes: true, escapedSlashes: "reject" });
  // Nothing names the gateway by default (issue 34): no Via either way, no backend headers.
  assert.deepEqual(config.forwarding.via, { backends: undefined, clients: undefined });
  assert.deepEqual(config.forwarding.backendHeaders, {
    tenant: undefined,
    route: undefined,
    requestId: undefined,
  });
  assert.equal(config.forwarding.healthUserAgent, undefined);
  assert.equal(config.admin.realm, undefined);
  assert.equal(config.forwarding.clientIpHeaders.length, 48);
  assert.equal(config.sharedEventLoop, false);
  assert.deepEqual(config.limits, { headerBytes: 16_384, headers: 100, targetBytes: 8192 });
  assert.equal(config.drainMs, 30_000);
  assert.deepEqual(config.ledger.lanes, {});
  assert.deepEqual(Object.keys(config.lanes), ["public"]);
  assert.equal(config.lanes.public?.allow, undefined);
});

Deno.test("loadConfig() fills the unset fields of a partly given section", async () => {
  const config = await loadConfig(
    await writeConfigText(
      `${MINIMAL}timeouts: { idle_ms: 500 }\nlimits: { headers: 20 }\ndrain: {}\n`,
    ),
  );
  assert.deepEqual(config.timeouts, {
    headerMs: 10_000,
    idleMs: 500,
    requestMs: 300_000,
    sendMs: 30_000,
    minSendRate: 1024,
    tunnelIdleMs: undefined,
  });
  assert.deepEqual(config.limits, { headerBytes: 16_384, headers: 20, targetBytes: 8192 });
  assert.equal(config.drainMs, 30_000);
});
