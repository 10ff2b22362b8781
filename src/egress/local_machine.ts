/**
 * What this machine calls itself, read without asking the network: the names `/etc/hosts` maps to
 * addresses, the machine's own host name, and the addresses of its interfaces. The own-listener
 * lock (destinations.ts) needs them because a name is only as safe as what it resolves to: a
 * backend `http://<a name /etc/hosts maps to 127.0.0.1>:<local_health port>` reaches the protected
 * lane through any SOCKS instance on this machine, which reads the same `/etc/hosts`.
 *
 * Why not the system resolver itself: under Deno's permissions it cannot be asked for one name
 * alone. `node:dns` `lookup` (getaddrinfo, the only call that reads `/etc/hosts`) needs
 * `--allow-net=<name>` on every port of the name (measured on Deno 2.9.6: `--allow-net=name:80`
 * answers EPERM), a whole-host grant the boot audit refuses and that would let the process dial
 * the backend directly, past the SOCKS pool; `Deno.resolveDns` reads no `/etc/hosts` and needs net
 * to the nameserver. And sending every backend name to the local resolver would leak them outside
 * Tor. So the view is what the machine knows by itself; a name only DNS maps to this machine is
 * caught at connect time, where it can be (destinations.ts, egress.ts).
 *
 * Permissions (derived in boot/flags.ts, audited at boot): `--allow-read=/etc/hosts` and
 * `--allow-sys=hostname,networkInterfaces`. Without them (`check` runs with read only) the host
 * name comes from `/etc/hostname` and the interface addresses are unknown; {@link LocalMachine.unread}
 * says what could not be read.
 *
 * @module
 */
import { canonicalAddress } from "../request/cidr.ts";

/** The hosts file every resolver on this machine reads first (nsswitch `files`). */
export const HOSTS_FILE = "/etc/hosts";

/** Where the host name is read from when `--allow-sys=hostname` is not granted. */
export const HOSTNAME_FILE = "/etc/hostname";

/** This machine as a resolver on it sees it, at one moment. */
export interface LocalMachine {
  /** The machine's host name, lower case without a final dot, if it could be read. */
  readonly hostname?: string;
  /** Names in the hosts file (lower case, no final dot) and the canonical addresses of each. */
  readonly hosts: ReadonlyMap<string, readonly string[]>;
  /** Canonical addresses of this machine's interfaces (empty when they could not be read). */
  readonly addresses: ReadonlySet<string>;
  /** What could not be read, and why: `"/etc/hosts: NotCapable"`. */
  readonly unread: readonly string[];
}

/** A machine with no names and no addresses beyond loopback: what tests start from. */
export function bareMachine(): LocalMachine {
  return { hosts: new Map(), addresses: new Set(), unread: [] };
}

/**
 * Reads the hosts file, the host name and the interface addresses. Never throws: what cannot be
 * read is left out and named in `unread`.
 *
 * @param files the hosts and host-name files (tests point them elsewhere)
 */
export async function readLocalMachine(
  files: { readonly hosts?: string; readonly hostname?: string } = {},
): Promise<LocalMachine> {
  const unread: string[] = [];
  const hostsFile = files.hosts ?? HOSTS_FILE;
  let hosts = new Map<string, string[]>();
  try {
    hosts = parseHosts(await Deno.readTextFile(hostsFile));
  } catch (error) {
    if (!(error instanceof Deno.errors.NotFound)) unread.push(`${hostsFile}: ${why(error)}`);
  }
  const hostname = await ownHostname(files.hostname ?? HOSTNAME_FILE, unread);
  const addresses = new Set<string>();
  try {
    for (const { address } of Deno.networkInterfaces()) {
      const canonical = canonicalAddress(address.replace(/%.*$/, ""));
      if (canonical !== undefined) addresses.add(canonical);
    }
  } catch (error) {
    unread.push(`network interfaces: ${why(error)}`);
  }
  return { ...(hostname ? { hostname } : {}), hosts, addresses, unread };
}

/** `Deno.hostname()`, else the host-name file; undefined (and noted) when neither answers. */
async function ownHostname(file: string, unread: string[]): Promise<string | undefined> {
  try {
    return asName(Deno.hostname());
  } catch (error) {
    try {
      return asName((await Deno.readTextFile(file)).trim());
    } catch {
      unread.push(`host name: ${why(error)}`);
      return undefined;
    }
  }
}

function why(error: unknown): string {
  return error instanceof Error ? error.name : String(error);
}

/** A name as resolvers compare it: lower case, without a final dot; undefined when empty. */
function asName(text: string): string | undefined {
  const name = text.toLowerCase().replace(/\.+$/, "");
  return name === "" ? undefined : name;
}

