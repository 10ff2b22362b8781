/**
 * Unit tests for the boot-time permission audit (`audit.ts`), driven by a fake permission query
 * that models Deno's flag semantics: an unscoped flag grants everything, `host` without a port
 * grants every port, and a scoped flag answers "prompt" to an unscoped query.
 *
 * @module
 */
import assert from "node:assert/strict";
import { auditPermissions, type PermissionQuery } from "../src/boot/audit.ts";
import { type Grant, requiredGrants } from "../src/boot/flags.ts";
import { loadConfig } from "../src/config/load.ts";

/** One permission as held: `true` (unscoped), listed values, or a predicate (CIDR, wildcard). */
type Scope = true | readonly string[] | ((value: string) => boolean);

/** What the fake process holds, by permission name; absent means not granted. */
type Held = Partial<Record<Deno.PermissionDescriptor["name"], Scope>> & { all?: true };

/** A permission query that answers like Deno started with `held`. */
function fakeQuery(held: Held): PermissionQuery {
  return (descriptor) => {
    if (held.all) return "granted";
    const scope = held[descriptor.name];
    if (scope === undefined) return "prompt";
    if (scope === true) return "granted";
    const value = "host" in descriptor
      ? descriptor.host
      : "path" in descriptor
      ? descriptor.path?.toString()
      : "command" in descriptor
      ? descriptor.command?.toString()
      : "variable" in descriptor
      ? descriptor.variable
      : undefined;
    if (value === undefined) return "prompt";
    if (typeof scope === "function") return scope(value) ? "granted" : "prompt";
    const portless = value.replace(/:\d+$/, "");
    return scope.some((g) => g === value || (descriptor.name === "net" && g === portless))
      ? "granted"
      : "prompt";
  };
}

const EXAMPLE = new URL("../deploy/example/config.yaml", import.meta.url).pathname;
const GRANTS: readonly Grant[] = requiredGrants(await loadConfig(EXAMPLE));
const NET = ["127.0.0.1:8080", "127.0.0.1:9901", "127.0.0.1:9902"];
/** The example runs its public lane in a request worker, whose code is read from the checkout. */
const CODE = GRANTS.filter((g) => g.purpose === "request worker code").map((g) => g.value);
const READ = [EXAMPLE, EXAMPLE.replace(/config\.yaml$/, "tenants"), ...CODE];
/** Exactly the grants the example config needs. */
const EXACT: Held = { net: NET, read: READ };

Deno.test("auditPermissions() accepts exactly the grants the config needs", () => {
  assert.deepEqual(auditPermissions(GRANTS, fakeQuery(EXACT)), { refusals: [], warnings: [] });
});

Deno.test("auditPermissions() refuses -A with a reason per ambient authority", () => {
  const result = auditPermissions(GRANTS, fakeQuery({ all: true }));
  assert.deepEqual(result.refusals, [
    "Unscoped --allow-net (or -A) grants every host; grant only the configured ones",
    "--allow-run grants running programs; Portcullis never needs it",
    "--allow-ffi grants loading native code; Portcullis never needs it",
    "Unscoped --allow-write grants writing every file; grant only socket paths",
  ]);
  assert.deepEqual(result.warnings, [
    "Unscoped --allow-read grants reading every file",
    "Unscoped --allow-env grants reading every variable",
    "--allow-sys grants system information",
  ]);
});

Deno.test("auditPermissions() refuses unscoped --allow-net", () => {
  const result = auditPermissions(GRANTS, fakeQuery({ ...EXACT, net: true }));
  assert.deepEqual(result.refusals, [
    "Unscoped --allow-net (or -A) grants every host; grant only the configured ones",
  ]);
  assert.deepEqual(result.warnings, []);
});

Deno.test("auditPermissions() refuses --allow-run, unscoped or for a shell", () => {
  const refusal = "--allow-run grants running programs; Portcullis never needs it";
  for (const run of [true, ["sh"], ["/bin/sh"], ["bash"], ["deno"]] as Scope[]) {
    assert.deepEqual(
      auditPermissions(GRANTS, fakeQuery({ ...EXACT, run })).refusals,
      [refusal],
      `--allow-run=${run}`,
    );
  }
});

Deno.test("auditPermissions() refuses --allow-ffi", () => {
  assert.deepEqual(auditPermissions(GRANTS, fakeQuery({ ...EXACT, ffi: true })).refusals, [
    "--allow-ffi grants loading native code; Portcullis never needs it",
  ]);
});

