/**
 * Tracing through `@opentelemetry/api` only. Deno's built-in OpenTelemetry (`OTEL_DENO=true`)
 * registers the exporter; the code never wires an SDK. Each request gets a SERVER span named
 * `{method} {route}` (OpenTelemetry HTTP semantic conventions) with children per phase (admission,
 * route, policy, response) and one CLIENT span per upstream attempt. When nothing would record at
 * boot, tracing stays off and costs nothing per request.
 *
 * Attributes carry the method, the scheme, the canonical path without its query, the route, the
 * status and the request id; `server.address` is a salted hash (of the tenant host on the SERVER
 * span, of the backend on a CLIENT span), left out without a salt. Never a plain host, a client
 * address, `url.query` or `url.full`.
 *
 * **The runtime's own spans.** With `OTEL_DENO=true`, Deno 2.9.6 also starts a span of its own
 * for every `node:http` request served and sent, every `fetch` and every `Deno.serve` request,
 * with `url.full` = scheme, the request's Host and the whole target — the tenant host and the
 * query string. No Deno 2.9 variable turns those off while keeping the API's spans:
 * `OTEL_DENO_TRACING` registers the API's provider and gates the runtime's spans alike
 * (`cli/args/flags.rs` `otel_config`, `ext/telemetry/telemetry.ts` `bootstrap`,
 * `ext/node/polyfills/_http_server.js`). What does separate them is the sampler: the runtime
 * starts its spans without a parent (measured: the gateway's async context does not reach node's
 * parser), so under `OTEL_TRACES_SAMPLER=parentbased_always_off` none is recorded, while a span
 * under a sampled parent is. `OTEL_PROPAGATORS=none` keeps Deno from giving the runtime's server
 * span the client's `traceparent` as that parent, and from overwriting the gateway's `traceparent`
 * upstream. So when Deno's provider is the one registered, {@link Tracing.detect} refuses unless
 * a span without a parent goes unrecorded and a `traceparent` does not propagate — probed through
 * the API, with no `--allow-env`. The gateway then starts a new trace under a parent it mints
 * for the client's hop and never exports (the root SERVER span names a parent id no backend
 * holds); a trusted proxy's `traceparent` is continued instead.
 *
 * @module
 */
import {
  propagation,
  ROOT_CONTEXT,
  type Span,
  type SpanContext,
  SpanKind,
  SpanStatusCode,
  trace,
  type Tracer,
} from "@opentelemetry/api";
import { formatTraceparent, mintSpanContext, parseTraceparent } from "./trace_context.ts";

/** Attribute values a span takes. */
export type SpanAttributes = Record<string, string | number | boolean>;

/** How many parentless probes must all go unrecorded (a ratio sampler may let one through). */
const ROOT_PROBES = 16;

/** Methods the HTTP semantic conventions name; any other is `_OTHER`. */
const KNOWN_METHODS = new Set([
  "CONNECT",
  "DELETE",
  "GET",
  "HEAD",
  "OPTIONS",
  "PATCH",
  "POST",
  "PUT",
  "QUERY",
  "TRACE",
]);

/** The edge's tracer, or nothing when no provider records. */
export class Tracing {
  readonly #tracer?: Tracer;
  /** True when a span without a parent is not recorded: new traces start under a minted one. */
  readonly #mint: boolean;
  /** Why the edge must not boot with this provider, when it must not. */
  readonly refusal?: string;

  private constructor(tracer?: Tracer, mint = false, refusal?: string) {
    this.#tracer = tracer;
    this.#mint = mint;
    this.refusal = refusal;
  }

  /**
   * Looks for a recording provider now (register one before the edge starts). With Deno's own
   * provider, the result carries a {@link Tracing.refusal} unless the runtime's spans stay
   * unrecorded (see the module doc).
   */
  static detect(version: string): Tracing {
    const tracer = trace.getTracer("portcullis", version);
    // Probes are never ended, so they are never exported.
    const child = tracer.startSpan("portcullis.probe", {}, parented(mintSpanContext()));
    if (!child.isRecording() || !sampled(child.spanContext())) return new Tracing();
    let rootsRecorded = false;
    for (let probe = 0; probe < ROOT_PROBES && !rootsRecorded; probe++) {
      rootsRecorded = sampled(tracer.startSpan("portcullis.probe", {}, ROOT_CONTEXT).spanContext());
    }
    if (trace.getTracerProvider() !== Deno.telemetry.tracerProvider) {
      return new Tracing(tracer, !rootsRecorded);
    }
    const settings: string[] = [];
    if (rootsRecorded) settings.push("OTEL_TRACES_SAMPLER=parentbased_always_off");
    if (propagates()) settings.push("OTEL_PROPAGATORS=none");
    if (settings.length === 0) return new Tracing(tracer, true);
    return new Tracing(
      undefined,
      false,
      "Tracing is on (OTEL_DENO=true), and Deno would also export a span of its own for every " +
        "HTTP request, with the tenant host and the query string in url.full: set " +
        `${settings.map((s) => `"${s}"`).join(" and ")} (README, Tracing)`,
    );
  }

