/**
 * The `egress` section of the bootstrap config: the SOCKS pool (local instances, or the hub's pool
 * reached over a transport), per-tenant stream isolation, the `direct` upstream allowlist, and the
 * timeouts, breaker, negative cache and retry numbers of the proxy dataplane.
 *
 * With `transport`, the SOCKS instances are the hub's pool ports: `socks5_tls` dials the hub's
 * relay in mutual TLS and names the port inside the stream; `https_tunnel` opens a WebSocket to the hub's
 * mutual-TLS endpoint per connection and names the port in its first message; `wireguard` dials
 * `hub:<port>` in plain TCP over the operator's tunnel. `load.ts` turns either into the instance list the egress uses
 * ({@link EgressConfig}), each entry the address the edge connects to — so `--allow-net` holds the
 * hub's address, never a pool port of it (`socks5_tls`, `https_tunnel`).
 *
 * @module
 */
import * as v from "valibot";
import { parseCidr } from "../request/cidr.ts";
import { splitTarget } from "../request/host.ts";
import { AlpnProtocols, IpLiteral, Port, SocketPath, Text, wholeNumber } from "./fields.ts";

/** `host:port` as `--allow-net` spells it (IPv6 in brackets). */
export const HostPort: v.GenericSchema<string> = v.pipe(
  v.string("Expected host:port"),
  v.regex(
    /^(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?):\d{1,5}$/,
    "Expected host:port, e.g. 10.0.0.5:8080 or [::1]:8080",
  ),
  // Only a value that has a port can have a bad one: "10.0.0.5" is refused by the regex alone.
  v.check((text) => {
    const port = /:(\d{1,5})$/.exec(text);
    return !port || (Number(port[1]) >= 1 && Number(port[1]) <= 65535);
  }, "Port must be from 1 to 65535"),
);

/** The hub's pool ports an edge may use: at least one, each once. */
const PoolPorts = v.pipe(
  v.array(Port, "Expected a list of port numbers"),
  v.minLength(1, "Expected at least one pool port"),
  v.check((ports) => new Set(ports).size === ports.length, "Each pool port may appear once"),
);

