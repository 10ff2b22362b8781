/**
 * Where a tenant may send traffic: never into this process, and never into the machine's or the
 * network's private address space unless the operator allowed it.
 *
 * Deno's grant to listen on an address also grants connecting to it, and a SOCKS server on
 * loopback connects anywhere, so a tenant backend `http://127.0.0.1:<local_health port>` would make
 * the gateway a client of its own protected listener — the lane is decided by the listener, not by
 * who connects. Two locks:
 *
 * - the own-listener lock (own_listener.ts): a destination that names a listener of this process,
 *   in any spelling, by any name this machine resolves to itself, is refused at load and at
 *   connect time, whatever `egress.allow_private` says;
 * - {@link internalDestination}: at connect time, before any SOCKS CONNECT or direct dial, a
 *   destination in loopback, link-local (cloud metadata `169.254.169.254` too), private, shared,
 *   unique-local or other special-purpose space, or an address of this machine's own interfaces,
 *   is refused unless `egress.allow_private` lists it (a CIDR, or `host:port`).
 *
 * Every spelling of a host a resolver accepts is read the same way (`readHost`: the decimal,
 * octal and hex forms of IPv4 such as `2130706433`, `0177.0.0.1`, `0x7f.1`; IPv4-mapped and
 * -compatible IPv6; a final dot; any case). A name is judged by where this machine resolves it
 * without the network ({@link localResolution}): `localhost` and `*.localhost` (RFC 6761 §6.3), the
 * machine's own host name, and every name its `/etc/hosts` maps (local_machine.ts). A name only a
 * DNS server or the SOCKS server's resolver maps to a private address cannot be seen here; the
 * connect-time checks of own_listener.ts catch what can be caught of it.
 *
 * @module
 */
import { AddressSet } from "../request/cidr.ts";
import { readHost, splitTarget } from "../request/host.ts";
import { bareMachine, HOSTS_FILE, type LocalMachine } from "./local_machine.ts";
import type { UpstreamTls } from "./upstream_tls.ts";

/** What {@link internalDestination} calls a loopback address. */
export const LOOPBACK = "a loopback address";
/** What {@link internalDestination} calls `0.0.0.0` and `::` (both reach this machine). */
export const UNSPECIFIED = "an unspecified address";
/** What {@link internalDestination} calls an address of this machine's own interfaces. */
export const OWN_ADDRESS = "an address of this machine";

/** Special-purpose ranges no tenant may reach without the operator's word (RFC 6890 and kin). */
const INTERNAL_RANGES: readonly [string, string][] = [
  ["0.0.0.0/8", UNSPECIFIED],
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
  ["::/128", UNSPECIFIED],
  ["::1/128", LOOPBACK],
  ["::/96", "an IPv4-compatible address"],
  ["fe80::/10", "a link-local address"],
  ["fc00::/7", "a unique-local address"],
  ["ff00::/8", "a multicast address"],
  ["64:ff9b::/96", "a NAT64 address"],
  ["64:ff9b:1::/48", "a local-use NAT64 address"],
  ["2001:2::/48", "a benchmarking address"],
  ["5f00::/16", "a segment routing (SRv6) address"],
];
const RANGES = INTERNAL_RANGES.map(([cidr, what]) => ({ set: AddressSet.of([cidr]), what }));

/** Names every resolver maps to this machine (RFC 6761 §6.3, and Debian's /etc/hosts). */
const LOCAL_NAMES = new Set([
  "localhost",
  "localhost.localdomain",
  "ip6-localhost",
  "ip6-loopback",
]);

/** Where a name of this machine resolves: both loopback addresses. */
const LOOPBACK_ADDRESSES: readonly string[] = Object.freeze(["127.0.0.1", "::1"]);

/** True for `localhost`, `*.localhost` and the other names every resolver maps to loopback. */
export function isLocalName(name: string): boolean {
  return LOCAL_NAMES.has(name) || name.endsWith(".localhost");
}

/**
 * Where this machine resolves a name without asking the network: loopback for `localhost`,
 * `*.localhost` and (when the hosts file does not list it) the machine's own host name; the hosts
 * file's addresses for a name it lists; undefined for any other name (only a resolver could say).
 *
 * @param name a canonical name (lower case, no final dot: `readHost`)
 * @param machine what this machine calls itself (default: nothing beyond `localhost`)
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { localResolution } from "./destinations.ts";
 * const machine = { hostname: "vm", hosts: new Map([["db.lan", ["10.0.0.9"]]]), addresses: new Set<string>(), unread: [] };
 * assert.deepEqual(localResolution("db.lan", machine), ["10.0.0.9"]);
 * assert.deepEqual(localResolution("vm", machine), ["127.0.0.1", "::1"]);
 * assert.equal(localResolution("shop.example", machine), undefined);
 * ```
 */
export function localResolution(
  name: string,
  machine: LocalMachine = bareMachine(),
): readonly string[] | undefined {
  if (isLocalName(name)) return LOOPBACK_ADDRESSES;
  const mapped = machine.hosts.get(name);
  if (mapped !== undefined && mapped.length > 0) return mapped;
  return machine.hostname === name ? LOOPBACK_ADDRESSES : undefined;
}

/** Why an address (canonical) is internal, or undefined for a public address of another machine. */
function addressClass(address: string, machine: LocalMachine): string | undefined {
  for (const range of RANGES) if (range.set.has(address)) return range.what;
  return machine.addresses.has(address) ? OWN_ADDRESS : undefined;
}

/**
 * Why `host` is an internal destination, or undefined when it is not (a public address of another
 * machine, or a name this machine does not resolve by itself). A name is as internal as the first
 * internal address it resolves to locally.
 *
 * @param machine what this machine calls itself (names, interface addresses)
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { internalDestination } from "./destinations.ts";
 * assert.equal(internalDestination("169.254.169.254"), "a link-local address (cloud metadata lives there)");
 * assert.equal(internalDestination("api.localhost"), "a name of this machine");
 * assert.equal(internalDestination("203.0.113.9"), undefined);
 * ```
 */
export function internalDestination(
  host: string,
  machine: LocalMachine = bareMachine(),
): string | undefined {
  const read = readHost(host);
  if (!read) return "not a host any resolver reads the same way";
  if (read.kind === "address") return addressClass(read.canonical, machine);
  const addresses = localResolution(read.canonical, machine);
  if (addresses === LOOPBACK_ADDRESSES) return "a name of this machine";
  for (const address of addresses ?? []) {
    const what = addressClass(address, machine);
    if (what !== undefined) return `a name ${HOSTS_FILE} maps to ${address}, ${what}`;
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
   * range, or a name whose every local address (`localhost`: both loopback addresses) is in one.
   */
  allows(host: string, port: number, machine: LocalMachine = bareMachine()): boolean {
    const read = readHost(host);
    if (!read) return false;
    if (this.#targets.has(`${read.canonical}:${port}`)) return true;
    if (read.kind === "address") return this.#ranges.has(read.canonical);
    const addresses = localResolution(read.canonical, machine);
    return addresses !== undefined && addresses.every((address) => this.#ranges.has(address));
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
  machine: LocalMachine = bareMachine(),
): string | undefined {
  const what = internalDestination(host, machine);
  if (what === undefined || allowance.allows(host, port, machine)) return undefined;
  return `Destination ${showTarget(host, port)} is ${what}, not in egress.allow_private`;
}

/** `host:port`, an IPv6 host in brackets. */
export function showTarget(host: string, port: number): string {
  return host.includes(":") ? `[${host}]:${port}` : `${host}:${port}`;
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
