/**
 * The own-listener lock: nothing a tenant names may be sent back into this process. A lane is
 * decided by the listener that accepted a connection, so a backend that reaches `local_health`
 * would make any public request a protected one; Deno's grant to listen on an address also grants
 * connecting to it, and a SOCKS instance on this machine connects wherever it is asked.
 *
 * Checked at load, at connect time and before each reuse, and `egress.allow_private` opens none
 * of them (it may allow loopback for a backend on this machine, never this gateway's own ports):
 *
 * - at load — `check`, boot, every generation a folder reload or a hub push offers, and a hub's own
 *   set — by {@link ownListener}: the host in any spelling a resolver accepts, or a name this
 *   machine resolves to itself without the network (`localhost`, `*.localhost`, its host name,
 *   every `/etc/hosts` name: destinations.ts `localResolution`), on the port of a listener it
 *   reaches;
 * - at connect time, before a byte of a request goes out: the destination again, with the hosts
 *   file read again ({@link refuseOwnDestination}: a line added after the load); the address a
 *   SOCKS instance reports it connected from ({@link refuseLoopbackTunnel}: loopback means the
 *   destination is on this machine, whatever name it was asked for); and for a direct dial the
 *   address the socket reached ({@link refusePeer}: what the system resolver made of the name);
 * - before each reuse of a pooled connection, the destination again, against the machine as it is
 *   then (reach_verdicts.ts): a kept-alive connection made while a hosts-file line was not yet
 *   seen used to serve local_health for as long as it lived. A machine reading that changes closes
 *   every pooled connection whose destination it now refuses.
 *
 * What it cannot see: a name that only DNS (or the SOCKS server's own resolver) maps to this
 * machine, through an instance that does not report the address it connected from (microsocks
 * answers `0.0.0.0`, Tor answers nothing); see local_machine.ts for why names are not sent to the
 * system resolver. A name that does not resolve locally at load is accepted then and judged again
 * at each connection and each reuse. The machine is read at most once a second (local_machine.ts
 * `MachineView`): a connection made in the second after a hosts-file line appears may still land
 * on an own listener, and answers for as long as that exchange lasts; a raw tunnel (an upgrade, a
 * passthrough) is judged only when it is opened.
 *
 * @module
 */
import { readHost } from "../request/host.ts";
import {
  internalDestination,
  localResolution,
  LOOPBACK,
  type PrivateAllowance,
  showTarget,
  UNSPECIFIED,
} from "./destinations.ts";
import { bareMachine, HOSTS_FILE, type LocalMachine } from "./local_machine.ts";

/** A TCP listener of this process, named as its config names it. */
export interface OwnListener {
  readonly hostname: string;
  readonly port: number;
  /** Where the config declares it, e.g. `lanes.local_health.listen[0]`. */
  readonly name: string;
}

/**
 * The listener of this process that `host:port` reaches, if any: same port, and a host that is the
 * listener's own, any loopback address or name of this machine, a wildcard, or — for a listener on
 * a wildcard address, which answers on every address of the machine — any internal address or any
 * address of this machine's interfaces. A name counts by the addresses this machine resolves it to
 * without the network (`machine`); a name it does not resolve by itself reaches nothing here.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { ownListener } from "./own_listener.ts";
 * const own = [{ hostname: "127.0.0.1", port: 9901, name: "lanes.local_health.listen[0]" }];
 * const machine = { hosts: new Map([["sneaky.test", ["127.0.0.1"]]]), addresses: new Set<string>(), unread: [] };
 * assert.equal(ownListener("0x7f.1", 9901, own)?.name, "lanes.local_health.listen[0]");
 * assert.equal(ownListener("SNEAKY.test.", 9901, own, machine)?.name, "lanes.local_health.listen[0]");
 * assert.equal(ownListener("sneaky.test", 9901, own), undefined);
 * ```
 */
export function ownListener(
  host: string,
  port: number,
  listeners: readonly OwnListener[],
  machine: LocalMachine = bareMachine(),
): OwnListener | undefined {
  const read = readHost(host);
  if (!read) return undefined;
  const addresses = read.kind === "address"
    ? [read.canonical]
    : localResolution(read.canonical, machine);
  for (const listener of listeners) {
    if (listener.port !== port) continue;
    const bound = readHost(listener.hostname)?.canonical;
    if (read.canonical === bound) return listener;
    if (addresses?.some((address) => reaches(address, bound, machine))) return listener;
  }
  return undefined;
}

