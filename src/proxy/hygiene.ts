/**
 * Header hygiene: the header lists the gateway sends upstream and back to the client, built in one
 * place so every rule against spoofing and smuggling sits beside the others.
 *
 * Headers travel as Node `rawHeaders`-style flat arrays `[name0, value0, name1, value1, …]`: names
 * keep their case, duplicates (Set-Cookie) and order survive, and every rule compares names
 * case-insensitively (RFC 9110 §5.1). Each list is scanned once to lower-case names and read the
 * Connection tokens, then filtered once.
 *
 * - Hop-by-hop fields go in both directions (RFC 9110 §7.6.1; RFC 7230 §6.1 listed Trailer too):
 *   Connection, Keep-Alive, Proxy-Connection, TE, Trailer, Transfer-Encoding, Upgrade,
 *   Proxy-Authenticate and Proxy-Authorization (RFC 9110 §11.7: meant for the first proxy), and
 *   every field a Connection header names. TE goes too (`te: trailers` is the client's to add on
 *   h2).
 * - Framing (RFC 9112 §6): upstream, the client's Content-Length and Transfer-Encoding never pass.
 *   The gateway writes the framing of the body it forwards itself, right after Host — one
 *   `Content-Length: <n>` or `Transfer-Encoding: chunked`, from the framing the head checks read —
 *   for every method, so every body byte travels inside a frame the gateway wrote (node's client
 *   frames nothing for GET, HEAD, OPTIONS or DELETE unless told). Downstream, Content-Length
 *   passes unless the response also named Transfer-Encoding (then the body was chunked and its
 *   length is whatever was decoded): a stale length would desynchronise the client's connection.
 *   It passes as one field with one decimal value (RFC 9110 §8.6: a recipient may take a list of
 *   identical values as one, and a proxy that does must forward one value): `1, 1`, two equal
 *   fields and `007` reach the client as `1` and `7`, in the first field's place and spelling.
 *   Values that do not agree never get here (both upstream parsers refuse the head, a 502); were
 *   they to, no length is written and the client's framing is the gateway's own.
 *   Content-Length is never removed by a Connection token: RFC 9110 §7.6.1 forbids naming a field
 *   meant for all recipients.
 * - Upgrade (RFC 9110 §7.8): a protocol switch being tunnelled keeps its Upgrade field(s) and gets
 *   exactly one `Connection: upgrade`, since a sender of Upgrade must list it in Connection; none is
 *   written when no Upgrade field survives.
 * - Identity: the headers that name the tenant, the route and the request id to backends are
 *   written only where the operator named them (`forwarding.backend_headers`; none by default, so
 *   no backend learns a project-specific header name). A named header belongs to the gateway:
 *   client (and upstream) copies are dropped, including underscore spellings — CGI-style servers
 *   map "_" and "-" to the same variable, so `X_Tenant` would read as the real one — and the
 *   gateway writes its own. `X-Portcullis-*` (the names these headers had before they were
 *   optional) stays the gateway's whatever is named, so a backend that still reads one never gets
 *   a client's copy. For the same reason an underscore twin of X-Forwarded-For or Content-Length
 *   never goes upstream.
 * - Forwarding (RFC 7239 defines Forwarded; X-Forwarded-* is its de-facto predecessor): every
 *   client-supplied X-Forwarded-*, X-Real-IP, Forwarded, X-Original-URL, X-Rewrite-URL and
 *   X-Request-Id is dropped and the gateway writes its own. X-Forwarded-For keeps the inbound chain
 *   only when the direct peer is a trusted proxy; X-Real-IP is the effective client.
 *   X-Forwarded-Proto is the scheme of the listener that accepted the request, or a trusted
 *   proxy's own `http`/`https` claim. A Unix-socket peer ("") has no address: it is never trusted
 *   and neither address header is written. Forwarded itself is not emitted.
 * - Client-address claims (`True-Client-IP`, `X-Client-IP`, `CF-Connecting-IP`, … — a configured
 *   list, `DEFAULT_CLIENT_IP_HEADERS` by default): upstream frameworks read them as the
 *   client's address, so they pass only from a trusted proxy.
 * - Trace context (W3C Trace Context §3.2, §3.3): a client's `traceparent` and `tracestate` pass
 *   only from a trusted proxy. With tracing on, the gateway writes `traceparent` itself — its
 *   upstream attempt's span, in the trusted proxy's trace or a new one — and the inbound one goes.
 * - Via (RFC 9110 §7.6.3): with a pseudonym configured for a direction, the gateway appends
 *   `1.1 <pseudonym>` to the Via list of every message it forwards that way; without one, the
 *   list passes as it came (none by default either way: forwarding_schema.ts says why). The
 *   pseudonym is the operator's choice, never the node id (which would name the machine to every
 *   upstream and client).
 *
 * @module
 */
