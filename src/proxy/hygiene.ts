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
 *   every field a Connection header names. Content-Length is never removed by a Connection token:
 *   RFC 9110 §7.6.1 forbids naming a field meant for all recipients, and dropping it would unframe
 *   the body. Transfer-Encoding goes, Content-Length passes: the HTTP client that sends the list
 *   frames the body and keeps it consistent (RFC 9112 §6). TE goes too (`te: trailers` is the
 *   client's to add on h2).
 * - Upgrade (RFC 9110 §7.8): a protocol switch being tunnelled keeps its Upgrade field(s) and gets
 *   exactly one `Connection: upgrade`, since a sender of Upgrade must list it in Connection; none is
 *   written when no Upgrade field survives.
 * - Identity: `X-Portcullis-*` belongs to the gateway. Client (and upstream) copies are dropped,
 *   including underscore spellings: CGI-style servers map "_" and "-" to the same variable, so
 *   `X_Portcullis_Tenant` would read as the real one. For the same reason an underscore twin of
 *   X-Forwarded-For or Content-Length never goes upstream.
 * - Forwarding (RFC 7239 defines Forwarded; X-Forwarded-* is its de-facto predecessor): every
 *   client-supplied X-Forwarded-*, X-Real-IP, Forwarded, X-Original-URL, X-Rewrite-URL and
 *   X-Request-Id is dropped and the gateway writes its own. X-Forwarded-For keeps the inbound chain
 *   only when the direct peer is a trusted proxy; X-Real-IP is the effective client. A Unix-socket
 *   peer ("") has no address: it is never trusted and neither header is written. Forwarded itself
 *   is not emitted.
 *
 * @module
 */
import { type AddressSet, canonicalAddress } from "./cidr.ts";

/** What the upstream list is built from; values are written as given (earlier phases check them). */
export interface ForwardContext {
  /** The direct peer as Node reports it ("::ffff:1.2.3.4" for IPv4 on dual stack; "" for Unix). */
  readonly peer: string;
  /** gateway.trusted_proxies. */
  readonly trusted: AddressSet;
  /** The scheme the client used. */
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
/** The gateway's own: X-Portcullis-* and X-Request-Id, dropped both ways and re-added. */
const OURS = 4;
/** Content-Length: kept, and immune to Connection tokens. */
const LENGTH = 5;

const KEEP_UPSTREAM = [true, false, false, false, false, true];
const KEEP_DOWNSTREAM = [true, false, false, true, false, true];

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
]);

/** One pass over a raw list: normalised names, kinds, Connection tokens, X-Forwarded-For values. */
interface Scan {
  /** Lower case, "_" read as "-". */
  readonly names: string[];
  readonly kinds: number[];
  readonly nominated: ReadonlySet<string>;
  readonly forwardedFor: string[];
}

/**
 * Builds the header list to send upstream: hop-by-hop and client identity/forwarding claims
 * removed, `Host: <authority>` first, then the surviving fields in order, then (for a tunnelled
 * upgrade) `Connection: upgrade`, the X-Portcullis-Tenant/-Route/-Request-Id headers, and
 * X-Forwarded-For, X-Real-IP, X-Forwarded-Proto, X-Forwarded-Host and X-Request-Id.
 *
 * @param raw the inbound `rawHeaders`
 * @param context the resolved request facts
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { AddressSet } from "./cidr.ts";
 * import { upstreamHeaders } from "./hygiene.ts";
 * const raw = ["Host", "a.example", "X-Portcullis-Tenant", "evil", "X-Forwarded-For", "6.6.6.6"];
 * const context = {
 *   peer: "::ffff:192.0.2.9", trusted: AddressSet.of([]), proto: "https", host: "a.example",
 *   requestId: "r1", tenant: "a.example", route: "api", authority: "10.0.0.5:80", upgrade: false,
 * } as const;
 * assert.deepEqual(upstreamHeaders(raw, context).slice(0, 4), ["Host", "10.0.0.5:80", "X-Portcullis-Tenant", "a.example"]);
 * assert.equal(upstreamHeaders(raw, context).indexOf("6.6.6.6"), -1);
 * ```
 */
export function upstreamHeaders(raw: readonly string[], context: ForwardContext): string[] {
  const scanned = scan(raw);
  const out = ["Host", context.authority];
  if (keep(raw, scanned, KEEP_UPSTREAM, context.upgrade, out)) out.push("Connection", "upgrade");
  out.push("X-Portcullis-Tenant", context.tenant, "X-Portcullis-Route", context.route);
  out.push("X-Portcullis-Request-Id", context.requestId);
  appendForwarded(out, scanned.forwardedFor, context);
  return out;
}