/** True when a connection to `address` (canonical) reaches a listener bound to `bound`. */
function reaches(address: string, bound: string | undefined, machine: LocalMachine): boolean {
  if (address === bound) return true;
  const what = internalDestination(address, machine);
  if (what === undefined) return false;
  if (bound === "0.0.0.0" || bound === "::") return true;
  return what === LOOPBACK || what === UNSPECIFIED;
}

/**
 * How a name came to be this machine's, for a diagnostic: `` (/etc/hosts maps "x" to 127.0.0.1)``,
 * `` (the host name of this machine)``, or "" for an address or a name every resolver knows.
 */
export function resolvedBy(host: string, machine: LocalMachine): string {
  const read = readHost(host);
  if (!read || read.kind === "address") return "";
  const mapped = machine.hosts.get(read.canonical);
  if (mapped !== undefined && mapped.length > 0) {
    return ` (${HOSTS_FILE} maps "${read.canonical}" to ${mapped.join(", ")})`;
  }
  return machine.hostname === read.canonical ? " (the host name of this machine)" : "";
}

/** The sentence for a destination that reaches one of this process's listeners. */
function reachesOwn(listener: OwnListener): string {
  return `this gateway's own listener ${listener.name} (${listener.hostname}:${listener.port}); ` +
    "egress.allow_private never opens a way back in";
}

/**
 * Refuses, at connect time, a destination that reaches one of this process's listeners, whatever
 * `egress.allow_private` says: the reason, or undefined.
 *
 * @param machine the machine as read just before the dial (the hosts file again)
 */
export function refuseOwnDestination(
  host: string,
  port: number,
  own: readonly OwnListener[],
  machine: LocalMachine,
): string | undefined {
  const inward = ownListener(host, port, own, machine);
  if (!inward) return undefined;
  return `Destination ${showTarget(host, port)}${resolvedBy(host, machine)} reaches ` +
    reachesOwn(inward);
}

/**
 * Refuses a SOCKS tunnel that reached this machine: the instance reports the address it connected
 * from, and a loopback one means the destination (whatever name it was asked for) is on this
 * machine. When the destination port is one of this process's listeners that loopback reaches, it
 * is refused whatever `egress.allow_private` says; otherwise it is allowed when the operator
 * allowed the destination, or loopback. A private source address is normal behind NAT and says
 * nothing; an instance that reports `0.0.0.0` (microsocks) or nothing (Tor) says nothing either.
 *
 * @param host the destination as asked for
 * @param bound the reply's BND.ADDR
 * @param own this process's listeners
 */
export function refuseLoopbackTunnel(
  host: string,
  port: number,
  bound: string,
  allowance: PrivateAllowance,
  own: readonly OwnListener[] = [],
): string | undefined {
  const read = readHost(bound);
  if (!read || read.kind !== "address" || internalDestination(read.canonical) !== LOOPBACK) {
    return undefined;
  }
  const reached = `The SOCKS instance reached ${showTarget(host, port)} from ${read.canonical}: ` +
    "it is on this machine";
  const inward = ownListener(read.canonical, port, own);
  if (inward) return `${reached}, and port ${port} is ${reachesOwn(inward)}`;
  if (allowance.allows(host, port) || allowance.allows(read.canonical, port)) return undefined;
  return `${reached}, not in egress.allow_private`;
}

/**
 * Refuses a direct connection whose socket reached one of this process's listeners: the address
 * the system resolver made of the target's name, read off the connected socket, whatever
 * `egress.allow_private` says.
 *
 * @param peer the connected socket's remote address
 */
export function refusePeer(
  host: string,
  port: number,
  peer: string,
  own: readonly OwnListener[],
  machine: LocalMachine,
): string | undefined {
  const inward = ownListener(peer, port, own, machine);
  if (!inward) return undefined;
  return `The direct connection to ${showTarget(host, port)} reached ${peer}, ` +
    reachesOwn(inward);
}