import { DEFAULT_CLIENT_IP_HEADERS, walkChain } from "../request/client_ip_headers.ts";
import { agreedLength } from "../egress/h1_response.ts";
import type { BodyFraming } from "../request/head.ts";
import { type AddressSet, canonicalAddress } from "../request/cidr.ts";
import type { BackendHeaders } from "../config/forwarding_schema.ts";
import { appendBackendHeaders, appendVia } from "./forwarding.ts";

const DEFAULT_CLIENT_IP_SET: ReadonlySet<string> = new Set(DEFAULT_CLIENT_IP_HEADERS);
const NO_NAMES: ReadonlySet<string> = new Set();

/** What the upstream list is built from; values are written as given (earlier phases check them). */
export interface ForwardContext {
  /** The direct peer as Node reports it ("::ffff:1.2.3.4" for IPv4 on dual stack; "" for Unix). */
  readonly peer: string;
  /** gateway.trusted_proxies. */
  readonly trusted: AddressSet;
  /** The scheme of the listener that accepted the request. */
  readonly proto: "http" | "https";
  /** The inbound Host value as received, for X-Forwarded-Host ("" writes none). */
  readonly host: string;
  /** The request id already decided (valid inbound kept, else minted). */
  readonly requestId: string;
  /** Tenant host. */
  readonly tenant: string;
  /** Route name. */
  readonly route: string;
  /** The backend authority ("abc.onion", "10.0.0.5:8080"), sent as Host. */
  readonly authority: string;
  /** True for an HTTP/1.1 Upgrade request being tunnelled. */
  readonly upgrade: boolean;
  /** The framing of the body the gateway forwards (default: none). */
  readonly body?: BodyFraming;
  /** The Via pseudonym toward backends; absent writes no Via entry of the gateway's own. */
  readonly via?: string;
  /** The header names that carry tenant, route and request id upstream; absent: none. */
  readonly backendHeaders?: BackendHeaders;
  /** Those names, lower case with "_" as "-": the gateway's own, dropped from the client. */
  readonly owned?: ReadonlySet<string>;
  /** Lower-case client-address header names kept only from a trusted peer. */
  readonly clientIpHeaders?: ReadonlySet<string>;
  /** The gateway's own `traceparent` for this attempt (tracing on); it replaces any inbound one. */
  readonly traceparent?: string;
}

const IDENTITY_PREFIX = "x-portcullis-";
const FORWARDED_PREFIX = "x-forwarded-";

/** Kinds of field name, indexing KEEP_UPSTREAM / KEEP_DOWNSTREAM. */
const PASS = 0;
/** Hop-by-hop (RFC 9110 §7.6.1), Connection included. */
const HOP = 1;
const UPGRADE = 2;
/** Rebuilt or refused upstream, left alone downstream: Host and the forwarding claims. */
const REBUILT = 3;
/** The gateway's own: the named backend headers, X-Portcullis-* and X-Request-Id, dropped both ways. */
const OURS = 4;
/** Content-Length: rewritten upstream, kept downstream (unless chunked), immune to Connection. */
const LENGTH = 5;
/** A client-address claim: kept upstream only from a trusted peer. */
const CLIENT_IP = 6;
/** Via: re-emitted as one list with the gateway's entry appended (when a pseudonym is set). */
const VIA = 7;
/** `traceparent`: kept upstream only from a trusted peer, and only when the gateway writes none. */
const TRACEPARENT = 8;
/** `tracestate`: kept upstream only from a trusted peer. */
const TRACESTATE = 9;

