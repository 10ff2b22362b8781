/**
 * Tenant policies: each one is configured per tenant, with a default in `globals.yaml`, and is off
 * when neither says anything. Every policy has a `mode`: `on`, `off`, or `dry_run` (evaluate, log,
 * count, let the request through).
 *
 * @module
 */
import * as v from "valibot";
import { Text, wholeNumber } from "./fields.ts";

const Mode = v.optional(
  v.picklist(["on", "off", "dry_run"], 'Expected "on", "off" or "dry_run"'),
  "on",
);

/** A regular expression source, checked to compile. */
const Pattern = v.pipe(
  v.string("Expected a regular expression"),
  v.minLength(1, "Expected a regular expression"),
  v.maxLength(512, "Keep a rule under 512 characters"),
  v.check((source) => {
    try {
      new RegExp(source);
      return true;
    } catch {
      return false;
    }
  }, "Not a valid regular expression"),
);

const BlockAction = v.picklist(
  ["drop", "404", "429", "timeout"],
  'Expected "drop", "404", "429" or "timeout"',
);

/**
 * A Redis-protocol server (Redis, Valkey) the fleet's edges share: `redis://host:port` with an
 * optional database number; the edge must list it in its own `policy_stores` (a tenant file never
 * widens where the edge may connect).
 */
export const RedisUrl: v.GenericSchema<string> = v.pipe(
  v.string("Expected a redis:// URL"),
  v.regex(
    /^redis:\/\/(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+):[0-9]{1,5}(\/[0-9]{1,2})?$/,
    'Expected "redis://host:port" or "redis://host:port/db"',
  ),
);

const RedisStore = {
  url: RedisUrl,
  /** Prefix of every key and channel this fleet writes (several fleets may share one server). */
  key_prefix: v.optional(
    v.pipe(
      v.string(),
      v.regex(/^[A-Za-z0-9:._-]{1,64}$/, "Expected 1-64 letters, digits, : . _ -"),
    ),
    "portcullis:",
  ),
  /** How long a decision waits for the store before the edge decides on its own table. */
  timeout_ms: v.optional(wholeNumber(1, 10_000), 50),
};

const RateStore = v.strictObject({
  redis: v.strictObject({
    ...RedisStore,
    /**
     * A local bucket of this share of the fleet's rate and burst refuses a flooding client before
     * it costs a store round trip (off when absent).
     */
    precheck_share: v.optional(
      v.pipe(
        v.number("Expected a number"),
        v.gtValue(0, "Expected a share above 0"),
        v.maxValue(1, "Expected a share of at most 1"),
      ),
    ),
  }),
});

const BlockStore = v.strictObject({ redis: v.strictObject(RedisStore) });

const RateLimit = v.strictObject({
  mode: Mode,
  /** Tokens refilled per second, per client. */
  per_second: v.pipe(v.number("Expected a number"), v.gtValue(0, "Expected a rate above 0")),
  /** Bucket size: requests a client may send back to back. */
  burst: wholeNumber(1, 1_000_000),
  /** Clients remembered at most (least recently seen are evicted first). */
  max_clients: v.optional(wholeNumber(1, 10_000_000), 100_000),
  /** Consecutive denials after which the client goes on the TTL blocklist (0: never). */
  block_after: v.optional(wholeNumber(0, 1_000_000), 0),
  /**
   * Whether replies carry the limit's state in `RateLimit-*` and `X-RateLimit-*` (off by default:
   * the pair is a signature, and with a fleet store the remaining count links the fleet's edges).
   */
  headers: v.optional(v.boolean("Expected true or false"), false),
  /** One limit for the whole fleet on a shared store (the edge's own table is the fallback). */
  store: v.optional(RateStore),
});

const Caps = v.strictObject({
  mode: Mode,
  max_headers: v.optional(wholeNumber(1, 10_000), 100),
  max_header_bytes: v.optional(wholeNumber(256, 1_048_576), 16_384),
  max_url_bytes: v.optional(wholeNumber(16, 1_048_576), 8192),
  max_body_bytes: v.optional(wholeNumber(0, Number.MAX_SAFE_INTEGER), 10_485_760),
});

const Waf = v.strictObject({
  mode: Mode,
  sqli: v.optional(v.boolean("Expected true or false"), true),
  xss: v.optional(v.boolean("Expected true or false"), true),
  traversal: v.optional(v.boolean("Expected true or false"), true),
  /** Request headers inspected besides path and query (lower case). */
  headers: v.optional(v.array(Text), ["user-agent", "referer"]),
});

