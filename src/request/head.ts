/**
 * Request-head checks the gateway makes itself, whatever parser served the bytes (RFC 9112 §3.2,
 * §6.1, §6.3; RFC 9110 §7.2): one Host (and one on every HTTP/1.1 request), no Transfer-Encoding on
 * HTTP/1.0, never Transfer-Encoding beside Content-Length, a single Content-Length value, a header
 * count under the cap, and an origin-form or absolute-form target whose authority agrees with Host.
 *
 * Two decisions made here keep every later phase and the upstream looking at the same request:
 *
 * - **The body's framing** is read once ({@link RequestHead.body}): none, a declared length, or
 *   chunked. The proxy writes that framing itself on the upstream connection, for every method, so
 *   no client byte can reach an upstream outside a frame the gateway wrote. A body on GET, HEAD or
 *   TRACE is refused (`body_not_allowed`): RFC 9110 §9.3.1–2 gives it no meaning and warns that it
 *   is a request-smuggling vector, and §9.3.8 forbids it on TRACE (docs/decisions.md §13).
 * - **The path** is made canonical once ({@link canonicalPath}), before any route, policy or
 *   rewrite sees it; an ambiguous path (`%2F`, `%00`, a `..;` segment …) is `ambiguous_path`.
 *
 * @module
 */
import type { IncomingMessage } from "node:http";
import { canonicalPath, DEFAULT_PATH_RULES, type PathRules } from "./canonical_path.ts";

/**
 * How a request's body is framed: `none` (no framing field), a byte count (`Content-Length`, 0
 * included), or `chunked`.
 */
export type BodyFraming = "none" | number | "chunked";

/** True when a framing announces body bytes. */
export function carriesBody(framing: BodyFraming): boolean {
  return framing === "chunked" || (typeof framing === "number" && framing > 0);
}

/** Methods whose requests may not carry a body (RFC 9110 §9.3.1, §9.3.2, §9.3.8). */
const NO_BODY_METHODS: ReadonlySet<string> = new Set(["GET", "HEAD", "TRACE"]);

/**
 * A request head the gateway accepted, reduced to what the phases need.
 *
 * @internal
 */
export interface RequestHead {
  readonly method: string;
  /**
   * The canonical path (see {@link canonicalPath}): what routes, policies, rewrites, logs and the
   * upstream all see. Always starts with `/` (or is `*`).
   */
  readonly path: string;
  /** The query including its `?`, or "". */
  readonly query: string;
  /** The host, lower case, without port or trailing dot; "" when absent (HTTP/1.0). */
  readonly host: string;
  /** The body's framing as the client declared it; the proxy writes the same framing upstream. */
  readonly body: BodyFraming;
}

/** Why a head was refused. */
export interface HeadProblem {
  readonly kind:
    | "bad_request"
    | "header_fields_too_large"
    | "uri_too_long"
    | "body_not_allowed"
    | "ambiguous_path"
    | "expectation_failed";
  /** For logs only. */
  readonly detail: string;
}

/** Limits a head must stay within. */
export interface HeadLimits {
  readonly headers: number;
  readonly targetBytes: number;
  /** Header bytes (names, values, separators); checked here too because not every server does. */
  readonly headerBytes?: number;
  /** How paths are made canonical (default: merge slashes, refuse encoded slashes). */
  readonly paths?: PathRules;
}

