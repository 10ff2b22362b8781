/**
 * The tenant file schema: one YAML file per host in `tenants_dir`, named `<host>.yaml`.
 *
 * @module
 */
import * as v from "valibot";
import { HostPort } from "./egress_schema.ts";
import { PoliciesSchema } from "./policy_schema.ts";
import { Text, wholeNumber } from "./fields.ts";
import { closest } from "./suggest.ts";

/**
 * The request methods the edge's HTTP parser accepts (node:http's `METHODS`): a route naming any
 * other could never match, so a slip like `HEDA` is refused instead of routing nothing.
 */
export const METHODS: readonly string[] = [
  "ACL",
  "BIND",
  "CHECKOUT",
  "CONNECT",
  "COPY",
  "DELETE",
  "GET",
  "HEAD",
  "LINK",
  "LOCK",
  "M-SEARCH",
  "MERGE",
  "MKACTIVITY",
  "MKCALENDAR",
  "MKCOL",
  "MOVE",
  "NOTIFY",
  "OPTIONS",
  "PATCH",
  "POST",
  "PROPFIND",
  "PROPPATCH",
  "PURGE",
  "PUT",
  "QUERY",
  "REBIND",
  "REPORT",
  "SEARCH",
  "SOURCE",
  "SUBSCRIBE",
  "TRACE",
  "UNBIND",
  "UNLINK",
  "UNLOCK",
  "UNSUBSCRIBE",
];

/** `HEDA is not a method; did you mean HEAD?` */
function methodMessage(issue: { readonly input: unknown }): string {
  const written = String(issue.input);
  const guess = closest(written, METHODS);
  return guess
    ? `${written} is not a method; did you mean ${guess}?`
    : `${written} is not a method (expected an upper-case method such as GET or POST)`;
}

/** A lower-case DNS name (`.onion` names included); no port, no trailing dot. */
export const HostName = v.pipe(
  v.string("Expected a host name"),
  v.regex(
    /^(?=.{1,253}$)[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)*$/,
    "Expected a lower-case host name without port (e.g. demo.example)",
  ),
);

const HeaderName = v.pipe(
  v.string(),
  v.regex(/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/, "Expected an HTTP header name"),
  v.check(
    (name) => !FRAMING_HEADERS.has(name.toLowerCase()),
    "The gateway owns this header (framing, connection or request id)",
  ),
);
const HeaderValue = v.pipe(
  v.string("Expected text"),
  v.regex(/^[\t\x20-\x7e\x80-\xff]*$/, "A header value cannot hold control characters"),
);

/** Headers a route may not set: the gateway owns framing, the connection and the request id. */
export const FRAMING_HEADERS = new Set([
  "connection",
  "content-length",
  "keep-alive",
  "proxy-connection",
  "te",
  "trailer",
  "transfer-encoding",
  "upgrade",
  "x-request-id",
]);

const HeaderNameAny = v.pipe(
  v.string(),
  v.regex(/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/, "Expected an HTTP header name"),
);

/** A match criterion: `true` for presence, or the exact value. */
const Criterion = v.union(
  [v.literal(true), v.string()],
  "Expected true (present) or the exact value as text",
);

const Match = v.strictObject({
  /** Exact path, or a template with whole-segment `{name}` parameters. */
  path: v.optional(
    v.pipe(v.string("Expected a path"), v.startsWith("/", "A path starts with '/'")),
  ),
  /** Path prefix. */
  prefix: v.optional(
    v.pipe(v.string("Expected a path prefix"), v.startsWith("/", "A prefix starts with '/'")),
  ),
  methods: v.optional(
    v.pipe(
      v.array(
        // A list, so the JSON schema offers the methods to an editor.
        v.picklist(METHODS, methodMessage),
        "Expected a list of methods",
      ),
      v.minLength(1, "List at least one method (or leave methods out to allow all)"),
    ),
  ),
  host: v.optional(HostName),
  /** Request headers that must be present (`true`) or equal a value. */
  headers: v.optional(v.record(HeaderNameAny, Criterion)),
  /** Query parameters that must be present (`true`) or equal a value. */
  query: v.optional(v.record(v.pipe(v.string(), v.minLength(1)), Criterion)),
  /** Cookies that must be present (`true`) or equal a value. */
  cookies: v.optional(v.record(v.pipe(v.string(), v.minLength(1)), Criterion)),
});

const Respond = v.strictObject({
  status: v.optional(wholeNumber(200, 599, "a status"), 200),
  headers: v.optional(v.record(HeaderName, HeaderValue), {}),
  body: v.optional(v.string("Expected text")),
  /** A file, relative to the tenants folder, streamed as the body. */
  body_file: v.optional(Text),
});

