/**
 * What the edge records about each request, in one place: a {@link RequestRecord} starts when the
 * request arrives and is finished once when its response ends (or it is dropped). Finishing feeds
 * the metrics, writes the access-log line and ends the trace — so the three agree on request id,
 * lane and status. Tenants appear only as hashed labels and clients only anonymised; the protected
 * lanes' operation paths are never logged.
 *
 * @module
 */
import { type Span, SpanKind } from "@opentelemetry/api";
import type { LaneName } from "../ledger/lane_names.ts";
import { type AccessLog, protocolField, shouldLog, userAgentField } from "./access_log.ts";
import { anonymizeIp } from "./anonymize.ts";
import type { RequestMetrics } from "./request_metrics.ts";
import type { TenantLabels } from "./tenant_label.ts";
import {
  AttemptTrace,
  endServerSpan,
  type SpanAttributes,
  spanMethod,
  spanVerb,
  type Tracing,
} from "./tracing.ts";

/** One request as observed. */
export class RequestRecord {
  readonly started: number = performance.now();
  readonly lane: LaneName;
  readonly requestId: string;
  readonly method: string;
  /** The path without its query: as received until the head checks made it canonical. */
  path: string;
  /** The query as received, with its `?` ("" when none). */
  readonly query: string;
  /** `HTTP/1.1`, `HTTP/2`, … */
  readonly protocol: string;
  /** The User-Agent as the access log writes it (cut, control characters escaped). */
  readonly userAgent?: string;
  /** How the path is written in the access log, when not as it is (secrets cut out). */
  readonly logPath?: (path: string) => string;
  readonly peer: string;
  readonly bytesIn: number;
  /** The tenant's host (hashed before it leaves the process). */
  tenantHost?: string;
  route = "-";
  status = 0;
  attempts = 0;
  /** Milliseconds spent waiting for upstream response headers, over all attempts. */
  upstreamMs = 0;
  /** The overload, policy or failure kind that decided the reply, if any. */
  outcome?: string;
  bytesOut = 0;
  readonly span?: Span;
  /** The response phase, from the reply's first byte to the end. */
  responding?: Span;
  readonly #tracing: Tracing;
  readonly #labels?: TenantLabels;
  #finished = false;

  /**
   * @param tracing the edge's tracing
   * @param fields the request as it arrived; `traceparent` only from a trusted proxy
   * @param labels the salted labels that name hosts on spans (without them, no host is named)
   */
  constructor(
    tracing: Tracing,
    fields: {
      lane: LaneName;
      requestId: string;
      method: string;
      target: string;
      peer: string;
      bytesIn: number;
      scheme?: "http" | "https";
      traceparent?: string;
      /** node:http's `httpVersion` (`1.1`, `2.0`). */
      httpVersion?: string;
      userAgent?: string | readonly string[];
      logPath?: (path: string) => string;
    },
    labels?: TenantLabels,
  ) {
    this.#tracing = tracing;
    this.#labels = labels;
    this.lane = fields.lane;
    this.requestId = fields.requestId;
    this.method = fields.method;
    const query = fields.target.indexOf("?");
    this.path = query < 0 ? fields.target : fields.target.slice(0, query);
    this.query = query < 0 ? "" : fields.target.slice(query);
    this.protocol = protocolField(fields.httpVersion);
    this.userAgent = userAgentField(fields.userAgent);
    this.logPath = fields.logPath;
    this.peer = fields.peer;
    this.bytesIn = fields.bytesIn;
    this.span = tracing.root(this.method, {
      "portcullis.request_id": this.requestId,
      "portcullis.lane": this.lane,
      "http.request.method": spanMethod(this.method),
      "url.scheme": fields.scheme ?? "http",
      "url.path": this.path,
    }, fields.traceparent);
  }

  /** Records the canonical path: the one every phase, the upstream and the log see. */
  canonical(path: string): void {
    this.path = path;
    this.span?.setAttribute("url.path", path);
  }

  /** Starts a phase span under the request's root; undefined when tracing is off. */
  phase(name: string, attributes?: SpanAttributes): Span | undefined {
    return this.#tracing.child(this.span, name, attributes);
  }

