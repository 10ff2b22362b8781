/**
 * Failures are values with a kind. One table maps a kind to its status and its fixed,
 * classification-only message; one function turns a failure into the JSON error envelope
 * `{"error":{"code","message","request_id"}}`. Upstream detail, file paths and stack traces go to
 * logs and spans, never to the client. The table serves both roles: an edge's phases and the hub's
 * config stream answer through the same envelope.
 *
 * The envelope is what the gateway's own nodes and tools read; it is not what a third party sees
 * by default. Each server's writer hands a failure reply to error_pages.ts, which renders it as the
 * operator chose (`errors`): by default the status's reason phrase alone, since the envelope's
 * shape, codes and messages would name the software to anyone who sends one bad request.
 *
 * @module
 */
import type { OverloadKind } from "../ledger/overload.ts";
import type { Reply } from "./reply.ts";

/** Where a failure came from. */
export type FailureSource = "client" | "upstream" | "internal";

/** Every kind of failure the gateway answers itself. */
export type FailureKind =
  | OverloadKind
  | "route_not_allowed"
  | "admin_credential_required"
  | "no_route"
  | "misdirected_request"
  | "bad_request"
  | "body_not_allowed"
  | "ambiguous_path"
  | "header_fields_too_large"
  | "uri_too_long"
  | "expectation_failed"
  | "request_timeout"
  | "tenant_blocked"
  | "draining"
  | "not_ready"
  | "lane_down"
  | "blocked"
  | "rate_limited"
  | "payload_too_large"
  | "maintenance"
  | "upstream_unreachable"
  | "upstream_failed"
  | "upstream_tls"
  | "upstream_saturated"
  | "upstream_circuit_open"
  | "upstream_timeout"
  | "internal_error"
  | "admin_not_implemented"
  // The hub's (its config stream and the nodes that follow it). `internal` is the hub's code for
  // `internal_error`, kept because edges log the code the hub answered.
  | "method_not_allowed"
  | "bad_node_id"
  | "unauthenticated"
  | "wrong_node"
  | "ambiguous_certificate"
  | "node_not_allowed"
  | "node_revoked"
  | "registration_refused"
  | "renewal_refused"
  | "renewal_too_early"
  | "payload_not_json"
  | "internal";

interface KindInfo {
  readonly status: number;
  readonly source: FailureSource;
  readonly message: string;
}

