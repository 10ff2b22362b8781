/**
 * A tenant's policies, resolved once at load — tenant, then `globals.yaml`, then off — and compiled:
 * regular expressions built, limiters and blocklists allocated. A policy that is off is simply
 * absent, so it costs nothing per request.
 *
 * @module
 */
import type { PoliciesDocument } from "../config/policy_schema.ts";
import { ClientRateLimiter } from "./rate_limit.ts";
import { MatchCounter, TtlBlocklist } from "./ttl_block.ts";
import type { WafOptions } from "./waf.ts";

/** How a policy that is not off runs. */
export type PolicyMode = "on" | "dry_run";

/** What a blocklist match (or a TTL block) does to the request. */
export type BlockAction = "drop" | "404" | "429" | "timeout";

/** A tenant's compiled policies; absent members are off. */
export interface TenantPolicies {
  readonly ttlBlock?: { mode: PolicyMode; list: TtlBlocklist; action: BlockAction };
  readonly caps?: {
    mode: PolicyMode;
    maxHeaders: number;
    maxHeaderBytes: number;
    maxUrlBytes: number;
    maxBodyBytes: number;
  };
  readonly waf?: { mode: PolicyMode; options: WafOptions };
  readonly blocklist?: {
    mode: PolicyMode;
    rules: readonly BlockRule[];
    blockAfter: number;
    matches: MatchCounter;
  };
  readonly rateLimit?: { mode: PolicyMode; limiter: ClientRateLimiter; blockAfter: number };
  readonly securityHeaders?: {
    mode: PolicyMode;
    /** Flat `[name, value, …]`, lower-case names. */
    add: readonly string[];
    /** Lower-case names removed from responses (and replaced by `add`). */
    remove: ReadonlySet<string>;
  };
  /**
   * Response header names (lower case) the gateway owns: upstream values are dropped before its
   * own are set (rate headers while the rate limit runs; security headers and removals when on).
   */
  readonly strip: ReadonlySet<string>;
  /** True when any policy is on or in dry run (else the phase is skipped entirely). */
  readonly any: boolean;
}

/** One blocklist rule. */
export interface BlockRule {
  readonly name: string;
  readonly path?: RegExp;
  readonly header?: { readonly name: string; readonly pattern: RegExp };
  readonly action: BlockAction;
}

/** The rate headers the gateway owns on every response it decorates. */
export const RATE_HEADERS: ReadonlySet<string> = new Set([
  "ratelimit-limit",
  "ratelimit-remaining",
  "ratelimit-reset",
  "x-ratelimit-limit",
  "x-ratelimit-remaining",
  "x-ratelimit-reset",
]);

/** No policies: the built-in default. */
export const NO_POLICIES: TenantPolicies = { strip: new Set(), any: false };

/**
 * Resolves and compiles a tenant's policies: each policy from the tenant, else from the globals,
 * else off.
 */
export function compilePolicies(
  tenant: PoliciesDocument | undefined,
  globals: PoliciesDocument,
): TenantPolicies {
  const pick = <K extends keyof PoliciesDocument>(name: K) => tenant?.[name] ?? globals[name];
  const active = <T extends { mode: "on" | "off" | "dry_run" }>(policy: T | undefined) =>
    policy && policy.mode !== "off" ? policy as T & { mode: PolicyMode } : undefined;

  const ttl = active(pick("ttl_block"));
  const caps = active(pick("caps"));
  const waf = active(pick("waf"));
  const blocklist = active(pick("blocklist"));
  const rate = active(pick("rate_limit"));
  const security = active(pick("security_headers"));
  const securityHeaders = security && compileSecurityHeaders(security);
  const policies: TenantPolicies = {
    ttlBlock: ttl && {
      mode: ttl.mode,
      list: new TtlBlocklist({ ttlMs: ttl.ttl_ms, maxEntries: ttl.max_entries }),
      action: ttl.action,
    },
    caps: caps && {
      mode: caps.mode,
      maxHeaders: caps.max_headers,
      maxHeaderBytes: caps.max_header_bytes,
      maxUrlBytes: caps.max_url_bytes,
      maxBodyBytes: caps.max_body_bytes,
    },
    waf: waf && {
      mode: waf.mode,
      options: {
        sqli: waf.sqli,
        xss: waf.xss,
        traversal: waf.traversal,
        headers: waf.headers.map((h) => h.toLowerCase()),
      },
    },
    blocklist: blocklist && {
      mode: blocklist.mode,
      rules: blocklist.rules.map((rule) => ({
        name: rule.name,
        path: rule.path ? new RegExp(rule.path) : undefined,
        header: rule.header && {
          name: rule.header.name.toLowerCase(),
          pattern: new RegExp(rule.header.pattern),
        },
        action: rule.action,
      })),
      blockAfter: blocklist.block_after,
      matches: new MatchCounter({ windowMs: blocklist.window_ms, maxEntries: 100_000 }),
    },
    rateLimit: rate && {
      mode: rate.mode,
      limiter: new ClientRateLimiter({
        perSecond: rate.per_second,
        burst: rate.burst,
        maxClients: rate.max_clients,
      }),
      blockAfter: rate.block_after,
    },
    securityHeaders,
    strip: new Set([
      ...(rate?.mode === "on" ? RATE_HEADERS : []),
      ...(securityHeaders?.mode === "on" ? securityHeaders.remove : []),
    ]),
    any: Boolean(ttl || caps || waf || blocklist || rate || security),
  };
  return policies;
}

function compileSecurityHeaders(
  policy: NonNullable<PoliciesDocument["security_headers"]> & { mode: PolicyMode },
): NonNullable<TenantPolicies["securityHeaders"]> {
  const add: string[] = [];
  const set = (name: string, value: string | false) => {
    if (value !== false) add.push(name, value);
  };
  set("strict-transport-security", policy.hsts);
  set("x-content-type-options", policy.content_type_options ? "nosniff" : false);
  set("x-frame-options", policy.frame_options);
  set("referrer-policy", policy.referrer_policy);
  for (const [name, value] of Object.entries(policy.add)) add.push(name.toLowerCase(), value);
  const remove = new Set(policy.remove.map((name) => name.toLowerCase()));
  for (let i = 0; i < add.length; i += 2) remove.add(add[i]);
  return { mode: policy.mode, add, remove };
}

/**
 * The policies in force, by config name, in evaluation order (`waf (dry run)` for one in dry run);
 * empty when every policy is off.
 *
 * @example
 * ```ts
 * import { compilePolicies, describePolicies } from "./policies.ts";
 * const policies = compilePolicies({ waf: { mode: "dry_run", sqli: true, xss: true,
 *   traversal: true, headers: [] } }, {});
 * describePolicies(policies); // ["waf (dry run)"]
 * ```
 */
export function describePolicies(policies: TenantPolicies): string[] {
  const named: [string, { mode: PolicyMode } | undefined][] = [
    ["ttl_block", policies.ttlBlock],
    ["caps", policies.caps],
    ["waf", policies.waf],
    ["blocklist", policies.blocklist],
    ["rate_limit", policies.rateLimit],
    ["security_headers", policies.securityHeaders],
  ];
  return named.filter(([, policy]) => policy !== undefined).map(([name, policy]) =>
    policy!.mode === "dry_run" ? `${name} (dry run)` : name
  );
}