/** Appends X-Forwarded-For, X-Real-IP, X-Forwarded-Proto, X-Forwarded-Host and X-Request-Id. */
function appendForwarded(out: string[], forwardedFor: string[], context: ForwardContext): void {
  const peer = canonicalAddress(context.peer) ?? "";
  const trusted = peer !== "" && context.trusted.has(peer);
  const chain = trusted ? joinChain(forwardedFor, peer) : peer;
  if (chain !== "") out.push("X-Forwarded-For", chain);
  const client = trusted ? walkChain(forwardedFor, peer, context.trusted) : peer;
  if (client !== "") out.push("X-Real-IP", client);
  out.push("X-Forwarded-Proto", context.proto);
  if (context.host !== "") out.push("X-Forwarded-Host", context.host);
  out.push("X-Request-Id", context.requestId);
}

/**
 * Builds the header list to send the client from an upstream response: hop-by-hop fields and the
 * upstream's X-Portcullis-* and X-Request-Id removed, `X-Request-Id: <requestId>` appended.
 *
 * @param raw the upstream response's `rawHeaders`
 * @param requestId the request id to echo
 * @param upgrade true when relaying the 101 of a tunnelled upgrade (keeps Upgrade)
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
  upgrade = false,
): string[] {
  const out: string[] = [];
  if (keep(raw, scan(raw), KEEP_DOWNSTREAM, upgrade, out)) out.push("Connection", "upgrade");
  out.push("X-Request-Id", requestId);
  return out;
}

/**
 * The effective client address: the peer unless it is a trusted proxy; then the X-Forwarded-For
 * chain (every such header, comma lists, in order) read right to left, skipping trusted addresses,
 * gives the first untrusted one, or the leftmost when all are trusted. A malformed entry ("unknown",
 * "1.2.3.4:80") ends the walk at the last good address. Empty list elements are skipped (RFC 9110
 * §5.6.1). Addresses come back canonical ("::ffff:1.2.3.4" as "1.2.3.4"); "" for a Unix peer.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { AddressSet } from "./cidr.ts";
 * import { effectiveClient } from "./hygiene.ts";
 * const trusted = AddressSet.of(["10.0.0.0/8"]);
 * const raw = ["X-Forwarded-For", "6.6.6.6, 203.0.113.7", "X-Forwarded-For", "10.0.0.2"];
 * assert.equal(effectiveClient(raw, "::ffff:10.0.0.1", trusted), "203.0.113.7");
 * assert.equal(effectiveClient(raw, "198.51.100.1", trusted), "198.51.100.1");
 * ```
 */
export function effectiveClient(raw: readonly string[], peer: string, trusted: AddressSet): string {
  const client = canonicalAddress(peer) ?? "";
  if (client === "" || !trusted.has(client)) return client;
  const values: string[] = [];
  for (let index = 0; index < raw.length; index += 2) {
    const name = raw[index];
    if (name.length === 15 && name.toLowerCase() === "x-forwarded-for") values.push(raw[index + 1]);
  }
  return walkChain(values, client, trusted);
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

/** Reads names, kinds, Connection tokens and X-Forwarded-For values in one pass. */
function scan(raw: readonly string[]): Scan {
  const names: string[] = [];
  const kinds: number[] = [];
  const nominated = new Set<string>();
  const forwardedFor: string[] = [];
  for (let index = 0; index < raw.length; index += 2) {
    const lower = raw[index].toLowerCase();
    const name = normalize(lower);
    names.push(name);
    kinds.push(kindOf(name, name !== lower));
    if (lower === "connection") addTokens(nominated, raw[index + 1]);
    else if (lower === "x-forwarded-for") forwardedFor.push(raw[index + 1]);
  }
  return { names, kinds, nominated, forwardedFor };
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
 * `upgrade` is set; Content-Length ignores Connection tokens.
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
  const { names, kinds, nominated } = scanned;
  let upgraded = false;
  for (let header = 0; header < kinds.length; header++) {
    const kind = kinds[header];
    const kept = kind === UPGRADE
      ? upgrade
      : keeps[kind] && (kind === LENGTH || nominated.size === 0 || !nominated.has(names[header]));
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

/** Walks X-Forwarded-For right to left from a trusted peer; see {@link effectiveClient}. */
function walkChain(values: readonly string[], peer: string, trusted: AddressSet): string {
  let last = peer;
  for (let value = values.length - 1; value >= 0; value--) {
    const entries = values[value].split(",");
    for (let entry = entries.length - 1; entry >= 0; entry--) {
      const text = entries[entry].trim();
      if (text === "") continue;
      const address = canonicalAddress(text);
      if (address === undefined) return last;
      if (!trusted.has(address)) return address;
      last = address;
    }
  }
  return last;
}
