/**
 * The bootstrap's `forwarding` section: what the gateway writes into the messages it forwards and
 * into its own health probes — and, by default, that none of it names the product (issue 34, the
 * seed's OPSEC touchpoints): no `Via` either way, no gateway headers toward backends beyond the
 * de-facto standard forwarding set, and no probe User-Agent. Each mark is the operator's to turn
 * on, under a name the operator picks.
 *
 * - `via` (RFC 9110 §7.6.3): a pseudonym for both directions (the meaning it always had), `false`
 *   (none), or `{backends, clients}` to choose per direction. RFC 9110 asks an HTTP-to-HTTP gateway
 *   for Via on the requests it forwards; a gateway whose point is not to be told apart from the
 *   many that send none (nginx, HAProxy and Envoy by default) leaves it off until the operator
 *   names a pseudonym — loops are refused at load (no backend may name an own listener), not by Via.
 * - `backend_headers`: the header names that carry the tenant, the route and the request id to
 *   backends (none by default). A named header belongs to the gateway: a client's copy, in any
 *   spelling, never reaches the backend, and an upstream's never reaches the client.
 * - `health_user_agent`: the `User-Agent` of active health probes (none by default).
 *
 * @module
 */
import * as v from "valibot";
import { ConfigError, type ConfigProblem } from "./problems.ts";
import type { YamlFile } from "./yaml_file.ts";

