/**
 * Where a tenant may send traffic: never into this process, and never into the machine's or the
 * network's private address space unless the operator allowed it.
 *
 * Deno's grant to listen on an address also grants connecting to it, and a SOCKS server on
 * loopback connects anywhere, so a tenant backend `http://127.0.0.1:<local_health port>` would make
 * the gateway a client of its own protected listener — the lane is decided by the listener, not by
 * who connects. Two locks:
 *
 * - {@link ownListener}: at `check`, at boot and at every generation load (local folder or hub
 *   push), a backend, `egress.direct` entry or passthrough target that names a listener of this
 *   process is refused, in any spelling of the host — every loopback address, `0.0.0.0` and `::`,
 *   IPv4-mapped and -compatible IPv6, `localhost` and `*.localhost`, and the decimal, octal and hex
 *   forms of IPv4 (`2130706433`, `0177.0.0.1`, `0x7f.1`), which resolvers accept;
 * - {@link internalDestination}: at connect time, before any SOCKS CONNECT or direct dial, a
 *   destination in loopback, link-local (cloud metadata `169.254.169.254` too), private, shared,
 *   unique-local or other special-purpose space is refused unless `egress.allow_private` lists it
 *   (a CIDR, or `host:port`).
 *
 * A host name is only known to be local when it is one of the local names; a name that some
 * resolver (the SOCKS server's) maps to a private address cannot be seen from here.
 *
 * @module
 */
import { AddressSet } from "../request/cidr.ts";
import { readHost, splitTarget } from "../request/host.ts";
import type { UpstreamTls } from "./upstream_tls.ts";

const LOOPBACK = "a loopback address";

/** Special-purpose ranges no tenant may reach without the operator's word (RFC 6890 and kin). */
const INTERNAL_RANGES: readonly [string, string][] = [
  ["0.0.0.0/8", "an unspecified address"],
  ["127.0.0.0/8", LOOPBACK],
  ["169.254.0.0/16", "a link-local address (cloud metadata lives there)"],
  ["10.0.0.0/8", "a private address"],
  ["172.16.0.0/12", "a private address"],
  ["192.168.0.0/16", "a private address"],
  ["100.64.0.0/10", "a shared (carrier-grade NAT) address"],
  ["192.0.0.0/24", "an IETF protocol address"],
  ["198.18.0.0/15", "a benchmarking address"],
  ["224.0.0.0/4", "a multicast address"],
  ["240.0.0.0/4", "a reserved address"],
  ["::/128", "an unspecified address"],
  ["::1/128", LOOPBACK],
  ["::/96", "an IPv4-compatible address"],
  ["fe80::/10", "a link-local address"],
  ["fc00::/7", "a unique-local address"],
  ["ff00::/8", "a multicast address"],
  ["64:ff9b::/96", "a NAT64 address"],
];
const RANGES = INTERNAL_RANGES.map(([cidr, what]) => ({ set: AddressSet.of([cidr]), what }));

/** Names every resolver maps to this machine (RFC 6761 §6.3, and Debian's /etc/hosts). */
const LOCAL_NAMES = new Set([
  "localhost",
  "localhost.localdomain",
  "ip6-localhost",
  "ip6-loopback",
]);

/** True for `localhost`, `*.localhost` and the other names of this machine. */
export function isLocalName(name: string): boolean {
  return LOCAL_NAMES.has(name) || name.endsWith(".localhost");
}

/**
 * Why `host` is an internal destination, or undefined when it is not (a public address, or a
 * name other than a local one).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { internalDestination } from "./destinations.ts";
 * assert.equal(internalDestination("169.254.169.254"), "a link-local address (cloud metadata lives there)");
 * assert.equal(internalDestination("api.localhost"), "a name of this machine");
 * assert.equal(internalDestination("203.0.113.9"), undefined);
 * ```
 */
export function internalDestination(host: string): string | undefined {
  const read = readHost(host);
  if (!read) return "not a host any resolver reads the same way";
  if (read.kind === "name") {
    return isLocalName(read.canonical) ? "a name of this machine" : undefined;
  }
  for (const range of RANGES) if (range.set.has(read.canonical)) return range.what;
  return undefined;
}

/** A TCP listener of this process, named as its config names it. */
export interface OwnListener {
  readonly hostname: string;
  readonly port: number;
  /** Where the config declares it, e.g. `lanes.local_health.listen[0]`. */
  readonly name: string;
}

/**
 * The listener of this process that `host:port` reaches, if any: same port, and a host that is the
 * listener's own, any loopback address or local name, a wildcard, or — for a listener on a
 * wildcard address, which answers on every address of the machine — any internal address.
 */
