/**
 * Tracing through `@opentelemetry/api` only. Deno's built-in OpenTelemetry (`OTEL_DENO=true`)
 * registers the exporter; the code never wires an SDK. Each request gets a root span with child
 * spans per phase (admission, policy and route, each upstream attempt, the response). When no
 * recording provider is registered at boot, tracing stays off and costs nothing per request.
 *
 * Attributes carry the request id, method, path without query, lane, hashed tenant label, route and
 * status — never a plain tenant host or a client address.
 *
 * @module
 */
import {
  context,
  type Span,
  SpanKind,
  SpanStatusCode,
  trace,
  type Tracer,
} from "@opentelemetry/api";

/** Attribute values a span takes. */
export type SpanAttributes = Record<string, string | number | boolean>;

/** The edge's tracer, or nothing when no provider records. */
export class Tracing {
  readonly #tracer?: Tracer;

  private constructor(tracer?: Tracer) {
    this.#tracer = tracer;
  }

  /** Looks for a recording provider now (register one before the edge starts). */
  static detect(version: string): Tracing {
    const tracer = trace.getTracer("portcullis", version);
    // A probe span is never ended, so it is never exported.
    return new Tracing(tracer.startSpan("portcullis.probe").isRecording() ? tracer : undefined);
  }

  /** Tracing that never records (tests, or a process without a provider). */
  static off(): Tracing {
    return new Tracing();
  }

  /** True when spans are recorded. */
  get enabled(): boolean {
    return this.#tracer !== undefined;
  }

  /** Starts a request's root span; undefined when tracing is off. */
  root(name: string, attributes: SpanAttributes): Span | undefined {
    return this.#tracer?.startSpan(name, { kind: SpanKind.SERVER, attributes });
  }

  /** Starts a child of `parent`; undefined when there is no parent. */
  child(parent: Span | undefined, name: string, attributes?: SpanAttributes): Span | undefined {
    if (!parent || !this.#tracer) return undefined;
    return this.#tracer.startSpan(name, { attributes }, trace.setSpan(context.active(), parent));
  }
}

/** Ends a span with the HTTP status (5xx and 0 mark an error). */
export function endWithStatus(span: Span | undefined, status: number, outcome?: string): void {
  if (!span) return;
  span.setAttribute("http.response.status_code", status);
  if (outcome) span.setAttribute("portcullis.outcome", outcome);
  if (status === 0 || status >= 500) {
    span.setStatus({ code: SpanStatusCode.ERROR, message: outcome });
  }
  span.end();
}