const HOST = /^(?:\[[0-9a-fA-F:.]+\]|[A-Za-z0-9._~!$&'()*+;=%-]+)(?::\d{1,5})?$/;

/**
 * Checks a request head and extracts method, path, query and host: the header caps, the framing
 * fields (Host, Content-Length, Transfer-Encoding), the body a method may carry, an `Expect` other
 * than `100-continue` (417), then the target.
 *
 * @param request the parsed request
 * @param limits the header-count and target-length caps
 * @returns the head, or why it is refused
 */
export function readHead(request: IncomingMessage, limits: HeadLimits): RequestHead | HeadProblem {
  const raw = request.rawHeaders;
  const over = headerCaps(raw, limits);
  if (over) return over;
  const fields = scanFields(raw);
  if ("kind" in fields) return fields;
  const body = framing(request, fields);
  if (typeof body === "object") return body;
  if (fields.expect !== undefined && fields.expect.trim().toLowerCase() !== "100-continue") {
    // RFC 9110 §10.1.1: an expectation the gateway cannot meet is a 417, never sent on upstream.
    return { kind: "expectation_failed", detail: "an Expect other than 100-continue" };
  }
  const method = request.method ?? "GET";
  if (carriesBody(body) && NO_BODY_METHODS.has(method)) {
    return { kind: "body_not_allowed", detail: `a body on ${method}` };
  }
  if (fields.hosts === 1 && !HOST.test(fields.host)) {
    return { kind: "bad_request", detail: "invalid Host" };
  }
  const target = readTarget(request.url ?? "", method, fields, limits);
  if ("kind" in target) return target;
  return { method, path: target.path, query: target.query, host: target.host, body };
}

/** The header-count and header-bytes caps (431). */
function headerCaps(raw: readonly string[], limits: HeadLimits): HeadProblem | undefined {
  if (raw.length / 2 > limits.headers) {
    return { kind: "header_fields_too_large", detail: `${raw.length / 2} header fields` };
  }
  if (limits.headerBytes === undefined) return undefined;
  let bytes = 0;
  for (let i = 0; i < raw.length; i++) bytes += raw[i].length + 2;
  if (bytes > limits.headerBytes) {
    return { kind: "header_fields_too_large", detail: `${bytes} header bytes` };
  }
  return undefined;
}

/** The framing fields of a head, counted: how many of each, and the last value seen. */
interface Fields {
  /** Host fields (an HTTP/2 `:authority` counts as one). */
  hosts: number;
  host: string;
  lengths: number;
  length: string;
  codings: number;
  coding: string;
  /** The last `Expect` field's value, if any. */
  expect?: string;
}

/** One pass over the header list; an `:authority` that disagrees with Host is refused here. */
function scanFields(raw: readonly string[]): Fields | HeadProblem {
  const fields: Fields = { hosts: 0, host: "", lengths: 0, length: "", codings: 0, coding: "" };
  let authority = false;
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i];
    if (name.length === 4 && name.toLowerCase() === "host") {
      if (authority) {
        if (raw[i + 1] !== fields.host) return AUTHORITY_DIFFERS;
        continue;
      }
      fields.hosts++;
      fields.host = raw[i + 1];
    } else if (name.length === 14 && name.toLowerCase() === "content-length") {
      fields.lengths++;
      fields.length = raw[i + 1];
    } else if (name.length === 17 && name.toLowerCase() === "transfer-encoding") {
      fields.codings++;
      fields.coding = raw[i + 1];
    } else if (name.length === 6 && name.toLowerCase() === "expect") {
      fields.expect = raw[i + 1];
    } else if (name === ":authority") {
      // HTTP/2 (RFC 9113 §8.3.1): the authority pseudo-header stands for Host; both must agree.
      if (fields.hosts > 0 && raw[i + 1] !== fields.host) return AUTHORITY_DIFFERS;
      if (fields.hosts === 0) fields.hosts = 1;
      authority = true;
      fields.host = raw[i + 1];
    }
  }
  return fields;
}

const AUTHORITY_DIFFERS: HeadProblem = {
  kind: "bad_request",
  detail: ":authority differs from Host",
};

/** How the body is framed, or why the framing fields are refused (each a smuggler's tool). */
function framing(request: IncomingMessage, fields: Fields): BodyFraming | HeadProblem {
  const { hosts, lengths, codings } = fields;
  if (hosts > 1) return { kind: "bad_request", detail: "more than one Host header" };
  const chunked = codings > 0;
  // Chunked alone: any other coding (`identity, chunked`, `gzip, chunked`) or a second field is
  // refused, as h11 and nginx refuse it — a peer that reads the list differently is a smuggler's.
  if (codings > 1 || (chunked && fields.coding.trim().toLowerCase() !== "chunked")) {
    return { kind: "bad_request", detail: "a Transfer-Encoding other than chunked alone" };
  }
  const http11 = request.httpVersionMajor >= 2 ||
    (request.httpVersionMajor === 1 && request.httpVersionMinor >= 1);
  if (hosts === 0 && http11) return { kind: "bad_request", detail: "HTTP/1.1 without Host" };
  if (chunked && !http11) return { kind: "bad_request", detail: "Transfer-Encoding on HTTP/1.0" };
  if (chunked && lengths > 0) {
    return { kind: "bad_request", detail: "Transfer-Encoding with Content-Length" };
  }
  if (lengths > 1) return { kind: "bad_request", detail: "more than one Content-Length" };
  const body = bodyFraming(request, chunked, lengths === 1 ? fields.length : undefined);
  if (typeof body === "string" && body !== "chunked" && body !== "none") {
    return { kind: "bad_request", detail: body };
  }
  return body as BodyFraming;
}

