/**
 * A tenant's policies, resolved once at load — tenant, then `globals.yaml`, then off — and compiled:
 * regular expressions built, limiters and blocklists allocated. A policy that is off is simply
 * absent, so it costs nothing per request. The request-side policies are also laid out as
 * {@link TenantPolicies.checks}, the list `checks.ts` runs, cheapest first: TTL blocklist (one table
 * lookup), caps (the head's lengths), per-client rate limit (one table entry, or one fleet-store
 * round trip), blocklist rules (a few expressions), WAF (decoding and every rule) — so a flood from
 * one client is refused before the WAF's decoding and matching run for it.
 *
 * @module
 */
import type { PoliciesDocument } from "../config/policy_schema.ts";
import { BlocklistCheck } from "./blocklist.ts";
import { CapsCheck } from "./caps.ts";
import { clientKeyRule, ClientKeys } from "./client_key.ts";
import type { ActivePolicy, PolicyCheck, PolicyMode } from "./policy_check.ts";
import { GLOBAL_SCOPE, type PolicyContext } from "./policy_context.ts";
import { PolicyTables } from "./policy_tables.ts";
import { RateLimitCheck } from "./rate_limit.ts";
import { TtlBlockCheck } from "./ttl_block.ts";
import { WafCheck } from "./waf_check.ts";

export type { BlockAction, PolicyMode } from "./policy_check.ts";
export type { BlockRule } from "./blocklist.ts";

/** A tenant's compiled policies; absent members are off. */
export interface TenantPolicies {
  readonly ttlBlock?: TtlBlockCheck;
  readonly caps?: CapsCheck;
  readonly rateLimit?: RateLimitCheck;
  readonly blocklist?: BlocklistCheck;
  readonly waf?: WafCheck;
  readonly securityHeaders?: {
    mode: PolicyMode;
    /** Flat `[name, value, …]`, lower-case names. */
    add: readonly string[];
    /** Lower-case names removed from responses (and replaced by `add`). */
    remove: ReadonlySet<string>;
  };
  /** The request-side policies present above, in the order they run (cheapest first). */
  readonly checks: readonly PolicyCheck[];
  /**
   * Response header names (lower case) the gateway owns: upstream values are dropped before its
   * own are set (rate headers while the rate limit runs; security headers and removals when on).
   */
  readonly strip: ReadonlySet<string>;
  /** True when any policy is on or in dry run (else the phase is skipped entirely). */
  readonly any: boolean;
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
export const NO_POLICIES: TenantPolicies = { checks: [], strip: new Set(), any: false };

/**
 * Resolves and compiles a tenant's policies: each policy from the tenant, else from the globals,
 * else off.
 *
 * @param context the tenant's scope and the edge's tables and stores (by default the globals'
 *   scope in tables of their own)
 */
export function compilePolicies(
  tenant: PoliciesDocument | undefined,
  globals: PoliciesDocument,
  context: PolicyContext = { scope: GLOBAL_SCOPE, tables: new PolicyTables() },
): TenantPolicies {
  const pick = <K extends keyof PoliciesDocument>(name: K) => tenant?.[name] ?? globals[name];
  // One client-key rule for every per-client check of the tenant: a block lands where it counted.
  context = { ...context, clientKeys: new ClientKeys(clientKeyRule(pick("client_key"))) };
  const active = <T extends { mode: "on" | "off" | "dry_run" }>(policy: T | undefined) =>
    policy && policy.mode !== "off" ? policy as T & { mode: PolicyMode } : undefined;

  const ttl = active(pick("ttl_block"));
  const caps = active(pick("caps"));
  const rate = active(pick("rate_limit"));
  const blocklist = active(pick("blocklist"));
  const waf = active(pick("waf"));
  const security = active(pick("security_headers"));
  const ttlBlock = ttl && new TtlBlockCheck(ttl, context);
  const securityHeaders = security && compileSecurityHeaders(security);
  const rateHeaders = rateHeadersOf(rate, securityHeaders);
  // Cheapest first: this key order is the order checks.ts runs them in.
  const checks = {
    ttlBlock,
    caps: caps && new CapsCheck(caps),
    rateLimit: rate && new RateLimitCheck(rate, context, { ttl: ttlBlock?.list, rateHeaders }),
    blocklist: blocklist && new BlocklistCheck(blocklist, ttlBlock?.list),
    waf: waf && new WafCheck(waf),
  };
  return {
    ...checks,
    securityHeaders,
    checks: Object.values(checks).filter((check) => check !== undefined),
    strip: new Set([
      ...rateHeaders,
      ...(securityHeaders?.mode === "on" ? securityHeaders.remove : []),
    ]),
    any: Boolean(ttl || caps || waf || blocklist || rate || security),
  };
}

/** The names of the shared tables `policies` use (see {@link PolicyTables.retain}). */
export function tablesOf(policies: TenantPolicies): string[] {
  return [...policies.rateLimit?.tableNames ?? [], policies.ttlBlock?.tableName].filter((name) =>
    name !== undefined
  );
}

/**
 * The rate header names the limit sets: none unless it is on with `headers: true`, and never one
 * the security headers remove (an operator's `remove` is the last word on what a reply carries).
 */
function rateHeadersOf(
  rate: ActivePolicy<"rate_limit"> | undefined,
  security: TenantPolicies["securityHeaders"],
): ReadonlySet<string> {
  if (rate?.mode !== "on" || !rate.headers) return new Set();
  const removed = security?.mode === "on" ? security.remove : new Set<string>();
  return new Set([...RATE_HEADERS].filter((name) => !removed.has(name)));
}

function compileSecurityHeaders(
  policy: ActivePolicy<"security_headers">,
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
 * The policies in force, by config name (`waf (dry run)` for one in dry run), in a fixed order
 * that is not the order they run in (that is {@link TenantPolicies.checks}, then the security
 * headers); empty when every policy is off.
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
