/**
 * Turns the bootstrap config's `egress` section into {@link EgressSettings}.
 *
 * @module
 */
import { type EgressConfig, isolatesTenants } from "../config/egress_schema.ts";
import { splitTarget } from "../request/host.ts";
import type { EgressSettings } from "./egress.ts";
import type { TlsTransportSettings } from "./transport.ts";

/** Maps config field names to the egress's settings. */
export function egressSettings(config: EgressConfig): EgressSettings {
  return {
    socks: config.socks.map(({ hostname, port, pool_port }) =>
      pool_port === undefined ? { hostname, port } : { hostname, port, poolPort: pool_port }
    ),
    transport: transportSettings(config),
    isolateTenants: isolatesTenants(config),
    direct: config.direct,
    allowPrivate: config.allow_private,
    connectTimeoutMs: config.connect_timeout_ms,
    idleSocketMs: config.idle_socket_ms,
    bodyIdleMs: config.body_idle_ms,
    ownedReads: config.owned_reads,
    reuseSettleMs: config.reuse_settle_ms,
    breaker: {
      window: config.breaker.window,
      minSamples: config.breaker.min_samples,
      failureRatio: config.breaker.failure_ratio,
      probeIntervalMs: config.probe_interval_ms,
    },
    negativeCache: {
      failures: config.negative_cache.failures,
      ttlMs: config.negative_cache.ttl_ms,
      whenAllCold: config.negative_cache.when_all_cold,
    },
    retryBudget: {
      ratio: config.retry.budget_ratio,
      minRetries: config.retry.budget_min,
      windowMs: config.retry.window_ms,
    },
    backoff: { baseMs: config.retry.backoff_base_ms, capMs: config.retry.backoff_cap_ms },
  };
}

/**
 * The `socks5_tls` or `https_tunnel` transport's settings (paths already resolved by the loader),
 * if one is set.
 */
function transportSettings(config: EgressConfig): TlsTransportSettings | undefined {
  const transport = config.transport;
  if (transport === undefined || transport.kind === "wireguard") return undefined;
  const hub = splitTarget(transport.hub)!;
  return {
    kind: transport.kind,
    ...(transport.kind === "socks5_tls" ? { alpn: transport.alpn } : {}),
    hostname: hub.host,
    port: hub.port,
    serverName: transport.server_name,
    certFile: transport.cert_file,
    keyFile: transport.key_file,
    caFile: transport.ca_file,
  };
}