export function ownListener(
  host: string,
  port: number,
  listeners: readonly OwnListener[],
): OwnListener | undefined {
  const read = readHost(host);
  if (!read) return undefined;
  for (const listener of listeners) {
    if (listener.port !== port) continue;
    const bound = readHost(listener.hostname)?.canonical;
    if (read.canonical === bound) return listener;
    if (read.kind === "name") {
      if (isLocalName(read.canonical)) return listener;
      continue;
    }
    const what = internalDestination(read.canonical);
    if (what === undefined) continue;
    const reachesAll = bound === "0.0.0.0" || bound === "::";
    if (reachesAll || what === LOOPBACK || what === "an unspecified address") {
      return listener;
    }
  }
  return undefined;
}

/** What `egress.allow_private` lets through: CIDR ranges, and exact `host:port` targets. */
export class PrivateAllowance {
  readonly #ranges: AddressSet;
  readonly #targets: ReadonlySet<string>;

  /**
   * @param entries CIDRs (`10.0.0.0/8`, `127.0.0.1`) or `host:port` targets
   * @throws {TypeError} naming an entry that is neither
   */
  constructor(entries: readonly string[]) {
    const ranges: string[] = [];
    const targets = new Set<string>();
    for (const entry of entries) {
      const target = splitTarget(entry);
      if (target) targets.add(`${target.host}:${target.port}`);
      else ranges.push(entry);
    }
    this.#ranges = AddressSet.of(ranges);
    this.#targets = targets;
  }

  /**
   * True when the operator allowed `host:port`: listed as that target, or an address in a listed
   * range, or `localhost` (and `*.localhost`) when both loopback addresses are in a listed range.
   */
  allows(host: string, port: number): boolean {
    const read = readHost(host);
    if (!read) return false;
    if (this.#targets.has(`${read.canonical}:${port}`)) return true;
    if (read.kind === "address") return this.#ranges.has(read.canonical);
    // A name of this machine resolves to loopback, either family: both must be allowed.
    return isLocalName(read.canonical) && this.#ranges.has("127.0.0.1") &&
      this.#ranges.has("::1");
  }
}

/**
 * Refuses internal destinations at connect time: the reason as a sentence, or undefined when
 * `host:port` may be reached.
 */
export function refuseInternal(
  host: string,
  port: number,
  allowance: PrivateAllowance,
): string | undefined {
  const what = internalDestination(host);
  if (what === undefined || allowance.allows(host, port)) return undefined;
  const shown = host.includes(":") ? `[${host}]:${port}` : `${host}:${port}`;
  return `Destination ${shown} is ${what}, not in egress.allow_private`;
}

/**
 * Refuses a SOCKS tunnel that reached this machine: the instance reports the address it connected
 * from, and a loopback one means the destination (whatever name it was asked for) is on this
 * machine — perhaps this very gateway. Allowed when the operator allowed the destination, or
 * loopback, in `egress.allow_private`. A private source address is normal behind NAT and says
 * nothing; Tor reports no address at all.
 *
 * @param host the destination as asked for
 * @param bound the reply's BND.ADDR
 */
export function refuseLoopbackTunnel(
  host: string,
  port: number,
  bound: string,
  allowance: PrivateAllowance,
): string | undefined {
  const read = readHost(bound);
  if (!read || read.kind !== "address" || internalDestination(read.canonical) !== LOOPBACK) {
    return undefined;
  }
  if (allowance.allows(host, port) || allowance.allows(read.canonical, port)) return undefined;
  const shown = host.includes(":") ? `[${host}]:${port}` : `${host}:${port}`;
  return `The SOCKS instance reached ${shown} from ${read.canonical}: it is on this machine, ` +
    "not in egress.allow_private";
}

/** A proxy backend, parsed from its URL. */
export interface Backend {
  /** `http://authority` or `https://authority`, lower case: the negative-cache key. */
  readonly key: string;
  /** Host name or IP literal (no brackets). */
  readonly hostname: string;
  readonly port: number;
  /** `host[:port]` as written: the upstream Host header. */
  readonly authority: string;
  /** `host:port` (IPv6 in brackets), as `egress.direct` and `--allow-net` spell it. */
  readonly target: string;
  readonly weight: number;
  /** Requests in flight to it at most, per isolate (pending.ts); absent: no bound. */
  readonly maxPending?: number;
  /** Set for an `https://` backend: how its TLS is made and verified (upstream_tls.ts). */
  readonly tls?: UpstreamTls;
  /** Set when the tenant file asks for an active health check (health_checks.ts). */
  readonly health?: BackendHealth;
}

/** A backend's active health check, as its tenant file's `health` says. */
export interface BackendHealth {
  /** The path a GET probes (origin form, starts with `/`). */
  readonly path: string;
  readonly intervalMs: number;
  /** The whole probe (connection, TLS, answer) is given up after this long: a failure. */
  readonly timeoutMs: number;
  /** Statuses that pass. */
  readonly expectStatus: readonly number[];
  /** Consecutive failed probes that make the check failing (and the backend cold). */
  readonly failures: number;
}