const KINDS: Record<FailureKind, KindInfo> = {
  lane_pool_full: { status: 429, source: "client", message: "This lane is at its capacity" },
  per_connection_limit: {
    status: 429,
    source: "client",
    message: "Too many concurrent requests on this connection",
  },
  rate_budget: { status: 429, source: "client", message: "This lane's request rate is exhausted" },
  connection_rate: {
    status: 429,
    source: "client",
    message: "Too many requests on this connection",
  },
  aggregate_full: { status: 503, source: "internal", message: "The gateway is at capacity" },
  byte_budget: {
    status: 503,
    source: "internal",
    message: "The gateway's byte budget is exhausted",
  },
  deadline_exceeded: { status: 503, source: "internal", message: "The request deadline passed" },
  priority_shed: {
    status: 503,
    source: "internal",
    message: "The gateway is saturated; only high-priority routes are served",
  },
  route_not_allowed: { status: 404, source: "client", message: "No such route on this listener" },
  admin_credential_required: {
    status: 401,
    source: "client",
    message: "Acting on the gateway needs the admin token or its Unix socket",
  },
  no_route: { status: 404, source: "client", message: "No route matches this request" },
  misdirected_request: {
    status: 421,
    source: "client",
    message: "This gateway does not serve the requested host",
  },
  bad_request: { status: 400, source: "client", message: "The request is malformed" },
  body_not_allowed: {
    status: 400,
    source: "client",
    message: "This method does not take a request body",
  },
  ambiguous_path: {
    status: 400,
    source: "client",
    message: "The request path is ambiguous",
  },
  header_fields_too_large: {
    status: 431,
    source: "client",
    message: "The request header fields are too large",
  },
  uri_too_long: { status: 414, source: "client", message: "The request target is too long" },
  expectation_failed: {
    status: 417,
    source: "client",
    message: "The request's expectation cannot be met",
  },
  request_timeout: {
    status: 408,
    source: "client",
    message: "The request head did not arrive in time",
  },
  tenant_blocked: { status: 404, source: "client", message: "This site is not available" },
  draining: { status: 503, source: "internal", message: "The gateway is shutting down" },
  not_ready: { status: 503, source: "internal", message: "The gateway is not ready" },
  // A lane with no live request worker (all dead or restarting): local_health's /readyz names it.
  lane_down: { status: 503, source: "internal", message: "A lane has no live request worker" },
  blocked: { status: 403, source: "client", message: "The request was refused" },
  rate_limited: { status: 429, source: "client", message: "Too many requests from this client" },
  payload_too_large: {
    status: 413,
    source: "client",
    message: "The request body is too large",
  },
  maintenance: { status: 503, source: "internal", message: "This service is under maintenance" },
  upstream_unreachable: {
    status: 502,
    source: "upstream",
    message: "The upstream could not be reached",
  },
  upstream_failed: {
    status: 502,
    source: "upstream",
    message: "The upstream broke off the exchange",
  },
  upstream_tls: {
    status: 502,
    source: "upstream",
    message: "The upstream could not be reached securely",
  },
  upstream_circuit_open: {
    status: 503,
    source: "upstream",
    message: "The upstream is failing; try again later",
  },
  upstream_saturated: {
    status: 503,
    source: "upstream",
    message: "The upstream is busy; try again shortly",
  },
  upstream_timeout: {
    status: 504,
    source: "upstream",
    message: "The upstream did not answer in time",
  },
  internal_error: { status: 500, source: "internal", message: "The gateway failed internally" },
  admin_not_implemented: {
    status: 501,
    source: "internal",
    message: "This is not implemented yet",
  },
  method_not_allowed: {
    status: 405,
    source: "client",
    message: "This route does not take this method",
  },
  bad_node_id: { status: 400, source: "client", message: "The node_id parameter is not a node id" },
  unauthenticated: {
    status: 401,
    source: "client",
    message: "The node could not be authenticated",
  },
  wrong_node: {
    status: 403,
    source: "client",
    message: "The client certificate was issued to another node",
  },
  ambiguous_certificate: {
    status: 403,
    source: "client",
    message: "The client certificate must name exactly one node (one CN)",
  },
  node_not_allowed: { status: 403, source: "client", message: "This node may not follow the hub" },
  node_revoked: {
    status: 403,
    source: "client",
    message: "This node's credential was revoked; it must be provisioned again",
  },
  registration_refused: {
    status: 403,
    source: "client",
    message: "The registration was refused",
  },
  renewal_refused: { status: 403, source: "client", message: "The renewal was refused" },
  // A renewal inside the hub's limits' wait (`ca.renew_before_days`, `ca.renew_interval_seconds`):
  // sent with Retry-After; the node keeps its certificate and asks again then.
  renewal_too_early: {
    status: 429,
    source: "client",
    message: "The certificate is not due for renewal yet; retry after the time given",
  },
  payload_not_json: {
    status: 400,
    source: "client",
    message: "The request body is not a JSON object of the expected size",
  },
  internal: { status: 500, source: "internal", message: "The hub could not answer" },
};

/** A classified failure; thrown or returned by a phase, answered by {@link failureReply}. */
export class GatewayError extends Error {
  /** The classification, which fixes status and message. */
  readonly kind: FailureKind;
  /** Who caused it: the client, the upstream, or the gateway. */
  readonly source: FailureSource;
  /** Whether another attempt may succeed. */
  readonly retryable: boolean;

  /**
   * Classifies a failure; the message is the kind's fixed one.
   *
   * @param kind the classification
   * @param options the underlying cause (kept for logs, never sent) and retryability
   */
  constructor(kind: FailureKind, options: { cause?: unknown; retryable?: boolean } = {}) {
    super(KINDS[kind].message, { cause: options.cause });
    this.name = "GatewayError";
    this.kind = kind;
    this.source = KINDS[kind].source;
    this.retryable = options.retryable ?? false;
  }
}

/** The status a failure kind answers with. */
export function failureStatus(kind: FailureKind): number {
  return KINDS[kind].status;
}

/**
 * The reply for a failure: its status, and the error envelope as body.
 *
 * @param kind the failure's classification
 * @param requestId the request id to echo in the envelope
 * @param options a status override (a tenant's block status) and extra headers
 * @example
 * ```ts
 * import { failureReply } from "./errors.ts";
 * const reply = failureReply("no_route", "req-1");
 * reply.status; // 404
 * JSON.parse(reply.body as string).error.code; // "no_route"
 * ```
 */
export function failureReply(
  kind: FailureKind,
  requestId: string,
  options: { status?: number; headers?: Record<string, string> } = {},
): Reply {
  const info = KINDS[kind];
  return {
    status: options.status ?? info.status,
    headers: { "content-type": "application/json", ...options.headers },
    body: JSON.stringify({ error: { code: kind, message: info.message, request_id: requestId } }),
    failure: kind,
  };
}

/**
 * One line for an error in a log: `name: message` for an Error, its string form otherwise.
 *
 * @param error what was thrown
 * @example
 * ```ts
 * import { describeError } from "./errors.ts";
 * describeError(new RangeError("Too far")); // "RangeError: Too far"
 * describeError("gone"); // "gone"
 * ```
 */
export function describeError(error: unknown): string {
  return error instanceof Error ? `${error.name}: ${error.message}` : String(error);
}
