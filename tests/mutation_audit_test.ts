/**
 * The boot permission audit (src/boot/audit.ts) against a write grant narrower than "unscoped" and
 * wider than the config needs: on a path the config only reads (its tenants folder, its config
 * file) or on the Deno binary itself. `boot_audit_wide_test.ts` proves the same against the
 * example configs by booting them (a minute); this is the unit-level check. Killed mutation:
 * `audit.write-on-read-unprobed`.
 *
 * @module
 */
import assert from "node:assert/strict";
import { auditPermissions, type PermissionQuery } from "../src/boot/audit.ts";
import type { Grant } from "../src/boot/flags.ts";

const CONFIG = "/srv/portcullis/config.yaml";
const TENANTS = "/srv/portcullis/tenants";
const GRANTS: readonly Grant[] = [
  { name: "read", value: CONFIG, purpose: "config file" },
  { name: "read", value: TENANTS, purpose: "tenants folder" },
];
const NO_WRITE = "the config needs no --allow-write";

/** A query that grants read on the derived paths and write on exactly `writable`. */
function holding(writable: readonly string[]): PermissionQuery {
  const within = (path: string, bases: readonly string[]) =>
    bases.some((base) => path === base || path.startsWith(`${base}/`));
  return (descriptor) => {
    const path = "path" in descriptor ? descriptor.path?.toString() : undefined;
    if (path === undefined) return "prompt";
    if (descriptor.name === "read") return within(path, [CONFIG, TENANTS]) ? "granted" : "prompt";
    if (descriptor.name === "write") return within(path, writable) ? "granted" : "prompt";
    return "prompt";
  };
}

Deno.test("auditPermissions() accepts read-only grants with no write grant at all", () => {
  assert.deepEqual(auditPermissions(GRANTS, holding([])), { refusals: [], warnings: [] });
});

Deno.test("auditPermissions() refuses a write grant on a path the config only reads", () => {
  for (const path of [TENANTS, CONFIG]) {
    assert.deepEqual(auditPermissions(GRANTS, holding([path])).refusals, [
      `--allow-write reaches ${path}, which the config does not need; ${NO_WRITE}`,
    ]);
  }
});

Deno.test("auditPermissions() refuses a write grant on the Deno binary", () => {
  const binary = Deno.execPath();
  assert.deepEqual(auditPermissions(GRANTS, holding([binary])).refusals, [
    `--allow-write reaches ${binary}, which the config does not need; ${NO_WRITE}`,
  ]);
});