const Blocklist = v.strictObject({
  mode: Mode,
  rules: v.optional(
    v.array(
      v.pipe(
        v.strictObject({
          name: v.pipe(
            v.string(),
            v.regex(/^[A-Za-z0-9._-]{1,64}$/, "Expected 1-64 letters, digits, . _ -"),
          ),
          path: v.optional(Pattern),
          header: v.optional(v.strictObject({ name: Text, pattern: Pattern })),
          action: v.optional(BlockAction, "404"),
        }),
        v.check(
          (rule) => rule.path !== undefined || rule.header !== undefined,
          "A rule needs a path or a header pattern (it would match every request)",
        ),
      ),
    ),
    [],
  ),
  /** Matches from one client within `window_ms` after which it goes on the TTL blocklist (0: never). */
  block_after: v.optional(wholeNumber(0, 1_000_000), 0),
  window_ms: v.optional(wholeNumber(1, 86_400_000), 60_000),
});

const TtlBlock = v.strictObject({
  mode: Mode,
  ttl_ms: v.optional(wholeNumber(1, 604_800_000), 600_000),
  action: v.optional(BlockAction, "429"),
  /** Addresses remembered at most. */
  max_entries: v.optional(wholeNumber(1, 10_000_000), 100_000),
  /** Share blocks with every edge of the fleet through a store. */
  store: v.optional(BlockStore),
});

/**
 * What the per-client policies (rate limit, TTL block, blocklist counts) count a client by: the
 * network of its address, so one subscriber's many IPv6 addresses share one budget.
 */
const ClientKey = v.strictObject({
  /** Bits of an IPv4 address kept: 32 counts each address, 24 each /24. */
  ipv4_prefix: v.optional(wholeNumber(8, 32, "a prefix length"), 32),
  /** Bits of an IPv6 address kept: 64 counts each /64, 128 each address. */
  ipv6_prefix: v.optional(wholeNumber(32, 128, "a prefix length"), 64),
});

const SecurityHeaders = v.strictObject({
  mode: Mode,
  hsts: v.optional(v.union([v.literal(false), Text]), "max-age=31536000; includeSubDomains"),
  content_type_options: v.optional(v.boolean("Expected true or false"), true),
  frame_options: v.optional(
    v.union([v.literal(false), v.picklist(["DENY", "SAMEORIGIN"])]),
    "DENY",
  ),
  referrer_policy: v.optional(v.union([v.literal(false), Text]), "no-referrer"),
  add: v.optional(v.record(Text, v.string()), {}),
  remove: v.optional(v.array(Text), []),
});

/** The policies block of a tenant file or of `globals.yaml`. */
export const PoliciesSchema: v.GenericSchema<unknown, PoliciesDocument> = v.strictObject({
  rate_limit: v.optional(RateLimit),
  caps: v.optional(Caps),
  waf: v.optional(Waf),
  blocklist: v.optional(Blocklist),
  ttl_block: v.optional(TtlBlock),
  security_headers: v.optional(SecurityHeaders),
  client_key: v.optional(ClientKey),
});

/** `globals.yaml` in the tenants folder: policy defaults for every tenant. */
export const GlobalsSchema = v.strictObject({
  policies: v.optional(PoliciesSchema, {}),
});

/** A policy's switch: `on`, `off`, or `dry_run` (evaluate, log, count, let the request through). */
export type PolicyModeSetting = "on" | "off" | "dry_run";

/** How a blocked request is answered: dropped, 404, 429, or held until its deadline. */
export type BlockAnswer = "drop" | "404" | "429" | "timeout";

/** A shared Redis-protocol store, as validated (`url`, `key_prefix`, `timeout_ms`). */
export interface RedisStoreConfig {
  /** `redis://host:port` or `redis://host:port/db`. */
  url: string;
  /** Prefix of every key and channel this fleet writes. */
  key_prefix: string;
  /** How long a decision waits for the store before the edge decides alone. */
  timeout_ms: number;
}

/** The rate limit's Redis-protocol server, with the optional local precheck. */
export interface RateRedisConfig extends RedisStoreConfig {
  /** A local bucket of this share of the fleet's rate refuses a flooding client early. */
  precheck_share?: number;
}

/** The rate limit's store. */
export interface RateStoreConfig {
  /** The Redis-protocol server. */
  redis: RateRedisConfig;
}

