/**
 * Unit tests for the permission flags the `egress` section adds: each SOCKS instance and each
 * `direct` upstream is a `--allow-net` entry after the listeners, and the boot audit names a
 * missing one by its purpose.
 *
 * @module
 */
import assert from "node:assert/strict";
import { auditPermissions, type PermissionQuery } from "../src/boot/audit.ts";
import { formatFlags, requiredGrants } from "../src/boot/flags.ts";
import { type EdgeConfig, loadConfig, tenantsFolderOf } from "../src/config/load.ts";
import { MINIMAL, writeConfigText } from "./fixtures/config_files.ts";

/** MINIMAL (public on 127.0.0.1:8080) plus a local_health listener and this egress section. */
async function configWith(egress: string): Promise<EdgeConfig> {
  const text = MINIMAL.replace(
    "ledger:",
    "  local_health: { listen: [{ hostname: 127.0.0.1, port: 9901 }] }\nledger:",
  );
  return await loadConfig(await writeConfigText(`${text}egress:\n${egress}`));
}

const EGRESS = '  socks: [{ hostname: 127.0.0.1, port: 9050 }, { hostname: "::1", port: 9050 }]\n' +
  '  direct: ["10.0.0.5:8080", "[2001:db8::5]:80"]\n';

/** The checkout's code folders a request worker reads (the config has a protected lane). */
function workerCode(config: EdgeConfig): string[] {
  return requiredGrants(config).filter((g) => g.purpose === "request worker code").map((g) =>
    g.value
  );
}

/** Every read grant of the config: its file, its tenants folder, the worker code, the hosts file. */
function reads(config: EdgeConfig): string[] {
  return [config.file, tenantsFolderOf(config)!, ...workerCode(config), "/etc/hosts"];
}

/** The sys kinds every edge holds (flags.ts LOCAL_MACHINE_GRANTS). */
const SYS = ["hostname", "networkInterfaces"];

/** A query that grants exactly `net` hosts and `read` paths, and nothing unscoped. */
function exactly(net: readonly string[], read: readonly string[]): PermissionQuery {
  return (descriptor) => {
    if (descriptor.name === "net") {
      return descriptor.host !== undefined && net.includes(descriptor.host) ? "granted" : "prompt";
    }
    if (descriptor.name === "read") {
      const path = descriptor.path?.toString();
      return path !== undefined && read.includes(path) ? "granted" : "prompt";
    }
    if (descriptor.name === "sys") {
      return descriptor.kind !== undefined && SYS.includes(descriptor.kind) ? "granted" : "prompt";
    }
    return "prompt";
  };
}

Deno.test("requiredGrants() lists SOCKS instances, then direct targets, after the listeners", async () => {
  const config = await configWith(EGRESS);
  const net = requiredGrants(config).filter((g) => g.name === "net");
  assert.deepEqual(net.map((g) => [g.value, g.purpose]), [
    ["127.0.0.1:8080", 'lane "public" listener'],
    ["127.0.0.1:9901", 'lane "local_health" listener'],
    ["127.0.0.1:9050", "SOCKS instance"],
    ["[::1]:9050", "SOCKS instance"],
    ["10.0.0.5:8080", "direct upstream"],
    ["[2001:db8::5]:80", "direct upstream"],
  ]);
});

Deno.test("formatFlags() puts egress targets in --allow-net, in order, after the listeners", async () => {
  const config = await configWith(EGRESS);
  const flags = formatFlags(requiredGrants(config)).split(" ");
  assert.equal(
    flags[0],
    "--allow-net=127.0.0.1:8080,127.0.0.1:9901,127.0.0.1:9050,[::1]:9050," +
      "10.0.0.5:8080,[2001:db8::5]:80",
  );
  assert.deepEqual(flags.slice(1), [
    `--allow-read=${reads(config).join(",")}`,
    `--allow-sys=${SYS.join(",")}`,
    "--ignore-env=LOG_STREAM,LOG_TOKENS",
  ]);
});

Deno.test("formatFlags() collapses a target given twice, or as both SOCKS and direct", async () => {
  const config = await configWith(
    "  socks: [{ hostname: 127.0.0.1, port: 9050 }, { hostname: 127.0.0.1, port: 9050 }]\n" +
      '  direct: ["10.0.0.5:8080", "127.0.0.1:9050", "10.0.0.5:8080"]\n',
  );
  const grants = requiredGrants(config).filter((g) => g.name === "net");
  assert.equal(grants.length, 7, "every grant is listed with its own purpose");
  assert.equal(
    formatFlags(grants),
    "--allow-net=127.0.0.1:8080,127.0.0.1:9901,127.0.0.1:9050,10.0.0.5:8080",
  );
});

Deno.test("requiredGrants() adds no net grant when the egress section is absent", async () => {
  const config = await loadConfig(await writeConfigText(MINIMAL));
  assert.deepEqual(
    requiredGrants(config).filter((g) => g.name === "net").map((g) => g.value),
    ["127.0.0.1:8080"],
  );
});

Deno.test("auditPermissions() accepts exactly the listener, SOCKS and direct grants", async () => {
  const config = await configWith(EGRESS);
  const net = requiredGrants(config).filter((g) => g.name === "net").map((g) => g.value);
  const result = auditPermissions(
    requiredGrants(config),
    exactly(net, reads(config)),
  );
  assert.deepEqual(result, { refusals: [], warnings: [] });
});

Deno.test("auditPermissions() names a missing SOCKS grant and a missing direct grant", async () => {
  const config = await configWith(EGRESS);
  const held = ["127.0.0.1:8080", "127.0.0.1:9901", "[::1]:9050", "10.0.0.5:8080"];
  const result = auditPermissions(
    requiredGrants(config),
    exactly(held, reads(config)),
  );
  assert.deepEqual(result.refusals, [
    "Missing --allow-net=127.0.0.1:9050 (needed by the SOCKS instance)",
    "Missing --allow-net=[2001:db8::5]:80 (needed by the direct upstream)",
  ]);
  assert.deepEqual(result.warnings, []);
});

Deno.test("auditPermissions() refuses every port of a SOCKS host being granted", async () => {
  const config = await configWith("  socks: [{ hostname: 10.9.9.9, port: 9050 }]\n");
  const net = requiredGrants(config).filter((g) => g.name === "net").map((g) => g.value);
  const hostWide: PermissionQuery = (descriptor) =>
    descriptor.name === "net" && descriptor.host?.startsWith("10.9.9.9:")
      ? "granted"
      : exactly(net, reads(config))(descriptor);
  assert.deepEqual(auditPermissions(requiredGrants(config), hostWide).refusals, [
    "--allow-net grants every port of 10.9.9.9 (10.9.9.9:1 is granted); " +
    "grant exact host:port pairs",
  ]);
});