/** An HTTP token (RFC 9110 §5.6.2). */
const TOKEN = /^[A-Za-z0-9!#$%&'*+.^_`|~-]+$/;

/** A Via pseudonym: a token, or false for none. */
const Pseudonym = v.union(
  [
    v.literal(false),
    v.pipe(v.string(), v.regex(TOKEN, "Expected a token"), v.maxLength(64, "Expected a token")),
  ],
  "Expected a pseudonym (a token such as edge-7) or false",
);

/**
 * True for a header name the gateway itself writes, removes or frames with (any case, `_` for
 * `-`): listing it as a client-address claim would let a trusted proxy's copy pass beside the
 * gateway's own.
 */
export function gatewayOwned(name: string): boolean {
  const folded = foldName(name);
  return OWNED.has(folded) || folded.startsWith("x-forwarded-") ||
    folded.startsWith("x-portcullis-");
}

/** A header name as hygiene compares it: lower case, "_" read as "-". */
export function foldName(name: string): string {
  return name.toLowerCase().replaceAll("_", "-");
}

const OWNED: ReadonlySet<string> = new Set([
  "host",
  "content-length",
  "transfer-encoding",
  "connection",
  "keep-alive",
  "proxy-connection",
  "te",
  "trailer",
  "upgrade",
  "via",
  "forwarded",
  "x-real-ip",
  "x-request-id",
  "x-original-url",
  "x-rewrite-url",
  "proxy-authorization",
  "proxy-authenticate",
  "http2-settings",
]);

const HeaderName = v.pipe(
  v.string("Expected a header name"),
  v.regex(TOKEN, "Expected a header name"),
  v.maxLength(128, "Expected a header name"),
);

/** A header the gateway writes toward backends: not one it writes or removes for another reason. */
const BackendHeader = v.pipe(
  HeaderName,
  v.check(
    (name) => !gatewayOwned(name) || foldName(name).startsWith("x-portcullis-"),
    "The gateway writes or removes this header itself; name another",
  ),
);

/** A User-Agent value: printable ASCII, no leading or trailing space, at most 256 characters. */
const UserAgent = v.union(
  [
    v.literal(false),
    v.pipe(
      v.string(),
      v.regex(/^[\x21-\x7e](?:[\x20-\x7e]*[\x21-\x7e])?$/, "Expected printable text"),
      v.maxLength(256, "Expected at most 256 characters"),
    ),
  ],
  "Expected a User-Agent value (printable text) or false",
);

/** The `forwarding` section. */
export const ForwardingSchema = v.strictObject({
  /** Via (RFC 9110 §7.6.3): one pseudonym for both ways, false, or one per direction. */
  via: v.optional(
    v.union(
      [
        Pseudonym,
        v.strictObject({
          backends: v.optional(Pseudonym, false),
          clients: v.optional(Pseudonym, false),
        }),
      ],
      "Expected a pseudonym (a token such as edge-7), false, or { backends, clients }",
    ),
    false,
  ),
  /** Headers naming the tenant, the route and the request id to backends (default: none). */
  backend_headers: v.optional(
    v.strictObject({
      tenant: v.optional(BackendHeader),
      route: v.optional(BackendHeader),
      request_id: v.optional(BackendHeader),
    }),
    {},
  ),
  /** The User-Agent of active health probes (default: none). */
  health_user_agent: v.optional(UserAgent, false),
  /** Client-address headers passed upstream only from trusted_proxies (names, any case). */
  client_ip_headers: v.optional(
    v.array(
      v.pipe(
        HeaderName,
        v.check(
          (name) => !gatewayOwned(name),
          "The gateway writes or removes this header itself; it cannot be a client-address claim",
        ),
      ),
      "Expected a list of header names",
    ),
  ),
});

/** The section as validated. */
export type ForwardingInput = v.InferOutput<typeof ForwardingSchema>;

/** The header names that carry the gateway's facts to backends, as written; absent: not sent. */
export interface BackendHeaders {
  /** Carries the tenant (its host) the request was routed to. */
  readonly tenant?: string;
  /** Carries the route's name. */
  readonly route?: string;
  /** Carries the request's id. */
  readonly requestId?: string;
}

/** The section as the edge uses it. */
export interface Forwarding {
  /** The Via pseudonym per direction; absent: no Via entry of the gateway's own that way. */
  readonly via: { readonly backends?: string; readonly clients?: string };
  /** The header names that carry the gateway's facts to backends. */
  readonly backendHeaders: BackendHeaders;
  /** Lower case, "_" as "-". */
  readonly clientIpHeaders: readonly string[];
  /** The probes' User-Agent; absent: none sent. */
  readonly healthUserAgent?: string;
}

/**
 * Resolves the section: the Via pseudonyms per direction, the backend header names, the
 * client-address names folded (`defaults` when none are listed).
 *
 * @throws {ConfigError} when two backend headers fold to one name, or one is also a
 *   client-address claim (the gateway would both write it and pass a trusted proxy's copy)
 */
export function resolveForwarding(
  raw: ForwardingInput,
  defaults: readonly string[],
  source: YamlFile,
): Forwarding {
  const via = raw.via;
  const clientIpHeaders = (raw.client_ip_headers ?? defaults).map(foldName);
  const named = raw.backend_headers;
  const problems: ConfigProblem[] = [];
  const seen = new Map<string, string>();
  for (const key of ["tenant", "route", "request_id"] as const) {
    const name = named[key];
    if (name === undefined) continue;
    const folded = foldName(name);
    const path = ["forwarding", "backend_headers", key];
    const clash = seen.get(folded);
    if (clash !== undefined) {
      problems.push(
        problem(source, path, name, `Names the same header as backend_headers.${clash}`),
      );
    } else if (clientIpHeaders.includes(folded)) {
      problems.push(problem(source, path, name, "Is also listed in client_ip_headers"));
    }
    seen.set(folded, key);
  }
  if (problems.length > 0) throw new ConfigError(problems);
  return {
    via: typeof via === "object"
      ? { backends: via.backends || undefined, clients: via.clients || undefined }
      : { backends: via || undefined, clients: via || undefined },
    backendHeaders: { tenant: named.tenant, route: named.route, requestId: named.request_id },
    clientIpHeaders,
    healthUserAgent: raw.health_user_agent || undefined,
  };
}

/** One problem at `path`. */
function problem(
  source: YamlFile,
  path: readonly string[],
  value: string,
  message: string,
): ConfigProblem {
  return { file: source.file, path, value, message, at: source.locate(path) };
}