/** The fields `socks5_tls` and `https_tunnel` share: the hub's address, the ports, the files. */
const hubTlsFields = {
  /** The relay's `host:port`: the one address `--allow-net` grants for egress. */
  hub: v.pipe(
    HostPort,
    v.check(
      (text) => !/^localhost:/i.test(text),
      "Use 127.0.0.1 or [::1], not localhost (it may resolve to an address nothing listens on)",
    ),
  ),
  ports: PoolPorts,
  /** This node's client certificate (its CN is the node id) and key. */
  cert_file: Text,
  key_file: Text,
  /** The CA that signs the hub's certificate. */
  ca_file: Text,
  /** The name the hub's certificate carries, when `hub` is an address (also sent as SNI). */
  server_name: v.optional(
    v.pipe(
      v.string("Expected a host name"),
      v.regex(
        /^[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?$/,
        "Expected a host name such as hub.example.net",
      ),
    ),
  ),
};

/** SOCKS5 inside mutual TLS to the hub's relay (`transport.socks5_tls` of the hub config). */
const Socks5TlsTransport = v.strictObject({
  kind: v.literal("socks5_tls"),
  ...hubTlsFields,
  /**
   * The ALPN protocols the ClientHello offers (default `[http/1.1]`; `[]`: none). The hub's
   * `transport.socks5_tls.alpn` must select one of them, or be empty. The pool port is never here.
   */
  alpn: v.optional(AlpnProtocols, ["http/1.1"]),
});

/**
 * A WebSocket per SOCKS connection to the hub's mutual-TLS endpoint (`transport.https_tunnel` of
 * the hub config), its first message naming the pool port.
 */
const HttpsTunnelTransport = v.strictObject({ kind: v.literal("https_tunnel"), ...hubTlsFields });

/** Plain TCP to the hub's private address over the operator's WireGuard tunnel. */
const WireguardTransport = v.strictObject({
  kind: v.literal("wireguard"),
  /** The hub's address inside the tunnel. */
  hub: IpLiteral,
  ports: PoolPorts,
});

const ratio = (fallback: number) =>
  v.optional(
    v.pipe(
      v.number("Expected a number"),
      v.minValue(0, "Expected 0 to 1"),
      v.maxValue(1, "Expected 0 to 1"),
    ),
    fallback,
  );

/** The egress section. */
export const EgressSchema: v.GenericSchema<unknown, EgressInput> = v.optional(
  v.strictObject({
    socks: v.optional(v.array(v.strictObject({ hostname: IpLiteral, port: Port })), []),
    /** The hub's SOCKS pool, reached over a transport; `socks` must then be empty. */
    transport: v.optional(
      v.variant(
        "kind",
        [Socks5TlsTransport, HttpsTunnelTransport, WireguardTransport],
        'Expected kind "socks5_tls", "https_tunnel" or "wireguard"',
      ),
    ),
    /**
     * Per-tenant SOCKS credentials, so Tor never puts two tenants on one circuit (default: on
     * with `transport`, off for local `socks`).
     */
    isolate_tenants: v.optional(v.boolean("Expected true or false")),
    /**
     * Local mode: a `portcullis torpool` on this machine (its API socket, an absolute path). The
     * pool's view of its instances opens the breaker of an instance it does not list as live;
     * `socks` lists the pool's SOCKS ports.
     */
    torpool: v.optional(
      v.strictObject({
        api_socket: v.pipe(
          SocketPath,
          v.check(
            (path) => path.startsWith("/"),
            "Expected an absolute path (Deno grants unix: sockets by absolute path)",
          ),
        ),
      }),
    ),
    direct: v.optional(v.array(HostPort, "Expected a list of host:port"), []),
    /**
     * Internal destinations (loopback, private, link-local, unique-local, …) tenants may reach:
     * CIDRs or exact host:port targets. Everything internal not listed is refused at connect time.
     */
    allow_private: v.optional(
      v.array(
        v.pipe(
          v.string("Expected a CIDR such as 10.0.0.0/8 or a host:port"),
          v.check(
            (text) => splitTarget(text) !== undefined || typeof parseCidr(text) !== "string",
            "Expected a CIDR such as 10.0.0.0/8 or a host:port such as 10.0.0.5:8080",
          ),
        ),
        "Expected a list of CIDRs and host:port targets",
      ),
      [],
    ),
    connect_timeout_ms: v.optional(wholeNumber(1, 600_000), 10_000),
    body_idle_ms: v.optional(wholeNumber(1, 3_600_000), 60_000),
    idle_socket_ms: v.optional(wholeNumber(1, 3_600_000), 30_000),
    owned_reads: v.optional(v.boolean("Expected true or false"), true),
    reuse_settle_ms: v.optional(wholeNumber(0, 1000), 10),
    probe_interval_ms: v.optional(wholeNumber(1, 3_600_000), 30_000),
    breaker: v.optional(
      v.strictObject({
        window: v.optional(wholeNumber(1, 1000), 20),
        min_samples: v.optional(wholeNumber(1, 1000), 10),
        failure_ratio: ratio(0.5),
      }),
      {},
    ),
    negative_cache: v.optional(
      v.strictObject({
        failures: v.optional(wholeNumber(1, 1000), 3),
        ttl_ms: v.optional(wholeNumber(1, 86_400_000), 30_000),
        /**
         * When every backend of a route is cold: `try` them anyway (fail open, like Envoy's panic
         * mode), or `refuse` with 503 upstream_circuit_open and Retry-After.
         */
        when_all_cold: v.optional(
          v.picklist(["try", "refuse"], 'Expected "try" or "refuse"'),
          "try",
        ),
      }),
      {},
    ),
    retry: v.optional(
      v.strictObject({
        budget_ratio: ratio(0.2),
        budget_min: v.optional(wholeNumber(0, 1_000_000), 10),
        window_ms: v.optional(wholeNumber(10, 3_600_000), 10_000),
        backoff_base_ms: v.optional(wholeNumber(0, 60_000), 25),
        backoff_cap_ms: v.optional(wholeNumber(0, 60_000), 250),
      }),
      {},
    ),
  }),
  {},
);

/** The fields `socks5_tls` and `https_tunnel` share, as validated. */
export interface HubTlsTransportFields {
  /** The relay's `host:port`: the one address `--allow-net` grants for egress. */
  hub: string;
  /** The hub's pool ports this edge may use. */
  ports: number[];
  /** This node's client certificate (its CN is the node id). */
  cert_file: string;
  /** This node's private key. */
  key_file: string;
  /** The CA that signs the hub's certificate. */
  ca_file: string;
  /** The name the hub's certificate carries, when `hub` is an address. */
  server_name?: string;
}

/** `egress.transport` of kind `socks5_tls`: SOCKS5 inside mutual TLS to the hub's relay. */
export interface Socks5TlsTransportConfig extends HubTlsTransportFields {
  /** The transport's kind. */
  kind: "socks5_tls";
  /** The ALPN protocols offered (`[]`: none); never the pool port, which travels inside TLS. */
  alpn: string[];
}

/** `egress.transport` of kind `https_tunnel`: a WebSocket per SOCKS connection to the hub. */
export interface HttpsTunnelTransportConfig extends HubTlsTransportFields {
  /** The transport's kind. */
  kind: "https_tunnel";
}

/** `egress.transport` of kind `wireguard`: plain TCP to the hub over the operator's tunnel. */
export interface WireguardTransportConfig {
  /** The transport's kind. */
  kind: "wireguard";
  /** The hub's address inside the tunnel. */
  hub: string;
  /** The hub's pool ports this edge may use. */
  ports: number[];
}

/** The egress section as validated, as written (defaults applied). */
export interface EgressInput {
  /** Local SOCKS instances. */
  socks: { hostname: string; port: number }[];
  /** The hub's SOCKS pool, reached over a transport. */
  transport?: Socks5TlsTransportConfig | HttpsTunnelTransportConfig | WireguardTransportConfig;
  /** Per-tenant SOCKS credentials (unset: on exactly when `transport` is). */
  isolate_tenants?: boolean;
  /** A `portcullis torpool` on this machine, by its API socket. */
  torpool?: { api_socket: string };
  /** Backends reached without the SOCKS pool, as `host:port`. */
  direct: string[];
  /** Internal destinations tenants may reach: CIDRs or `host:port`. */
  allow_private: string[];
  /** How long a connection to a way out may take. */
  connect_timeout_ms: number;
  /** How long a body may sit idle before the response is cut off. */
  body_idle_ms: number;
  /** How long a kept-alive upstream connection stays open unused. */
  idle_socket_ms: number;
  /**
   * Read plain-HTTP upstream responses on the gateway's own connections into reused buffers (the
   * default), rather than through `node:http`'s client.
   */
  owned_reads: boolean;
  /**
   * How long a pooled upstream connection back from an exchange stays out of other client
   * connections' reach (the one it served may take it back at once); 0 turns the rule off.
   */
  reuse_settle_ms: number;
  /** How often an open breaker probes its instance. */
  probe_interval_ms: number;
  /** When an instance's breaker opens. */
  breaker: { window: number; min_samples: number; failure_ratio: number };
  /** When a backend goes cold, for how long, and what a route with every backend cold does. */
  negative_cache: { failures: number; ttl_ms: number; when_all_cold: "try" | "refuse" };
  /** The retry budget and backoff. */
  retry: {
    budget_ratio: number;
    budget_min: number;
    window_ms: number;
    backoff_base_ms: number;
    backoff_cap_ms: number;
  };
}

/** The transport as written (`socks5_tls` and `https_tunnel` paths resolved by `load.ts`). */
export type EgressTransport = NonNullable<EgressInput["transport"]>;

/**
 * One SOCKS instance of the edge: the address it connects to and, through the hub's relay
 * (`socks5_tls`) or tunnel (`https_tunnel`), the pool port behind that address.
 */
export interface SocksEntry {
  readonly hostname: string;
  readonly port: number;
  readonly pool_port?: number;
}

/**
 * The egress section as the edge uses it: `socks` is every SOCKS instance it dials — as written,
 * or one per pool port of `transport`. `isolate_tenants` is as written; {@link isolatesTenants}
 * applies its default.
 *
 * @internal
 */
export interface EgressConfig extends Omit<EgressInput, "socks"> {
  readonly socks: readonly SocksEntry[];
}

/**
 * Whether tenants get their own SOCKS credentials: as set, else on exactly when a transport is.
 *
 * @example
 * ```ts
 * import { isolatesTenants } from "./egress_schema.ts";
 * isolatesTenants({ transport: { kind: "wireguard", hub: "10.0.0.1", ports: [9050] } }); // true
 * isolatesTenants({ isolate_tenants: true }); // true
 * isolatesTenants({}); // false
 * ```
 */
export function isolatesTenants(
  egress: Pick<EgressInput, "transport" | "isolate_tenants">,
): boolean {
  return egress.isolate_tenants ?? egress.transport !== undefined;
}
