/**
 * Request-head checks the gateway makes itself, whatever parser served the bytes (RFC 9112 §3.2,
 * §6.1, §6.3; RFC 9110 §7.2): one Host (and one on every HTTP/1.1 request), no Transfer-Encoding on
 * HTTP/1.0, never Transfer-Encoding beside Content-Length, a single Content-Length value, a header
 * count under the cap, and an origin-form or absolute-form target whose authority agrees with Host.
 *
 * @module
 */
import type { IncomingMessage } from "node:http";

/** A request head the gateway accepted, reduced to what the phases need. */
export interface RequestHead {
  readonly method: string;
  /** The path, raw (not percent-decoded), always starting with `/` (or `*`). */
  readonly path: string;
  /** The query including its `?`, or "". */
  readonly query: string;
  /** The host, lower case, without port or trailing dot; "" when absent (HTTP/1.0). */
  readonly host: string;
}

/** Why a head was refused. */
export interface HeadProblem {
  readonly kind: "bad_request" | "header_fields_too_large" | "uri_too_long";
  /** For logs only. */
  readonly detail: string;
}

/** Limits a head must stay within. */
export interface HeadLimits {
  readonly headers: number;
  readonly targetBytes: number;
  /** Header bytes (names, values, separators); checked here too because not every server does. */
  readonly headerBytes?: number;
}

const HOST = /^(?:\[[0-9a-fA-F:.]+\]|[A-Za-z0-9._~!$&'()*+;=%-]+)(?::\d{1,5})?$/;

/**
 * Checks a request head and extracts method, path, query and host.
 *
 * @param request the parsed request
 * @param limits the header-count and target-length caps
 * @returns the head, or why it is refused
 */
export function readHead(request: IncomingMessage, limits: HeadLimits): RequestHead | HeadProblem {
  const raw = request.rawHeaders;
  if (raw.length / 2 > limits.headers) {
    return { kind: "header_fields_too_large", detail: `${raw.length / 2} header fields` };
  }
  if (limits.headerBytes !== undefined) {
    let bytes = 0;
    for (let i = 0; i < raw.length; i++) bytes += raw[i].length + 2;
    if (bytes > limits.headerBytes) {
      return { kind: "header_fields_too_large", detail: `${bytes} header bytes` };
    }
  }
  let hosts = 0;
  let lengths = 0;
  let chunked = false;
  let authority = false;
  let hostValue = "";
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i];
    if (name.length === 4 && name.toLowerCase() === "host") {
      if (authority) {
        if (raw[i + 1] !== hostValue) {
          return { kind: "bad_request", detail: ":authority differs from Host" };
        }
        continue;
      }
      hosts++;
      hostValue = raw[i + 1];
    } else if (name.length === 14 && name.toLowerCase() === "content-length") {
      lengths++;
    } else if (name.length === 17 && name.toLowerCase() === "transfer-encoding") {
      chunked = true;
    } else if (name === ":authority") {
      // HTTP/2 (RFC 9113 §8.3.1): the authority pseudo-header stands for Host; both must agree.
      if (hosts > 0 && raw[i + 1] !== hostValue) {
        return { kind: "bad_request", detail: ":authority differs from Host" };
      }
      if (hosts === 0) hosts = 1;
      authority = true;
      hostValue = raw[i + 1];
    }
  }
  if (hosts > 1) return { kind: "bad_request", detail: "more than one Host header" };
  const http11 = request.httpVersionMajor >= 2 ||
    (request.httpVersionMajor === 1 && request.httpVersionMinor >= 1);
  if (hosts === 0 && http11) return { kind: "bad_request", detail: "HTTP/1.1 without Host" };
  if (chunked && !http11) return { kind: "bad_request", detail: "Transfer-Encoding on HTTP/1.0" };
  if (chunked && lengths > 0) {
    return { kind: "bad_request", detail: "Transfer-Encoding with Content-Length" };
  }
  if (lengths > 1) return { kind: "bad_request", detail: "more than one Content-Length" };
  if (hosts === 1 && !HOST.test(hostValue)) return { kind: "bad_request", detail: "invalid Host" };

  const full = request.url ?? "";
  if (full.length > limits.targetBytes) {
    return { kind: "uri_too_long", detail: `${full.length} byte target` };
  }
  // A fragment is not part of the request (RFC 9110 §7.1): drop it before splitting path and query.
  const hash = full.indexOf("#");
  const target = hash === -1 ? full : full.slice(0, hash);
  const method = request.method ?? "GET";
  let path: string;
  let query = "";
  let host = normalizeHost(hostValue);
  if (target.startsWith("/")) {
    const cut = target.indexOf("?");
    path = cut === -1 ? target : target.slice(0, cut);
    query = cut === -1 ? "" : target.slice(cut);
  } else if (target === "*" && method === "OPTIONS") {
    path = "*";
  } else if (/^https?:\/\//i.test(target)) {
    let url: URL;
    try {
      url = new URL(target);
    } catch {
      return { kind: "bad_request", detail: "unparsable absolute-form target" };
    }
    const authority = normalizeHost(url.host);
    if (hosts === 1 && authority !== host) {
      return { kind: "bad_request", detail: "absolute-form authority differs from Host" };
    }
    host = authority;
    // The authority ends at the first "/" or "?" (RFC 3986 §3.2); an empty path is "/".
    const start = target.indexOf("//") + 2;
    const end = target.slice(start).search(/[/?]/);
    const tail = end === -1 ? "" : target.slice(start + end);
    const rest = tail.startsWith("/") ? tail : `/${tail}`;
    const cut = rest.indexOf("?");
    path = cut === -1 ? rest : rest.slice(0, cut);
    query = cut === -1 ? "" : rest.slice(cut);
  } else {
    return { kind: "bad_request", detail: "unsupported request target" };
  }
  return { method, path, query, host };
}

/**
 * Normalises a Host value for lookup: lower case, port and trailing dot removed.
 *
 * @example
 * ```ts
 * import { normalizeHost } from "./request_head.ts";
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
