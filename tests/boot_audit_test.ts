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
      : "kind" in descriptor
      ? descriptor.kind
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
const READ = [EXAMPLE, EXAMPLE.replace(/config\.yaml$/, "tenants"), ...CODE, "/etc/hosts"];
/** What the own-listener check reads of the machine (flags.ts LOCAL_MACHINE_GRANTS). */
const SYS = ["hostname", "networkInterfaces"];
/** Exactly the grants the example config needs. */
const EXACT: Held = { net: NET, read: READ, sys: SYS };

Deno.test("auditPermissions() accepts exactly the grants the config needs", () => {
  assert.deepEqual(auditPermissions(GRANTS, fakeQuery(EXACT)), { refusals: [], warnings: [] });
});

/** The refusals' closing clauses: the derived flag for a permission, or that there is none. */
const NEEDS_NET = `the config needs --allow-net=${NET.join(",")}`;
const NEEDS_READ = `the config needs --allow-read=${
  GRANTS.filter((g) => g.name === "read")
    .map((g) => g.value).join(",")
}`;

Deno.test("auditPermissions() refuses -A with a reason per ambient authority", () => {
  const result = auditPermissions(GRANTS, fakeQuery({ all: true }));
  assert.deepEqual(result.refusals, [
    `Unscoped --allow-net (or -A) grants every host; ${NEEDS_NET}`,
    "--allow-run grants running programs (unscoped); the config needs no --allow-run",
    "--allow-ffi grants loading native code (unscoped); the config needs no --allow-ffi",
    "Unscoped --allow-write grants writing every file; the config needs no --allow-write",
    `Unscoped --allow-read grants reading every file; ${NEEDS_READ}`,
    "Unscoped --allow-env grants reading every variable; the config needs no --allow-env, only " +
    "--ignore-env=LOG_STREAM,LOG_TOKENS (Deno reads OTEL_* itself)",
    "Unscoped --allow-sys grants all system information; the config needs " +
    "--allow-sys=hostname,networkInterfaces",
    "Unscoped --allow-import grants loading code from every host; the config needs no " +
    "--allow-import",
  ]);
  assert.deepEqual(result.warnings, []);
});

Deno.test("auditPermissions() refuses unscoped --allow-net", () => {
  const result = auditPermissions(GRANTS, fakeQuery({ ...EXACT, net: true }));
  assert.deepEqual(result.refusals, [
    `Unscoped --allow-net (or -A) grants every host; ${NEEDS_NET}`,
  ]);
  assert.deepEqual(result.warnings, []);
});

Deno.test("auditPermissions() refuses --allow-run, unscoped or for a shell", () => {
  assert.deepEqual(auditPermissions(GRANTS, fakeQuery({ ...EXACT, run: true })).refusals, [
    "--allow-run grants running programs (unscoped); the config needs no --allow-run",
  ]);
  for (const command of ["sh", "/bin/sh", "bash", "deno"]) {
    assert.deepEqual(
      auditPermissions(GRANTS, fakeQuery({ ...EXACT, run: [command] })).refusals,
      [`--allow-run reaches ${command}, which the config does not need; the config needs no --allow-run`],
      `--allow-run=${command}`,
    );
  }
});

Deno.test("auditPermissions() refuses --allow-ffi", () => {
  assert.deepEqual(auditPermissions(GRANTS, fakeQuery({ ...EXACT, ffi: true })).refusals, [
    "--allow-ffi grants loading native code (unscoped); the config needs no --allow-ffi",
  ]);
});

Deno.test("auditPermissions() refuses unscoped --allow-write, and a scoped one the config lacks", () => {
  assert.deepEqual(auditPermissions(GRANTS, fakeQuery({ ...EXACT, write: true })).refusals, [
    "Unscoped --allow-write grants writing every file; the config needs no --allow-write",
  ]);
  const under = (base: string) => (path: string) => path === base || path.startsWith(`${base}/`);
  assert.deepEqual(
    auditPermissions(GRANTS, fakeQuery({ ...EXACT, write: under("/tmp") })).refusals,
    ["--allow-write reaches /tmp, which the config does not need; the config needs no --allow-write"],
  );
});