const KEEP_UPSTREAM = [true, false, false, false, false, false, false, true, false, false];
const KEEP_UPSTREAM_TRUSTED = [true, false, false, false, false, false, true, true, true, true];
const KEEP_UPSTREAM_TRUSTED_TRACED = KEEP_UPSTREAM_TRUSTED.map((kept, kind) =>
  kept && kind !== TRACEPARENT
);
const KEEP_DOWNSTREAM = [true, false, false, true, false, true, true, true, true, true];

const KINDS: ReadonlyMap<string, number> = new Map<string, number>([
  ...["connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding"]
    .map((name): [string, number] => [name, HOP]),
  ["proxy-authenticate", HOP],
  ["proxy-authorization", HOP],
  // Connection-specific by definition (RFC 9113 §3.2.1): never forwarded, named or not.
  ["http2-settings", HOP],
  ["upgrade", UPGRADE],
  ...["host", "x-real-ip", "forwarded", "x-original-url", "x-rewrite-url"]
    .map((name): [string, number] => [name, REBUILT]),
  ["x-request-id", OURS],
  ["content-length", LENGTH],
  ["via", VIA],
  ["traceparent", TRACEPARENT],
  ["tracestate", TRACESTATE],
]);

/** One pass over a raw list: normalised names, kinds, Connection tokens, forwarding values. */
interface Scan {
  /** Lower case, "_" read as "-". */
  readonly names: string[];
  readonly kinds: number[];
  readonly nominated: ReadonlySet<string>;
  readonly forwardedFor: string[];
  /** The last X-Forwarded-Proto value, if any. */
  readonly forwardedProto?: string;
  /** Via values in order. */
  readonly via: string[];
  /** True when a Transfer-Encoding field is present. */
  readonly chunked: boolean;
  /** The one value the Content-Length fields agree on; null when they do not; undefined: none. */
  readonly length?: string | null;
}

/**
 * Builds the header list to send upstream: hop-by-hop, framing and client identity/forwarding
 * claims removed, `Host: <authority>` first, then the gateway's own framing of the body, then the
 * surviving fields in order, then (for a tunnelled upgrade) `Connection: upgrade`, Via, the
 * headers the operator named for tenant, route and request id, X-Forwarded-For, X-Real-IP,
 * X-Forwarded-Proto, X-Forwarded-Host and X-Request-Id, and the gateway's `traceparent`.
 *
 * @param raw the inbound `rawHeaders`
 * @param context the resolved request facts
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { AddressSet } from "../request/cidr.ts";
 * import { upstreamHeaders } from "./hygiene.ts";
 * const raw = ["Host", "a.example", "X-Portcullis-Tenant", "evil", "X-Forwarded-For", "6.6.6.6"];
 * const context = {
 *   peer: "::ffff:192.0.2.9", trusted: AddressSet.of([]), proto: "https", host: "a.example",
 *   requestId: "r1", tenant: "a.example", route: "api", authority: "10.0.0.5:80", upgrade: false,
 * } as const;
 * assert.deepEqual(upstreamHeaders(raw, context).slice(0, 4), ["Host", "10.0.0.5:80", "X-Forwarded-For", "192.0.2.9"]);
 * const named = { ...context, backendHeaders: { tenant: "X-Tenant" }, owned: new Set(["x-tenant"]) };
 * assert.deepEqual(upstreamHeaders(raw, named).slice(2, 4), ["X-Tenant", "a.example"]);
 * assert.equal(upstreamHeaders(raw, context).indexOf("6.6.6.6"), -1);
 * ```
 */