Deno.test("auditPermissions() refuses unscoped --allow-write but not a scoped one", () => {
  assert.deepEqual(auditPermissions(GRANTS, fakeQuery({ ...EXACT, write: true })).refusals, [
    "Unscoped --allow-write grants writing every file; grant only socket paths",
  ]);
  assert.deepEqual(
    auditPermissions(GRANTS, fakeQuery({ ...EXACT, write: ["/run/portcullis"] })).refusals,
    [],
  );
});

Deno.test("auditPermissions() refuses a CIDR or wildcard net grant that reaches a canary", () => {
  const cidr = (host: string) => NET.includes(host) || host.startsWith("203.0.113.");
  assert.deepEqual(auditPermissions(GRANTS, fakeQuery({ ...EXACT, net: cidr })).refusals, [
    "--allow-net reaches 203.0.113.77:443, which no configured listener needs; " +
    "grant exact host:port pairs",
  ]);
  const wildcard = (host: string) => NET.includes(host) || host.endsWith(".invalid:443");
  assert.deepEqual(auditPermissions(GRANTS, fakeQuery({ ...EXACT, net: wildcard })).refusals, [
    "--allow-net reaches canary.portcullis.invalid:443, which no configured listener needs; " +
    "grant exact host:port pairs",
  ]);
  const v6 = (host: string) => NET.includes(host) || host.startsWith("[2001:db8:");
  assert.deepEqual(auditPermissions(GRANTS, fakeQuery({ ...EXACT, net: v6 })).refusals, [
    "--allow-net reaches [2001:db8::77]:443, which no configured listener needs; " +
    "grant exact host:port pairs",
  ]);
});

Deno.test("auditPermissions() refuses a host granted on every port", () => {
  const result = auditPermissions(GRANTS, fakeQuery({ ...EXACT, net: ["127.0.0.1"] }));
  assert.deepEqual(result.refusals, [
    "--allow-net grants every port of 127.0.0.1 (127.0.0.1:1 is granted); " +
    "grant exact host:port pairs",
  ]);
});

Deno.test("auditPermissions() picks a canary port the config does not use", () => {
  const grants: Grant[] = [
    { name: "net", value: "[::1]:1", purpose: 'lane "public" listener' },
    { name: "net", value: "[::1]:2", purpose: 'lane "local_health" listener' },
  ];
  assert.deepEqual(auditPermissions(grants, fakeQuery({ net: ["[::1]"] })).refusals, [
    "--allow-net grants every port of [::1] ([::1]:3 is granted); grant exact host:port pairs",
  ]);
});

Deno.test("auditPermissions() names each missing grant with its purpose", () => {
  const result = auditPermissions(
    GRANTS,
    fakeQuery({ net: ["127.0.0.1:8080"], read: [READ[1]] }),
  );
  assert.deepEqual(result.refusals, [
    'Missing --allow-net=127.0.0.1:9901 (needed by the lane "local_health" listener)',
    'Missing --allow-net=127.0.0.1:9902 (needed by the lane "provider_health" listener)',
    `Missing --allow-read=${EXAMPLE} (needed by the config file)`,
    ...CODE.map((folder) => `Missing --allow-read=${folder} (needed by the request worker code)`),
  ]);
});

Deno.test("auditPermissions() names missing socket read and write grants", () => {
  const grants: Grant[] = [
    { name: "net", value: "unix:/run/p/local.sock", purpose: 'lane "local_health" listener' },
    { name: "read", value: "/run/p/local.sock", purpose: 'lane "local_health" listener' },
    { name: "write", value: "/run/p/local.sock", purpose: 'lane "local_health" listener' },
    { name: "ignore-env", value: "LOG_STREAM", purpose: "yaml parser debug switch" },
  ];
  assert.deepEqual(
    auditPermissions(grants, fakeQuery({ net: ["unix:/run/p/local.sock"] })).refusals,
    [
      'Missing --allow-read=/run/p/local.sock (needed by the lane "local_health" listener)',
      'Missing --allow-write=/run/p/local.sock (needed by the lane "local_health" listener)',
    ],
  );
});

Deno.test("auditPermissions() only warns about unscoped --allow-read", () => {
  assert.deepEqual(auditPermissions(GRANTS, fakeQuery({ net: NET, read: true })), {
    refusals: [],
    warnings: ["Unscoped --allow-read grants reading every file"],
  });
});

Deno.test("auditPermissions() defaults to Deno's own permission query", () => {
  const held = (name: "write" | "read") => Deno.permissions.querySync({ name }).state === "granted";
  const result = auditPermissions(GRANTS);
  assert.equal(
    result.refusals.includes(
      "Unscoped --allow-write grants writing every file; grant only socket paths",
    ),
    held("write"),
  );
  assert.equal(
    result.warnings.includes("Unscoped --allow-read grants reading every file"),
    held("read"),
  );
});
