/**
 * The metrics page's per-request and config families: finished requests by lane, tenant label,
 * route and class (the page's one request counter), the end-to-end, gateway and upstream latency
 * histograms, the live config generation and its rejections, and each served certificate's expiry.
 *
 * Split from `metrics.ts`, which lists every group in page order; these are left off the page when
 * the edge reports no per-request series.
 *
 * @module
 */
import {
  byLabel,
  byLaneHistogram,
  counter,
  escapeLabel,
  type Family,
  gauge,
  histogram,
  only,
} from "./exposition.ts";
import { BUCKETS, type HistogramName, type RequestMetrics } from "./request_metrics.ts";
import { type PendingFacts, pendingFamilies } from "./metrics_pending.ts";

/** Per-request series, the config generation and certificate expiry. */
export interface ObserveFacts {
  readonly metrics: RequestMetrics;
  /** False when no tenant salt is configured: tenant and route labels are withheld. */
  readonly labelled: boolean;
  readonly generation: number;
  /** When the live generation went live (ms since the epoch; absent before the first). */
  readonly loadedAt?: number;
  /** A rejected load that the source has not yet superseded. */
  readonly rejectedPending: boolean;
  /** When the last load was rejected (ms since the epoch), if one ever was. */
  readonly rejectedAt?: number;
  /** Served certificates: a hashed label of the first name, and the expiry (ms since epoch). */
  readonly certificates: readonly { readonly label: string; readonly notAfter: number }[];
  /** A remote edge's set waiting for its cache (metrics_pending.ts); absent in local mode. */
  readonly pending?: PendingFacts;
}

/** Finished requests by lane, tenant, route and class, and the three latency histograms. */
export function requestFamilies(observe: ObserveFacts): Family[] {
  return [
    gauge(
      "tenant_labels",
      "1 when tenant series are labelled with salted hashes; 0 when no salt is configured and tenant labels are withheld.",
      only(observe.labelled ? 1 : 0),
    ),
    counter(
      "requests_total",
      "Finished requests by lane, status class (none: dropped or held unanswered), hashed tenant and route (tenant and route only with a salt).",
      [...observe.metrics.requests()].sort(([a], [b]) => a < b ? -1 : 1).map(([key, n]) => {
        const [lane, tenant, route, cls] = key.split("\t");
        const labels = tenant === ""
          ? `{lane="${lane}",class="${cls}"}`
          : `{lane="${lane}",tenant="${tenant}",route="${escapeLabel(route)}",class="${cls}"}`;
        return [labels, n];
      }),
    ),
    latencyHistogram(
      observe.metrics,
      "request",
      "request_duration_seconds",
      "Time from a request's head to its response's last byte, per lane.",
    ),
    latencyHistogram(
      observe.metrics,
      "gateway",
      "gateway_seconds",
      "Time the gateway added to a request (total minus upstream waiting), per lane.",
    ),
    latencyHistogram(
      observe.metrics,
      "upstream",
      "upstream_seconds",
      "Time spent waiting for upstream response headers, per lane.",
    ),
  ];
}

/** One lane-labelled histogram: cumulative buckets, `+Inf`, sum and count per lane. */
function latencyHistogram(
  metrics: RequestMetrics,
  which: HistogramName,
  name: string,
  help: string,
): Family {
  return histogram(name, help, byLaneHistogram(BUCKETS, (lane) => metrics.histogram(lane, which)));
}

/** The live config generation, rejections, and each served certificate's expiry. */
export function configFamilies(observe: ObserveFacts): Family[] {
  const seconds = (ms: number | undefined) => ms === undefined ? 0 : Math.floor(ms / 1000);
  return [
    gauge("config_generation", "The live configuration generation.", only(observe.generation)),
    gauge(
      "config_loaded_timestamp_seconds",
      "When the live configuration generation went live, Unix time (0 before the first).",
      only(seconds(observe.loadedAt)),
    ),
    gauge(
      "config_rejected_pending",
      "1 while the last load was rejected and the source still holds it.",
      only(observe.rejectedPending ? 1 : 0),
    ),
    gauge(
      "config_last_rejection_timestamp_seconds",
      "When a load was last rejected, Unix time (0 if none ever was).",
      only(seconds(observe.rejectedAt)),
    ),
    gauge(
      "tls_certificate_not_after_timestamp_seconds",
      "When each served certificate expires, Unix time (labelled by the hashed first name).",
      byLabel(
        "certificate",
        observe.certificates.map((c) => [c.label, Math.floor(c.notAfter / 1000)]),
      ),
    ),
    ...(observe.pending ? pendingFamilies(observe.pending) : []),
  ];
}