  /**
   * Starts the CLIENT span of one upstream attempt; undefined when tracing is off.
   *
   * @param attempt the attempt's number (1 is the first)
   * @param egress the way out (`direct` or the SOCKS instance)
   * @param backend the backend authority (named only by its salted label)
   */
  attempt(attempt: number, egress: string, backend: string): AttemptTrace | undefined {
    if (!this.span) return undefined;
    const attributes: SpanAttributes = {
      "http.request.method": spanMethod(this.method),
      "portcullis.egress": egress,
    };
    if (attempt > 1) attributes["http.request.resend_count"] = attempt - 1;
    if (this.#labels) attributes["server.address"] = this.#labels.label(backend);
    const span = this.#tracing.child(this.span, spanVerb(this.method), attributes, SpanKind.CLIENT);
    return span && new AttemptTrace(span);
  }

  /** Marks the record finished; false when it already was. */
  claim(): boolean {
    if (this.#finished) return false;
    this.#finished = true;
    return true;
  }
}

/**
 * The edge's observer.
 *
 * @internal
 */
export class Observer {
  readonly tracing: Tracing;
  readonly metrics: RequestMetrics;
  readonly #labels?: TenantLabels;
  readonly #log: AccessLog;
  readonly #logQuery: boolean;

  /**
   * @param labels tenant labels; without them tenant-labelled series and log fields are withheld
   * @param logQuery write the query beside the path (`observe.access_log.query`; default off)
   */
  constructor(options: {
    tracing: Tracing;
    metrics: RequestMetrics;
    accessLog: AccessLog;
    labels?: TenantLabels;
    logQuery?: boolean;
  }) {
    this.tracing = options.tracing;
    this.metrics = options.metrics;
    this.#log = options.accessLog;
    this.#labels = options.labels;
    this.#logQuery = options.logQuery ?? false;
  }

  /** The hashed label of a host ("-" when no salt is configured). */
  label(host: string | undefined): string {
    return host && this.#labels ? this.#labels.label(host) : "-";
  }

  /** True when tenants are labelled (a salt is configured and readable). */
  get labelled(): boolean {
    return this.#labels !== undefined;
  }

  /** Starts observing a request. */
  begin(fields: ConstructorParameters<typeof RequestRecord>[1]): RequestRecord {
    return new RequestRecord(this.tracing, fields, this.#labels);
  }

  /**
   * Finishes `record` when `stream` (the response, or an upgraded socket) closes, with the bytes
   * written to the connection meanwhile.
   */
  finishOnClose(
    record: RequestRecord,
    stream: { once(event: "close", listener: () => void): unknown },
    socket: { readonly bytesWritten?: number } | null | undefined,
  ): void {
    const before = socket?.bytesWritten ?? 0;
    stream.once("close", () => {
      record.bytesOut = Math.max(0, (socket?.bytesWritten ?? before) - before);
      this.finish(record);
    });
  }

  /** Finishes a request once: metrics, the access-log line, the root span. */
  finish(record: RequestRecord): void {
    if (!record.claim()) return;
    const totalMs = performance.now() - record.started;
    const tenant = record.tenantHost && this.labelled ? this.label(record.tenantHost) : undefined;
    this.metrics.record({
      lane: record.lane,
      tenant,
      route: record.route,
      status: record.status,
      totalS: totalMs / 1000,
      upstreamS: record.upstreamMs / 1000,
    });
    if (shouldLog(record.lane, record.path)) {
      this.#log.log({
        time: new Date().toISOString(),
        request_id: record.requestId,
        lane: record.lane,
        tenant: tenant ?? "-",
        route: record.route,
        method: record.method,
        path: (record.logPath?.(record.path) ?? record.path) + (this.#logQuery ? record.query : ""),
        protocol: record.protocol,
        status: record.status,
        bytes_in: record.bytesIn,
        bytes_out: record.bytesOut,
        duration_ms: Math.round(totalMs * 1000) / 1000,
        ...(record.attempts > 0
          ? {
            upstream_ms: Math.round(record.upstreamMs * 1000) / 1000,
            attempts: record.attempts,
            retries: record.attempts - 1,
          }
          : {}),
        ...(record.outcome ? { outcome: record.outcome } : {}),
        client: anonymizeIp(record.peer),
        ...(record.userAgent === undefined ? {} : { user_agent: record.userAgent }),
      });
    }
    record.responding?.end();
    if (record.span) {
      if (tenant) record.span.setAttribute("server.address", tenant);
      endServerSpan(record.span, {
        method: record.method,
        route: record.route === "-" ? undefined : record.route,
        status: record.status,
        outcome: record.outcome,
      });
    }
  }
}