/**
 * Reads a hosts file (hosts(5)): one address and its names per line, `#` to the end of a line is
 * a comment, a line whose address does not parse is skipped (as glibc skips it). A name on several
 * lines gets every address, in file order.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { parseHosts } from "./local_machine.ts";
 * const hosts = parseHosts("127.0.0.1 localhost\n::1 ip6-localhost # v6\n10.0.0.9 Db.Lan. db\n");
 * assert.deepEqual(hosts.get("db.lan"), ["10.0.0.9"]);
 * assert.deepEqual(hosts.get("ip6-localhost"), ["::1"]);
 * ```
 */
export function parseHosts(text: string): Map<string, string[]> {
  const hosts = new Map<string, string[]>();
  for (const line of text.split("\n")) {
    const fields = line.replace(/#.*$/, "").trim().split(/\s+/);
    if (fields.length < 2) continue;
    const address = canonicalAddress(fields[0].replace(/%.*$/, ""));
    if (address === undefined) continue;
    for (const field of fields.slice(1)) {
      const name = asName(field);
      if (name === undefined) continue;
      const known = hosts.get(name) ?? [];
      if (!known.includes(address)) known.push(address);
      hosts.set(name, known);
    }
  }
  return hosts;
}

/**
 * True when two readings say the same: host name, hosts-file names and their addresses in order,
 * interface addresses, and what could not be read.
 */
export function sameMachine(a: LocalMachine, b: LocalMachine): boolean {
  if (a === b) return true;
  if (a.hostname !== b.hostname || a.hosts.size !== b.hosts.size) return false;
  if (a.addresses.size !== b.addresses.size || a.unread.join("\n") !== b.unread.join("\n")) {
    return false;
  }
  for (const address of a.addresses) if (!b.addresses.has(address)) return false;
  for (const [name, addresses] of a.hosts) {
    const other = b.hosts.get(name);
    if (!other || other.join(" ") !== addresses.join(" ")) return false;
  }
  return true;
}

/**
 * The machine as the egress judges each connection by — each new one, and each pooled one before
 * it is used again: read again once it is older than `maxAgeMs`, so a hosts-file line added after
 * boot is seen by the first connection made or reused after that; one read at a time. A reading
 * that says what the last one said keeps the last one's object (callers may cache verdicts per
 * reading); one that differs is told to every {@link onChange} listener.
 */
export class MachineView {
  readonly #read: () => Promise<LocalMachine>;
  readonly #clock: () => number;
  readonly #maxAgeMs: number;
  #latest: LocalMachine = bareMachine();
  #readAt = -Infinity;
  #pending?: Promise<LocalMachine>;
  readonly #listeners = new Set<(machine: LocalMachine) => void>();

  /**
   * @param read how the machine is read (default: {@link readLocalMachine})
   * @param options `clock` (ms, monotonic) and `maxAgeMs` (default 1000)
   */
  constructor(
    read: () => Promise<LocalMachine> = () => readLocalMachine(),
    options: { readonly clock?: () => number; readonly maxAgeMs?: number } = {},
  ) {
    this.#read = read;
    this.#clock = options.clock ?? (() => performance.now());
    this.#maxAgeMs = options.maxAgeMs ?? 1000;
  }

  /** The machine as last read (before the first read: names and addresses unknown). */
  latest(): LocalMachine {
    return this.#latest;
  }

  /** True while the last reading is younger than `maxAgeMs` ({@link current} would not read). */
  fresh(): boolean {
    return this.#clock() - this.#readAt < this.#maxAgeMs;
  }

  /** The machine, read again first when the last reading is older than `maxAgeMs`. */
  current(): Promise<LocalMachine> {
    if (this.#clock() - this.#readAt < this.#maxAgeMs) return Promise.resolve(this.#latest);
    this.#pending ??= this.#read().then((machine) => {
      this.#readAt = this.#clock();
      if (sameMachine(this.#latest, machine)) return this.#latest;
      this.#latest = machine;
      for (const listener of this.#listeners) tell(listener, machine);
      return machine;
    }, () => this.#latest).finally(() => this.#pending = undefined);
    return this.#pending;
  }

  /**
   * Calls `listener` with each reading that differs from the one before it.
   *
   * @returns a function that stops calling it
   */
  onChange(listener: (machine: LocalMachine) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }
}

/** Calls a change listener; its failure is its own, never the reading's. */
function tell(listener: (machine: LocalMachine) => void, machine: LocalMachine): void {
  try {
    listener(machine);
  } catch {
    // The reading stands; a listener that fails has nothing to undo here.
  }
}