export function upstreamHeaders(raw: readonly string[], context: ForwardContext): string[] {
  const peer = canonicalAddress(context.peer) ?? "";
  const trusted = peer !== "" && context.trusted.has(peer);
  const scanned = scan(raw, context.clientIpHeaders ?? DEFAULT_CLIENT_IP_SET, context.owned);
  const out = ["Host", context.authority];
  const body = context.body ?? "none";
  if (body === "chunked") out.push("Transfer-Encoding", "chunked");
  else if (body !== "none") out.push("Content-Length", String(body));
  const keeps = !trusted
    ? KEEP_UPSTREAM
    : context.traceparent
    ? KEEP_UPSTREAM_TRUSTED_TRACED
    : KEEP_UPSTREAM_TRUSTED;
  if (keep(raw, scanned, keeps, context.upgrade, out)) out.push("Connection", "upgrade");
  appendVia(out, scanned.via, context.via);
  appendBackendHeaders(out, context.backendHeaders, context);
  appendForwarded(out, scanned, context, peer, trusted);
  if (context.traceparent) out.push("traceparent", context.traceparent);
  return out;
}

/** Appends X-Forwarded-For, X-Real-IP, X-Forwarded-Proto, X-Forwarded-Host and X-Request-Id. */
function appendForwarded(
  out: string[],
  scanned: Scan,
  context: ForwardContext,
  peer: string,
  trusted: boolean,
): void {
  const forwardedFor = scanned.forwardedFor;
  const chain = trusted ? joinChain(forwardedFor, peer) : peer;
  if (chain !== "") out.push("X-Forwarded-For", chain);
  const client = trusted ? walkChain(forwardedFor, peer, context.trusted) : peer;
  if (client !== "") out.push("X-Real-IP", client);
  const claimed = trusted ? scanned.forwardedProto?.trim().toLowerCase() : undefined;
  const proto = claimed === "https" || claimed === "http" ? claimed : context.proto;
  out.push("X-Forwarded-Proto", proto);
  if (context.host !== "") out.push("X-Forwarded-Host", context.host);
  out.push("X-Request-Id", context.requestId);
}

/**
 * Builds the header list to send the client from an upstream response: hop-by-hop fields and the
 * upstream's copies of the gateway's own headers (the named backend headers, X-Portcullis-*,
 * X-Request-Id) removed (Content-Length too when the response was chunked), Via extended with the
 * gateway's pseudonym toward clients when one is set, `X-Request-Id: <requestId>` appended.
 *
 * @param raw the upstream response's `rawHeaders`
 * @param requestId the request id to echo
 * @param options `upgrade` when relaying the 101 of a tunnelled upgrade (keeps Upgrade); `via`,
 *   the gateway's Via pseudonym toward clients; `owned`, the folded backend header names
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { downstreamHeaders } from "./hygiene.ts";
 * const raw = ["Set-Cookie", "a=1", "Keep-Alive", "timeout=5", "Set-Cookie", "b=2", "X-Request-Id", "up"];
 * assert.deepEqual(downstreamHeaders(raw, "r1"), ["Set-Cookie", "a=1", "Set-Cookie", "b=2", "X-Request-Id", "r1"]);
 * ```
 */
export function downstreamHeaders(
  raw: readonly string[],
  requestId: string,
  options: {
    readonly upgrade?: boolean;
    readonly via?: string;
    readonly owned?: ReadonlySet<string>;
  } = {},
): string[] {
  const out: string[] = [];
  const scanned = scan(raw, NO_NAMES, options.owned);
  if (keep(raw, scanned, KEEP_DOWNSTREAM, options.upgrade ?? false, out)) {
    out.push("Connection", "upgrade");
  }
  appendVia(out, scanned.via, options.via);
  out.push("X-Request-Id", requestId);
  return out;
}

/**
 * True for the gateway's identity headers: `x-portcullis-` in any case, "_" counting as "-".
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { isIdentityHeader } from "./hygiene.ts";
 * assert.equal(isIdentityHeader("X_Portcullis-Tenant"), true);
 * assert.equal(isIdentityHeader("X-Portcullisx"), false);
 * ```
 */
export function isIdentityHeader(name: string): boolean {
  return normalize(name.toLowerCase()).startsWith(IDENTITY_PREFIX);
}