  /** Tracing that never records (tests, or a process without a provider). */
  static off(): Tracing {
    return new Tracing();
  }

  /** True when spans are recorded. */
  get enabled(): boolean {
    return this.#tracer !== undefined;
  }

  /**
   * Starts a request's SERVER span, named by its method until the route is known; undefined when
   * tracing is off.
   *
   * @param method the request method
   * @param attributes the span's first attributes
   * @param traceparent a trusted peer's `traceparent`, continued when valid (else a new trace)
   */
  root(method: string, attributes: SpanAttributes, traceparent?: string): Span | undefined {
    if (!this.#tracer) return undefined;
    const remote = parseTraceparent(traceparent) ?? (this.#mint ? mintSpanContext() : undefined);
    return this.#tracer.startSpan(
      spanVerb(method),
      { kind: SpanKind.SERVER, attributes },
      remote ? parented(remote) : ROOT_CONTEXT,
    );
  }

  /** Starts a child of `parent` (INTERNAL unless `kind` says); undefined without a parent. */
  child(
    parent: Span | undefined,
    name: string,
    attributes?: SpanAttributes,
    kind: SpanKind = SpanKind.INTERNAL,
  ): Span | undefined {
    if (!parent || !this.#tracer) return undefined;
    return this.#tracer.startSpan(name, { kind, attributes }, trace.setSpan(ROOT_CONTEXT, parent));
  }
}

/** The method as the HTTP semantic conventions name it: a known one, or `_OTHER`. */
export function spanMethod(method: string): string {
  return KNOWN_METHODS.has(method) ? method : "_OTHER";
}

/** The method as a span name begins with it: a known one, or `HTTP`. */
export function spanVerb(method: string): string {
  return KNOWN_METHODS.has(method) ? method : "HTTP";
}

/**
 * Names and ends a request's SERVER span: `{method} {route}` (just the method without a route),
 * `http.route`, `http.response.status_code`; 5xx and 0 (no reply) mark an error.
 */
export function endServerSpan(
  span: Span | undefined,
  ending: { method: string; route?: string; status: number; outcome?: string },
): void {
  if (!span) return;
  const verb = spanVerb(ending.method);
  span.updateName(ending.route ? `${verb} ${ending.route}` : verb);
  if (ending.route) span.setAttribute("http.route", ending.route);
  endWithStatus(span, ending.status, ending.outcome, 500);
}

/** One upstream attempt's CLIENT span. */
export class AttemptTrace {
  readonly #span: Span;

  constructor(span: Span) {
    this.#span = span;
  }

  /** The `traceparent` sent upstream: this span is the parent of what the upstream does. */
  get traceparent(): string {
    return formatTraceparent(this.#span.spanContext());
  }

  /** Ends the span with the upstream's status (4xx and 5xx mark an error). */
  answered(status: number): void {
    endWithStatus(this.#span, status, undefined, 400);
  }

  /** Ends the span with the failure that ended the attempt, as `error.type`. */
  failed(kind: string): void {
    this.#span.setAttribute("error.type", kind);
    this.#span.setAttribute("portcullis.outcome", kind);
    this.#span.setStatus({ code: SpanStatusCode.ERROR, message: kind });
    this.#span.end();
  }
}

/** Ends a span with the HTTP status (0 and `errorFrom` upward mark an error). */
export function endWithStatus(
  span: Span | undefined,
  status: number,
  outcome?: string,
  errorFrom = 500,
): void {
  if (!span) return;
  if (status > 0) span.setAttribute("http.response.status_code", status);
  if (outcome) span.setAttribute("portcullis.outcome", outcome);
  if (status === 0 || status >= errorFrom) {
    span.setAttribute("error.type", status === 0 ? outcome ?? "no_response" : String(status));
    span.setStatus({ code: SpanStatusCode.ERROR, message: outcome });
  }
  span.end();
}

function parented(remote: SpanContext) {
  return trace.setSpanContext(ROOT_CONTEXT, remote);
}

function sampled(context: SpanContext): boolean {
  return (context.traceFlags & 1) === 1;
}

/** True when a registered propagator reads a `traceparent` (Deno's, unless OTEL_PROPAGATORS=none). */
function propagates(): boolean {
  const carrier: Record<string, string> = { traceparent: formatTraceparent(mintSpanContext()) };
  return trace.getSpanContext(propagation.extract(ROOT_CONTEXT, carrier)) !== undefined;
}
