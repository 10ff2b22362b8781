/**
 * The distinct-object check: before any lane accepts, every pair of lane listeners must be provably
 * different — distinct server objects and non-overlapping addresses. `0.0.0.0:P` (or `[::]:P`)
 * overlaps every address on port P; the same Unix path twice is an alias. `local_health` may bind
 * only loopback or a Unix socket. Any alias or ambiguity refuses the boot.
 *
 * @module
 */
import { isIPv4 } from "node:net";
import { resolve } from "node:path";
import { formatAddress, type ListenerAddress } from "../config/load.ts";
import type { LaneName } from "../ledger/lane_names.ts";

/** A listener as the check sees it: its lane, its position in the lane's list, its address. */
export interface LaneListener {
  readonly lane: LaneName;
  readonly index: number;
  readonly address: ListenerAddress;
  /** A companion listener of the lane (the public lane's ACME and passthrough listeners). */
  readonly role?: ListenerRole;
}

/**
 * What a listener of a lane is for.
 *
 * @internal
 */
export type ListenerRole = "acme_http" | "passthrough";

/** `lane "public"`, or `lane "public" (acme_http)` for a companion listener. */
function label(listener: LaneListener): string {
  return `lane "${listener.lane}"${listener.role ? ` (${listener.role})` : ""}`;
}

/** A refused pair or rule, with the lanes it names. */
export interface ListenerProblem {
  readonly lane: LaneName;
  readonly role?: ListenerRole;
  readonly index: number;
  readonly message: string;
}

/**
 * Canonical form of an IP literal: IPv4 dotted quad, IPv6 compressed lower case, and
 * IPv4-mapped IPv6 as the IPv4 address.
 */
export function canonicalIp(hostname: string): string {
  if (isIPv4(hostname)) return hostname;
  const host = new URL(`http://[${hostname}]/`).hostname.slice(1, -1);
  const mapped = /^::ffff:([0-9a-f]{1,4}):([0-9a-f]{1,4})$/.exec(host);
  if (mapped) {
    const hi = parseInt(mapped[1], 16);
    const lo = parseInt(mapped[2], 16);
    return `${hi >> 8}.${hi & 255}.${lo >> 8}.${lo & 255}`;
  }
  return host;
}

/** True for the any-address of either family. */
export function isWildcard(hostname: string): boolean {
  const ip = canonicalIp(hostname);
  return ip === "0.0.0.0" || ip === "::";
}

/** True for 127.0.0.0/8 and ::1. */
export function isLoopback(hostname: string): boolean {
  const ip = canonicalIp(hostname);
  return ip === "::1" || (isIPv4(ip) && ip.startsWith("127."));
}

/**
 * True when two listeners could accept the same connection (or bind the same socket).
 *
 * @example
 * ```ts
 * import { overlaps } from "./distinct.ts";
 * overlaps({ kind: "tcp", hostname: "0.0.0.0", port: 8443 }, { kind: "tcp", hostname: "127.0.0.1", port: 8443 }); // true
 * overlaps({ kind: "tcp", hostname: "127.0.0.1", port: 8443 }, { kind: "tcp", hostname: "127.0.0.2", port: 8443 }); // false
 * ```
 */
export function overlaps(a: ListenerAddress, b: ListenerAddress): boolean {
  if (a.kind === "unix" || b.kind === "unix") {
    return a.kind === "unix" && b.kind === "unix" && resolve(a.path) === resolve(b.path);
  }
  if (a.port !== b.port) return false;
  if (isWildcard(a.hostname) || isWildcard(b.hostname)) return true;
  return canonicalIp(a.hostname) === canonicalIp(b.hostname);
}

/**
 * Checks every pair of listeners (across lanes and within one lane) and the lanes' reach rules.
 *
 * @param listeners every configured listener of every lane
 * @returns every problem found; empty when the grants are distinct
 */
export function checkListeners(listeners: readonly LaneListener[]): ListenerProblem[] {
  const problems: ListenerProblem[] = [];
  for (let i = 0; i < listeners.length; i++) {
    const a = listeners[i];
    if (a.lane === "local_health" && a.address.kind === "tcp" && !isLoopback(a.address.hostname)) {
      problems.push({
        lane: a.lane,
        index: a.index,
        message: `Cannot bind lane "local_health": address ${
          formatAddress(a.address)
        } is not loopback (use 127.0.0.1, ::1 or a Unix socket path)`,
      });
    }
    for (let j = i + 1; j < listeners.length; j++) {
      const b = listeners[j];
      if (!overlaps(a.address, b.address)) continue;
      const same = a.lane === b.lane && a.role === b.role;
      problems.push({
        lane: b.lane,
        ...(b.role ? { role: b.role } : {}),
        index: b.index,
        message: `Cannot bind ${label(b)}: address ${formatAddress(b.address)} ` +
          (same
            ? `is listed twice in ${label(a)} (also as ${formatAddress(a.address)})`
            : `overlaps ${label(a)} (${formatAddress(a.address)})`),
      });
    }
  }
  return problems;
}

/**
 * Checks that the bound server objects are pairwise distinct objects.
 *
 * @returns a problem per object that appears under two grants
 */
export function checkDistinctObjects(
  grants: readonly { lane: LaneName; index: number; server: object }[],
): ListenerProblem[] {
  const seen = new Map<object, { lane: LaneName; index: number }>();
  const problems: ListenerProblem[] = [];
  for (const grant of grants) {
    const first = seen.get(grant.server);
    if (first) {
      problems.push({
        lane: grant.lane,
        index: grant.index,
        message:
          `Cannot serve lane "${grant.lane}": its listener is the same server object as lane "${first.lane}"`,
      });
    } else {
      seen.set(grant.server, grant);
    }
  }
  return problems;
}