/**
 * Reads names, kinds, Connection tokens and the forwarding values in one pass; `owned` names are
 * the gateway's own.
 */
function scan(
  raw: readonly string[],
  clientIp: ReadonlySet<string>,
  owned: ReadonlySet<string> = NO_NAMES,
): Scan {
  const names: string[] = [];
  const kinds: number[] = [];
  const nominated = new Set<string>();
  const forwardedFor: string[] = [];
  const via: string[] = [];
  let forwardedProto: string | undefined;
  let chunked = false;
  let lengths: string[] | undefined;
  for (let index = 0; index < raw.length; index += 2) {
    const lower = raw[index].toLowerCase();
    const name = normalize(lower);
    names.push(name);
    const kind = owned.has(name)
      ? OURS
      : clientIp.has(name)
      ? CLIENT_IP
      : kindOf(name, name !== lower);
    kinds.push(kind);
    if (lower === "connection") addTokens(nominated, raw[index + 1]);
    else if (lower === "x-forwarded-for") forwardedFor.push(raw[index + 1]);
    else if (lower === "x-forwarded-proto") forwardedProto = raw[index + 1];
    else if (kind === VIA) via.push(raw[index + 1]);
    else if (lower === "transfer-encoding") chunked = true;
    else if (kind === LENGTH) (lengths ??= []).push(raw[index + 1]);
  }
  const length = lengths && agreedLength(lengths);
  return { names, kinds, nominated, forwardedFor, forwardedProto, via, chunked, length };
}

/** Reads "_" as "-" in a lower-case name. */
function normalize(lower: string): string {
  return lower.includes("_") ? lower.replaceAll("_", "-") : lower;
}

/** The kind of a normalised name; `underscored` when the sender spelled it with "_". */
function kindOf(name: string, underscored: boolean): number {
  const kind = KINDS.get(name);
  if (kind !== undefined) return underscored && kind === LENGTH ? REBUILT : kind;
  if (name.startsWith(IDENTITY_PREFIX)) return OURS;
  return name.startsWith(FORWARDED_PREFIX) ? REBUILT : PASS;
}

/** Adds a Connection value's tokens (RFC 9110 §7.6.1: comma list of field names), normalised. */
function addTokens(into: Set<string>, value: string): void {
  for (const token of value.split(",")) {
    const name = normalize(token.trim().toLowerCase());
    if (name !== "") into.add(name);
  }
}

/**
 * Copies the fields a direction keeps into `out`, in order. An Upgrade field is kept exactly when
 * `upgrade` is set; Content-Length ignores Connection tokens, goes when the message was chunked,
 * and is written once, with the value its fields agree on (none when they do not); Via is written
 * separately.
 *
 * @returns true when an Upgrade field was kept
 */
function keep(
  raw: readonly string[],
  scanned: Scan,
  keeps: readonly boolean[],
  upgrade: boolean,
  out: string[],
): boolean {
  const { names, kinds, nominated, chunked, length } = scanned;
  let upgraded = false;
  let lengthWritten = false;
  for (let header = 0; header < kinds.length; header++) {
    const kind = kinds[header];
    if (kind === LENGTH) {
      if (!keeps[kind] || chunked || typeof length !== "string" || lengthWritten) continue;
      out.push(raw[header * 2], length);
      lengthWritten = true;
      continue;
    }
    const kept = kind === UPGRADE
      ? upgrade
      : kind !== VIA && keeps[kind] && (nominated.size === 0 || !nominated.has(names[header]));
    if (!kept) continue;
    out.push(raw[header * 2], raw[header * 2 + 1]);
    upgraded ||= kind === UPGRADE;
  }
  return upgraded;
}

/** The inbound X-Forwarded-For values joined with ", ", then the peer. */
function joinChain(values: readonly string[], peer: string): string {
  let chain = "";
  for (const value of values) {
    const trimmed = value.trim();
    if (trimmed !== "") chain += `${trimmed}, `;
  }
  return chain + peer;
}
