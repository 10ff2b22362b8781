/**
 * The SOCKS instances of one edge as ways out: for each, where it is, how it is dialled (plain TCP,
 * TLS to the hub's relay naming a pool port, or a WebSocket to the hub's tunnel — `transport.ts`),
 * its label, and its agents. Without tenant isolation an instance has one agent; with it, one
 * per tenant, made when the tenant's first request goes out, each authenticating with that
 * tenant's credentials (`isolation.ts`) — node's keep-alive pool is per agent, so a connection
 * made for one tenant never carries another's request. The pool, breakers and scorer (`pool.ts`) see instances by index, whatever the agents.
 *
 * @module
 */
import type { Socket } from "node:net";
import { type AgentSettings, SocksAgent } from "./agents.ts";
import { TenantIsolation } from "./isolation.ts";
import {
  socksConnect,
  type SocksConnectOptions,
  type SocksInstance,
  socksProbe,
} from "./socks5.ts";
import { type SocksDial, tcpDial, TlsTransport, type TlsTransportSettings } from "./transport.ts";

/** One SOCKS instance as configured: where the edge connects, and the pool port behind it. */
export interface SocksEntry {
  readonly hostname: string;
  readonly port: number;
  /** With the `socks5_tls` transport: the hub's pool port, named by the preamble inside TLS; the address is the hub. */
  readonly poolPort?: number;
}

/** How the instances are reached and whether tenants are kept apart. */
export interface SocksWaysOptions {
  /** The `socks5_tls` or `https_tunnel` transport; entries with a `poolPort` are dialled through it. */
  readonly transport?: TlsTransportSettings;
  readonly isolateTenants: boolean;
}

/** The SOCKS instances of one edge, their dials and their agents. */
export class SocksWays {
  /** One per instance, in order: `host:port`, or `host:port/<pool port>` through the hub. */
  readonly labels: readonly string[];
  /**
   * Every agent made so far. The idle watch and the socket counts read it live: agents are added
   * as tenants appear.
   */
  readonly agents: SocksAgent[] = [];
  readonly #entries: readonly SocksEntry[];
  readonly #dials: readonly SocksDial[];
  readonly #settings: AgentSettings;
  readonly #isolation?: TenantIsolation;
  /** Per instance: its one agent (key `""`), or one per tenant host. */
  readonly #byTenant: Map<string, SocksAgent>[];

  /**
   * @param entries the instances, in pool order
   * @param settings the agents' connect timeout and destination checks
   * @param options the transport and the isolation switch
   * @throws {Error} when the transport's certificate, key or CA cannot be read
   * @throws {TypeError} when an entry names a pool port and no transport is given
   */
  constructor(
    entries: readonly SocksEntry[],
    settings: AgentSettings,
    options: SocksWaysOptions,
  ) {
    this.#entries = entries;
    this.#settings = settings;
    const needsTls = entries.some((entry) => entry.poolPort !== undefined);
    if (needsTls && !options.transport) {
      throw new TypeError("SOCKS entries name pool ports, but no hub transport is set");
    }
    const transport = needsTls ? new TlsTransport(options.transport!) : undefined;
    this.#dials = entries.map((entry) =>
      entry.poolPort === undefined ? tcpDial(entry) : transport!.dial(entry.poolPort)
    );
    this.labels = entries.map(labelOf);
    this.#isolation = options.isolateTenants ? new TenantIsolation() : undefined;
    this.#byTenant = entries.map(() => new Map());
  }

  /** How many instances there are. */
  get size(): number {
    return this.#entries.length;
  }

  /**
   * The agent for an attempt through instance `index` on behalf of `tenant`.
   *
   * @param tenant the tenant host; ignored without isolation
   */
  agent(index: number, tenant?: string): SocksAgent {
    const key = this.#isolation && tenant !== undefined ? tenant.toLowerCase() : "";
    const agents = this.#byTenant[index];
    let agent = agents.get(key);
    if (!agent) {
      agent = new SocksAgent(this.#instance(index, key), this.#settings, this.#dials[index]);
      agents.set(key, agent);
      this.agents.push(agent);
    }
    return agent;
  }

  /**
   * A raw stream through instance `index` (SNI passthrough), with the tenant's credentials.
   *
   * @throws {SocksError} classified
   */
  connect(
    index: number,
    target: { host: string; port: number },
    options: SocksConnectOptions & { readonly tenant?: string },
  ): Promise<Socket> {
    const key = this.#isolation && options.tenant !== undefined ? options.tenant : "";
    return socksConnect(this.#instance(index, key), target, {
      ...options,
      dial: this.#dials[index],
    });
  }

  /**
   * The breaker's half-open trial of instance `index`: a greeting (no credentials, no CONNECT)
   * over the instance's own dial.
   *
   * @throws {SocksError} when the instance does not answer as SOCKS5
   */
  probe(index: number, timeoutMs: number): Promise<void> {
    const { hostname, port } = this.#entries[index];
    return socksProbe({ hostname, port }, { timeoutMs, dial: this.#dials[index] });
  }

  /** Closes every pooled connection of every agent. */
  destroy(): void {
    for (const agent of this.agents) agent.destroy();
  }

  /** Instance `index` with the credentials for `tenant` (none for `""`). */
  #instance(index: number, tenant: string): SocksInstance {
    const { hostname, port } = this.#entries[index];
    if (tenant === "" || !this.#isolation) return { hostname, port };
    return { hostname, port, ...this.#isolation.credentials(tenant) };
  }
}

/** `host:port`, IPv6 in brackets; through the hub, `/<pool port>` after it. */
function labelOf(entry: SocksEntry): string {
  const host = entry.hostname.includes(":") ? `[${entry.hostname}]` : entry.hostname;
  const pool = entry.poolPort === undefined ? "" : `/${entry.poolPort}`;
  return `${host}:${entry.port}${pool}`;
}