/** `policies.rate_limit`: a token bucket per client. */
export interface RateLimitPolicy {
  /** On, off or dry run. */
  mode: PolicyModeSetting;
  /** Tokens refilled per second, per client. */
  per_second: number;
  /** Requests a client may send back to back. */
  burst: number;
  /** Clients remembered at most. */
  max_clients: number;
  /** Consecutive denials after which the client goes on the TTL blocklist (0: never). */
  block_after: number;
  /** Whether replies carry the `RateLimit-*` and `X-RateLimit-*` fields (default false). */
  headers: boolean;
  /** One limit for the whole fleet on a shared store. */
  store?: RateStoreConfig;
}

/** `policies.caps`: size limits on the request head, URL and body. */
export interface CapsPolicy {
  /** On, off or dry run. */
  mode: PolicyModeSetting;
  /** Header fields at most. */
  max_headers: number;
  /** Bytes of the whole header block at most. */
  max_header_bytes: number;
  /** Bytes of the request target at most. */
  max_url_bytes: number;
  /** Bytes of the request body at most. */
  max_body_bytes: number;
}

/** `policies.waf`: the built-in SQL injection, XSS and traversal checks. */
export interface WafPolicy {
  /** On, off or dry run. */
  mode: PolicyModeSetting;
  /** Check for SQL injection. */
  sqli: boolean;
  /** Check for cross-site scripting. */
  xss: boolean;
  /** Check for path traversal. */
  traversal: boolean;
  /** Request headers inspected besides path and query (lower case). */
  headers: string[];
}

/** One rule of `policies.blocklist`: a path or header pattern and what a match gets. */
export interface BlocklistRule {
  /** The rule's name, as logs and metrics show it. */
  name: string;
  /** A regular expression over the canonical path. */
  path?: string;
  /** A regular expression over one request header. */
  header?: { name: string; pattern: string };
  /** How a match is answered. */
  action: BlockAnswer;
}

/** `policies.blocklist`: rules that refuse matching requests. */
export interface BlocklistPolicy {
  /** On, off or dry run. */
  mode: PolicyModeSetting;
  /** The rules, tried in order. */
  rules: BlocklistRule[];
  /** Matches from one client within `window_ms` that put it on the TTL blocklist (0: never). */
  block_after: number;
  /** The window `block_after` counts in. */
  window_ms: number;
}

/** `policies.ttl_block`: clients blocked for a while after the other policies flagged them. */
export interface TtlBlockPolicy {
  /** On, off or dry run. */
  mode: PolicyModeSetting;
  /** How long a client stays blocked. */
  ttl_ms: number;
  /** How a blocked client's request is answered. */
  action: BlockAnswer;
  /** Addresses remembered at most. */
  max_entries: number;
  /** Share blocks with every edge of the fleet through a store. */
  store?: { redis: RedisStoreConfig };
}

/** `policies.security_headers`: response headers the gateway sets and removes. */
export interface SecurityHeadersPolicy {
  /** On, off or dry run. */
  mode: PolicyModeSetting;
  /** `Strict-Transport-Security` (never sent on plain HTTP), or `false`. */
  hsts: string | false;
  /** `X-Content-Type-Options: nosniff`. */
  content_type_options: boolean;
  /** `X-Frame-Options`, or `false`. */
  frame_options: "DENY" | "SAMEORIGIN" | false;
  /** `Referrer-Policy`, or `false`. */
  referrer_policy: string | false;
  /** Headers added to every response. */
  add: { [name: string]: string };
  /** Headers removed from every response. */
  remove: string[];
}

/** `policies.client_key`: the prefix lengths a client address is counted by. */
export interface ClientKeyPolicy {
  /** Bits of an IPv4 address kept (8–32): 32 counts each address. */
  ipv4_prefix: number;
  /** Bits of an IPv6 address kept (32–128): 64 counts each /64. */
  ipv6_prefix: number;
}

/** A policies block as validated: each policy absent when the file does not set it. */
export interface PoliciesDocument {
  /** A token bucket per client. */
  rate_limit?: RateLimitPolicy;
  /** Size limits. */
  caps?: CapsPolicy;
  /** The built-in request checks. */
  waf?: WafPolicy;
  /** Pattern rules. */
  blocklist?: BlocklistPolicy;
  /** Temporary blocks. */
  ttl_block?: TtlBlockPolicy;
  /** Response headers. */
  security_headers?: SecurityHeadersPolicy;
  /** What the per-client policies count a client by (IPv4 /32, IPv6 /64 when absent). */
  client_key?: ClientKeyPolicy;
}
/** The globals file as validated. */
export type GlobalsDocument = v.InferOutput<typeof GlobalsSchema>;
/** The name of the globals file inside the tenants folder. */
export const GLOBALS_FILE = "globals.yaml";