/**
 * The request target as path, query and host: origin-form, `*` for OPTIONS, or absolute-form
 * (whose authority must name the Host's); the path made canonical.
 */
function readTarget(
  full: string,
  method: string,
  fields: Fields,
  limits: HeadLimits,
): { path: string; query: string; host: string } | HeadProblem {
  if (full.length > limits.targetBytes) {
    return { kind: "uri_too_long", detail: `${full.length} byte target` };
  }
  // A fragment is not part of the request (RFC 9110 §7.1): drop it before splitting path and query.
  const hash = full.indexOf("#");
  const target = hash === -1 ? full : full.slice(0, hash);
  let host = normalizeHost(fields.host);
  let rest: string;
  if (target.startsWith("/")) {
    rest = target;
  } else if (target === "*" && method === "OPTIONS") {
    return { path: "*", query: "", host };
  } else if (/^https?:\/\//i.test(target)) {
    let url: URL;
    try {
      url = new URL(target);
    } catch {
      return { kind: "bad_request", detail: "unparsable absolute-form target" };
    }
    const authority = normalizeHost(url.host);
    if (fields.hosts === 1 && authority !== host) {
      return { kind: "bad_request", detail: "absolute-form authority differs from Host" };
    }
    host = authority;
    // The authority ends at the first "/" or "?" (RFC 3986 §3.2); an empty path is "/".
    const start = target.indexOf("//") + 2;
    const end = target.slice(start).search(/[/?]/);
    const tail = end === -1 ? "" : target.slice(start + end);
    rest = tail.startsWith("/") ? tail : `/${tail}`;
  } else {
    return { kind: "bad_request", detail: "unsupported request target" };
  }
  const cut = rest.indexOf("?");
  const path = cut === -1 ? rest : rest.slice(0, cut);
  const query = cut === -1 ? "" : rest.slice(cut);
  const canonical = canonicalPath(path, limits.paths ?? DEFAULT_PATH_RULES);
  if (typeof canonical !== "string") return { kind: "ambiguous_path", detail: canonical.detail };
  return { path: canonical, query, host };
}

/**
 * The body's framing, or why the declared length is unusable. HTTP/2 has neither field: a stream
 * that did not end with its headers carries a body, framed upstream as chunked unless a length
 * was declared (RFC 9113 §8.1.1).
 */
function bodyFraming(
  request: IncomingMessage,
  chunked: boolean,
  length: string | undefined,
): BodyFraming | "unusable Content-Length" {
  if (chunked) return "chunked";
  if (length !== undefined) {
    const trimmed = length.trim();
    if (!/^\d{1,15}$/.test(trimmed)) return "unusable Content-Length";
    return Number(trimmed);
  }
  if (request.httpVersionMajor === 2) {
    const stream = (request as unknown as { stream?: { endAfterHeaders?: boolean } }).stream;
    return stream?.endAfterHeaders === false ? "chunked" : "none";
  }
  return "none";
}

/**
 * Normalises a Host value for lookup: lower case, port and trailing dot removed.
 *
 * @example
 * ```ts
 * import { normalizeHost } from "./head.ts";
 * normalizeHost("Demo.Example.:8080"); // "demo.example"
 * normalizeHost("[::1]:9901"); // "[::1]"
 * ```
 */
export function normalizeHost(value: string): string {
  let host = value.toLowerCase();
  if (host.startsWith("[")) {
    const end = host.indexOf("]");
    return end === -1 ? host : host.slice(0, end + 1);
  }
  const colon = host.indexOf(":");
  if (colon !== -1) host = host.slice(0, colon);
  return host.endsWith(".") ? host.slice(0, -1) : host;
}
