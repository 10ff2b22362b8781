/**
 * Turns the bootstrap config's `egress` section into {@link EgressSettings}.
 *
 * @module
 */
import type { EgressConfig } from "../config/egress_schema.ts";
import type { EgressSettings } from "./egress.ts";

/** Maps config field names to the egress's settings. */
export function egressSettings(config: EgressConfig): EgressSettings {
  return {
    socks: config.socks,
    direct: config.direct,
    allowPrivate: config.allow_private,
    connectTimeoutMs: config.connect_timeout_ms,
    idleSocketMs: config.idle_socket_ms,
    bodyIdleMs: config.body_idle_ms,
    breaker: {
      window: config.breaker.window,
      minSamples: config.breaker.min_samples,
      failureRatio: config.breaker.failure_ratio,
      probeIntervalMs: config.probe_interval_ms,
    },
    negativeCache: {
      failures: config.negative_cache.failures,
      ttlMs: config.negative_cache.ttl_ms,
    },
    retryBudget: {
      ratio: config.retry.budget_ratio,
      minRetries: config.retry.budget_min,
      windowMs: config.retry.window_ms,
    },
    backoff: { baseMs: config.retry.backoff_base_ms, capMs: config.retry.backoff_cap_ms },
  };
}