Deno.test("auditPermissions() refuses a CIDR or wildcard net grant that reaches a canary", () => {
  const refusal = (found: string) =>
    `--allow-net reaches ${found}, which the config does not need; ${NEEDS_NET}`;
  const cidr = (host: string) => NET.includes(host) || host.startsWith("203.0.113.");
  assert.deepEqual(auditPermissions(GRANTS, fakeQuery({ ...EXACT, net: cidr })).refusals, [
    refusal("203.0.113.77:443 (a documentation address)"),
  ]);
  const wildcard = (host: string) => NET.includes(host) || host.endsWith(".invalid:443");
  assert.deepEqual(auditPermissions(GRANTS, fakeQuery({ ...EXACT, net: wildcard })).refusals, [
    refusal("canary.portcullis.invalid:443 (a documentation address)"),
  ]);
  const v6 = (host: string) => NET.includes(host) || host.startsWith("[2001:db8:");
  assert.deepEqual(auditPermissions(GRANTS, fakeQuery({ ...EXACT, net: v6 })).refusals, [
    refusal("[2001:db8::77]:443 (a documentation address)"),
  ]);
});

Deno.test("auditPermissions() refuses a host granted on every port", () => {
  const result = auditPermissions(GRANTS, fakeQuery({ ...EXACT, net: ["127.0.0.1"] }));
  assert.deepEqual(result.refusals, [
    "--allow-net grants every port of 127.0.0.1 (127.0.0.1:1 is granted); " +
    "grant exact host:port pairs",
  ]);
});

Deno.test("auditPermissions() probes only ports the config does not use", () => {
  const grants: Grant[] = [
    { name: "net", value: "[::1]:1", purpose: 'lane "public" listener' },
    { name: "net", value: "[::1]:2", purpose: 'lane "local_health" listener' },
  ];
  assert.deepEqual(auditPermissions(grants, fakeQuery({ net: ["[::1]:1", "[::1]:2"] })), {
    refusals: [],
    warnings: [],
  });
  assert.deepEqual(auditPermissions(grants, fakeQuery({ net: ["[::1]"] })).refusals, [
    "--allow-net grants every port of [::1] ([::1]:65535 is granted); " +
    "grant exact host:port pairs",
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
    "Missing --allow-read=/etc/hosts (needed by the own-listener check (names of this machine))",
    "Missing --allow-sys=hostname (needed by the own-listener check (the host name))",
    "Missing --allow-sys=networkInterfaces (needed by the own-listener check " +
    "(addresses of this machine))",
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

Deno.test("auditPermissions() refuses unscoped --allow-read", () => {
  assert.deepEqual(auditPermissions(GRANTS, fakeQuery({ net: NET, read: true, sys: SYS })), {
    refusals: [`Unscoped --allow-read grants reading every file; ${NEEDS_READ}`],
    warnings: [],
  });
});

Deno.test("auditPermissions() defaults to Deno's own permission query", () => {
  // The test task grants unscoped read, write, run and env, and every port of loopback.
  const held = (name: "read" | "write" | "run" | "env") =>
    Deno.permissions.querySync({ name }).state === "granted";
  const { refusals } = auditPermissions(GRANTS);
  const starts = (prefix: string) => refusals.some((refusal) => refusal.startsWith(prefix));
  assert.equal(starts("Unscoped --allow-read grants reading every file"), held("read"));
  assert.equal(starts("Unscoped --allow-write grants writing every file"), held("write"));
  assert.equal(starts("--allow-run grants running programs (unscoped)"), held("run"));
  assert.equal(starts("Unscoped --allow-env grants reading every variable"), held("env"));
  const everyPort = Deno.permissions.querySync({ name: "net", host: "127.0.0.1:1" }).state;
  assert.equal(starts("--allow-net grants every port of 127.0.0.1"), everyPort === "granted");
});
