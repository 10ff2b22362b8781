/**
 * The boot-time permission audit. Portcullis refuses to start while it holds ambient authority
 * (`-A`, unscoped `--allow-net`, `--allow-run`, `--allow-ffi`, unscoped `--allow-write`), while a
 * net grant reaches beyond the configured addresses, or while a grant the config needs is missing —
 * naming each one.
 *
 * Deno can answer "is X granted?" but cannot list what was granted, so grants are found by probing:
 * unscoped run/ffi/write/net, a run grant for a shell or `deno`, and canary net addresses (a
 * documentation-range host, and a spare port on each configured host). A run grant for one specific
 * other program, or ffi for one specific library, answers "not granted" to every probe and is not
 * detected.
 *
 * @module
 */
import { type Grant, isAuthority } from "./flags.ts";

/** Answers a permission query without prompting (`Deno.permissions.querySync` in production). */
export type PermissionQuery = (descriptor: Deno.PermissionDescriptor) => Deno.PermissionState;

/** The audit's findings. */
export interface AuditResult {
  /** Reasons to refuse the boot; empty when the permission set is acceptable. */
  readonly refusals: string[];
  /** Broad grants that are not refused but worth an operator's look. */
  readonly warnings: string[];
}

/** Addresses no config of ours ever needs: if one is granted, the net grant is too broad. */
const NET_CANARIES = ["203.0.113.77:443", "[2001:db8::77]:443", "canary.portcullis.invalid:443"];
/** Commands whose grant would hand out a shell. */
const RUN_CANARIES = ["sh", "/bin/sh", "bash", "deno"];

const queryDeno: PermissionQuery = (descriptor) => Deno.permissions.querySync(descriptor).state;

/**
 * Audits the process's permissions against the grants its config needs.
 *
 * @param grants what the config needs (from `requiredGrants`)
 * @param query the permission query; defaults to Deno's
 * @example
 * ```ts
 * import { auditPermissions } from "./audit.ts";
 * const everything = () => "granted" as const;
 * auditPermissions([], everything).refusals.length > 0; // true: ambient authority
 * ```
 */
export function auditPermissions(
  grants: readonly Grant[],
  query: PermissionQuery = queryDeno,
): AuditResult {
  const refusals: string[] = [];
  const warnings: string[] = [];
  const granted = (descriptor: Deno.PermissionDescriptor) => query(descriptor) === "granted";

  if (granted({ name: "net" })) {
    refusals.push("Unscoped --allow-net (or -A) grants every host; grant only the configured ones");
  }
  if (
    granted({ name: "run" }) || RUN_CANARIES.some((command) => granted({ name: "run", command }))
  ) {
    refusals.push("--allow-run grants running programs; Portcullis never needs it");
  }
  if (granted({ name: "ffi" })) {
    refusals.push("--allow-ffi grants loading native code; Portcullis never needs it");
  }
  if (granted({ name: "write" })) {
    refusals.push("Unscoped --allow-write grants writing every file; grant only socket paths");
  }
  if (!granted({ name: "net" })) {
    for (const host of NET_CANARIES) {
      if (granted({ name: "net", host })) {
        refusals.push(
          `--allow-net reaches ${host}, which no configured listener needs; grant exact host:port pairs`,
        );
        break;
      }
    }
    for (const host of portCanaries(grants)) {
      if (granted({ name: "net", host })) {
        refusals.push(
          `--allow-net grants every port of ${host.replace(/:\d+$/, "")} (${host} is granted); ` +
            "grant exact host:port pairs",
        );
      }
    }
  }
  for (const grant of grants.filter(isAuthority)) {
    const descriptor: Deno.PermissionDescriptor = grant.name === "net"
      ? { name: "net", host: grant.value }
      : { name: grant.name, path: grant.value };
    if (!granted(descriptor)) {
      refusals.push(
        `Missing --allow-${grant.name}=${grant.value} (needed by the ${grant.purpose})`,
      );
    }
  }
  if (granted({ name: "read" })) warnings.push("Unscoped --allow-read grants reading every file");
  if (granted({ name: "env" })) warnings.push("Unscoped --allow-env grants reading every variable");
  if (granted({ name: "sys" })) warnings.push("--allow-sys grants system information");
  return { refusals, warnings };
}

/** For each configured TCP host, one port the config does not use. */
function portCanaries(grants: readonly Grant[]): string[] {
  const ports = new Map<string, Set<string>>();
  for (const grant of grants) {
    if (grant.name !== "net" || grant.value.startsWith("unix:")) continue;
    const cut = grant.value.lastIndexOf(":");
    const host = grant.value.slice(0, cut);
    if (!ports.has(host)) ports.set(host, new Set());
    ports.get(host)!.add(grant.value.slice(cut + 1));
  }
  const canaries: string[] = [];
  for (const [host, used] of ports) {
    const spare = ["1", "2", "3"].find((port) => !used.has(port))!;
    canaries.push(`${host}:${spare}`);
  }
  return canaries;
}
