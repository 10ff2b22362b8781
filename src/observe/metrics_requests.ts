/**
 * The metrics page's per-request and config families: finished requests by lane, tenant label,
 * route and class, the gateway and upstream latency histograms, the live config generation, and
 * each served certificate's expiry.
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
import { BUCKETS, type RequestMetrics } from "./request_metrics.ts";

/** Per-request series, the config generation and certificate expiry. */
export interface ObserveFacts {
  readonly metrics: RequestMetrics;
  /** False when no tenant salt is configured: tenant and route labels are withheld. */
  readonly labelled: boolean;
  readonly generation: number;
  /** A rejected load that the source has not yet superseded. */
  readonly rejectedPending: boolean;
  /** Served certificates: a hashed label of the first name, and the expiry (ms since epoch). */
  readonly certificates: readonly { readonly label: string; readonly notAfter: number }[];
}

/** Finished requests by lane, tenant, route and class, and the two latency histograms. */
export function requestFamilies(observe: ObserveFacts): Family[] {
  return [
    gauge(
      "tenant_labels",
      "1 when tenant series are labelled with salted hashes; 0 when no salt is configured and tenant labels are withheld.",
      only(observe.labelled ? 1 : 0),
    ),
    counter(
      "requests_total",
      "Finished requests by lane, hashed tenant, route and status class (tenant and route only with a salt).",
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
      "gateway",
      "Time the gateway added to a request (total minus upstream waiting), seconds.",
    ),
    latencyHistogram(
      observe.metrics,
      "upstream",
      "Time spent waiting for upstream response headers, seconds.",
    ),
  ];
}

/** One lane-labelled histogram: cumulative buckets, `+Inf`, sum and count per lane. */
function latencyHistogram(
  metrics: RequestMetrics,
  which: "gateway" | "upstream",
  help: string,
): Family {
  return histogram(
    `${which}_seconds`,
    help,
    byLaneHistogram(BUCKETS, (lane) => metrics.histogram(lane, which)),
  );
}

/** The live config generation, a pending rejection, and each served certificate's expiry. */
export function configFamilies(observe: ObserveFacts): Family[] {
  return [
    gauge("config_generation", "The live configuration generation.", only(observe.generation)),
    gauge(
      "config_rejected_pending",
      "1 while the last load was rejected and the source still holds it.",
      only(observe.rejectedPending ? 1 : 0),
    ),
    gauge(
      "tls_certificate_expiry_seconds",
      "Seconds until each served certificate expires (labelled by the hashed first name).",
      byLabel(
        "certificate",
        observe.certificates.map((c) => [c.label, Math.round((c.notAfter - Date.now()) / 1000)]),
      ),
    ),
  ];
}