const Redirect = v.strictObject({
  status: v.optional(
    v.picklist([301, 302, 303, 307, 308], "Expected 301, 302, 303, 307 or 308"),
    302,
  ),
  location: v.pipe(
    v.string("Expected a URL"),
    v.regex(
      /^(?:https?:\/\/[^\s/?#]+(?:[/?][^\s]*)?|\/[^\s]*)$/,
      "Expected an http(s) URL or /path",
    ),
  ),
});

const Status = wholeNumber(100, 599, "a status");

/**
 * A backend's active health check: a GET of `path` through the egress every `interval_ms`; after
 * `failures` consecutive answers outside `expect_status` (or none within `timeout_ms`) the backend
 * is cold, and it is passed over while another is left, until a check passes again.
 */
const BackendHealth = v.strictObject({
  path: v.pipe(
    v.string("Expected a path"),
    v.regex(
      /^\/[\x21\x22\x24-\x7e]*$/,
      "A health path starts with '/' and is printable ASCII with no space or '#'",
    ),
  ),
  interval_ms: v.optional(wholeNumber(500, 3_600_000, "milliseconds"), 10_000),
  timeout_ms: v.optional(wholeNumber(1, 600_000, "milliseconds"), 2000),
  expect_status: v.optional(
    v.union(
      [Status, v.pipe(v.array(Status), v.minLength(1, "List at least one status"))],
      "Expected a status or a list of statuses",
    ),
    200,
  ),
  failures: v.optional(wholeNumber(1, 100, "a number of failures"), 2),
});

/**
 * A backend: `http://host[:port]` or `https://host[:port]` (an `.onion` name or any host the
 * egress can reach; TLS runs over the SOCKS tunnel or the direct connection).
 */
const Backend = v.strictObject({
  url: v.pipe(
    v.string("Expected a URL"),
    v.regex(
      /^https?:\/\/(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?)(?::\d{1,5})?\/?$/,
      "Expected http(s)://host[:port] with no path (use rewrite to change paths)",
    ),
  ),
  weight: v.optional(wholeNumber(1, 1000, "a weight"), 1),
  /** Requests in flight to this backend at most (per request worker); beyond, another or 503. */
  max_pending: v.optional(wholeNumber(1, 1_000_000, "a number of requests")),
  /** An active health check (egress/health_checks.ts): absent, the backend is never probed. */
  health: v.optional(BackendHealth),
});

const Rewrite = v.strictObject({
  /** Remove this prefix from the path. */
  strip_prefix: v.optional(
    v.pipe(v.string("Expected a path prefix"), v.startsWith("/", "A prefix starts with '/'")),
  ),
  /** Replace the whole path (`{name}` placeholders take path parameters). */
  replace: v.optional(
    v.pipe(v.string("Expected a path"), v.startsWith("/", "A path starts with '/'")),
  ),
  /** A regular expression over the path… */
  regex: v.optional(v.pipe(v.string("Expected a regular expression"), v.minLength(1))),
  /** …replaced by this (`$1` and `${name}` take groups). */
  to: v.optional(v.string("Expected the replacement path")),
});

const Proxy = v.strictObject({
  backends: v.pipe(
    v.array(Backend, "Expected a list of backends"),
    v.minLength(1, "A proxy route needs at least one backend"),
  ),
  rewrite: v.optional(Rewrite),
  /** Attempts in all (first try included), for retry-eligible methods. */
  attempts: v.optional(wholeNumber(1, 10, "a number of attempts"), 3),
  /** Also retry POST (only safe when the upstream makes POST idempotent). */
  retry_post: v.optional(v.boolean("Expected true or false"), false),
  /** Per attempt: time to a usable connection (TCP, SOCKS, TLS); default `egress.connect_timeout_ms`. */
  connect_ms: v.optional(wholeNumber(1, 600_000, "milliseconds")),
  /** Per attempt: time from the request written to the response head; default none (the deadline). */
  first_byte_ms: v.optional(wholeNumber(1, 3_600_000, "milliseconds")),
  /** How `https://` backends are verified and what they are shown (files in the tenants folder). */
  tls: v.optional(v.strictObject({
    /** PEM roots trusted instead of the runtime's. */
    ca_file: v.optional(Text),
    /** PEM client certificate chain and key, for backends that require one (mTLS). */
    cert_file: v.optional(Text),
    key_file: v.optional(Text),
    /** SNI and the name checked, instead of the backend's host. */
    server_name: v.optional(HostName),
    min_version: v.optional(
      v.picklist(["TLSv1.2", "TLSv1.3"], 'Expected "TLSv1.2" or "TLSv1.3"'),
      "TLSv1.2",
    ),
  })),
});

const Route = v.strictObject({
  name: v.optional(
    v.pipe(v.string(), v.regex(/^[A-Za-z0-9._-]{1,64}$/, "Expected 1-64 letters, digits, . _ -")),
  ),
  match: Match,
  respond: v.optional(Respond),
  redirect: v.optional(Redirect),
  proxy: v.optional(Proxy),
  /** 0 (lowest) to 10; routes at 8 or above may use the public lane's priority reserve. */
  priority: v.optional(wholeNumber(0, 10, "a priority"), 5),
  /** Answer 503 with Retry-After instead of running the action. */
  maintenance: v.optional(v.strictObject({
    retry_after_s: v.optional(wholeNumber(1, 86_400, "seconds"), 120),
  })),
});

/** The tenant file schema. */
export const TenantSchema = v.strictObject({
  host: HostName,
  aliases: v.optional(v.array(HostName, "Expected a list of host names"), []),
  enabled: v.optional(v.boolean("Expected true or false"), true),
  block_response: v.optional(
    v.union(
      [v.picklist(["drop", "timeout"]), wholeNumber(400, 599, "a status")],
      'Expected a status from 400 to 599, "drop" or "timeout"',
    ),
    404,
  ),
  routes: v.optional(v.array(Route, "Expected a list of routes"), []),
  /** This tenant's policies; each one absent here falls back to `globals.yaml`, then to off. */
  policies: v.optional(PoliciesSchema),
  /** Not terminated: TLS bytes are piped by SNI to one of these `host:port` backends. */
  passthrough: v.optional(v.strictObject({
    backends: v.pipe(
      v.array(HostPort, "Expected a list of host:port"),
      v.minLength(1, "Passthrough needs at least one backend"),
    ),
  })),
});

/** A tenant file as validated. */
export type TenantDocument = v.InferOutput<typeof TenantSchema>;
/** One route as validated. */
export type RouteDocument = TenantDocument["routes"][number];
/** A proxy action as validated. */
export type ProxyDocument = NonNullable<RouteDocument["proxy"]>;
