/**
 * The policy phase of the public dataplane, cheapest first: TTL blocklist, caps, per-client rate
 * limit, blocklist rules, WAF (so a flood from one client is refused before the WAF's decoding
 * and matching run for it). Each policy that is on may answer the request itself; a policy in dry
 * run evaluates the same way, logs one structured line, counts
 * `portcullis_policy_dry_run_total{phase,route}` and lets the request through — so a live deny
 * always wins over a dry one. The rate limit adds its headers to the response whether it denies or
 * not (IETF RateLimit fields and the `X-RateLimit-*` spelling).
 *
 * @module
 */
import type { AddressSet } from "../proxy/cidr.ts";
import { type FailureKind, failureReply } from "../proxy/errors.ts";
import { effectiveClient } from "../proxy/hygiene.ts";
import type { RequestContext } from "../server/lane.ts";
import type { Reply } from "../server/reply.ts";
import type { BlockAction, TenantPolicies } from "./policies.ts";
import type { PolicyStats } from "./stats.ts";
import { inspect } from "./waf.ts";

/** What the phase needs from the edge. */
export interface PolicyServices {
  readonly clock: () => number;
  readonly trusted: AddressSet;
  readonly log: (line: string) => void;
  readonly policyStats: PolicyStats;
}

/** What a request collects on its way through the policies. */
export interface PolicyTrail {
  /** Response headers to set (flat, lower-case names), replacing any upstream values. */
  readonly headers: string[];
  /** Streaming request-body limit (bytes), when caps are on. */
  maxBodyBytes?: number;
}

/**
 * Runs the request-side policies.
 *
 * @param context the admitted request
 * @param policies the tenant's (or the globals') compiled policies
 * @param route the matched route's name, or "-" (unrouted traffic is not exempt)
 * @param services clock, trusted proxies, log, counters
 * @param trail collects response headers and the body limit
 * @returns a reply that answers the request instead, or undefined to go on
 */
export function checkPolicies(
  context: RequestContext,
  policies: TenantPolicies,
  route: string,
  services: PolicyServices,
  trail: PolicyTrail,
): Reply | undefined {
  const now = services.clock();
  let client: string | undefined;
  const clientOf = () =>
    client ??= effectiveClient(context.request.rawHeaders, context.peer, services.trusted);
  const verdict = (phase: string, reply: Reply, reason: string, mode: "on" | "dry_run") => {
    if (mode === "on") {
      services.policyStats.denied(phase);
      services.log(
        `portcullis: policy ${phase}: request ${context.requestId} refused (${reason})`,
      );
      return reply;
    }
    services.policyStats.dryRun(phase, route);
    services.log(JSON.stringify({
      event: "policy_dry_run",
      phase,
      would: reply.status || reply.withhold,
      reason,
      route,
      request_id: context.requestId,
    }));
    return undefined;
  };

  const ttl = policies.ttlBlock;
  if (ttl && ttl.list.blocked(clientOf(), now)) {
    const reply = verdict(
      "ttl_block",
      blockReply(ttl.action, context),
      "address blocked",
      ttl.mode,
    );
    if (reply) return reply;
  }

  const caps = policies.caps;
  if (caps) {
    const reply = checkCaps(context, caps, trail, verdict);
    if (reply) return reply;
  }

  const rate = policies.rateLimit;
  if (rate) {
    // Each tenant (and the globals, for unknown hosts) has its own limiter: the client is the key.
    const decision = rate.limiter.take(clientOf(), now);
    const resetS = decision.resetS;
    if (rate.mode === "on") {
      trail.headers.push(
        "ratelimit-limit",
        String(decision.limit),
        "ratelimit-remaining",
        String(decision.remaining),
        "ratelimit-reset",
        String(resetS),
        "x-ratelimit-limit",
        String(decision.limit),
        "x-ratelimit-remaining",
        String(decision.remaining),
        "x-ratelimit-reset",
        String(Math.ceil(Date.now() / 1000) + resetS),
      );
    }
    if (!decision.allowed) {
      if (
        rate.blockAfter > 0 && ttl && rate.mode === "on" &&
        decision.denialsInARow >= rate.blockAfter
      ) {
        ttl.list.block(clientOf(), now);
      }
      const headers = { "retry-after": String(decision.retryAfterS) };
      const reply = verdict(
        "rate_limit",
        failureReply("rate_limited", context.requestId, { headers }),
        `${decision.denialsInARow} denied in a row`,
        rate.mode,
      );
      if (reply) return reply;
    }
  }

  const blocklist = policies.blocklist;
  if (blocklist) {
    for (const rule of blocklist.rules) {
      if (rule.path && !rule.path.test(context.head.path)) continue;
      if (rule.header) {
        const value = headerOf(context, rule.header.name);
        if (value === undefined || !rule.header.pattern.test(value)) continue;
      }
      if (blocklist.blockAfter > 0 && ttl && blocklist.mode === "on") {
        if (blocklist.matches.count(clientOf(), now) >= blocklist.blockAfter) {
          ttl.list.block(clientOf(), now);
        }
      }
      const reply = verdict(
        "blocklist",
        blockReply(rule.action, context),
        `rule ${rule.name}`,
        blocklist.mode,
      );
      if (reply) return reply;
      break;
    }
  }

  const waf = policies.waf;
  if (waf) {
    const head = context.head;
    const finding = inspect({
      path: head.path,
      query: head.query,
      header: (name) => headerOf(context, name),
    }, waf.options);
    if (finding) {
      const reason = `${finding.detection} in ${finding.location} (${finding.rule})`;
      const reply = verdict("waf", failureReply("blocked", context.requestId), reason, waf.mode);
      if (reply) return reply;
    }
  }
  return undefined;
}

type Verdict = (
  phase: string,
  reply: Reply,
  reason: string,
  mode: "on" | "dry_run",
) => Reply | undefined;

function checkCaps(
  context: RequestContext,
  caps: NonNullable<TenantPolicies["caps"]>,
  trail: PolicyTrail,
  verdict: Verdict,
): Reply | undefined {
  const over = capExceeded(context, caps);
  if (over) {
    const reply = verdict("caps", failureReply(over[0], context.requestId), over[1], caps.mode);
    if (reply) return reply;
  }
  if (caps.mode === "on") trail.maxBodyBytes = caps.maxBodyBytes;
  return undefined;
}

/** The first cap the request's head exceeds: the failure and the reason, or undefined. */
function capExceeded(
  context: RequestContext,
  caps: NonNullable<TenantPolicies["caps"]>,
): [FailureKind, string] | undefined {
  const raw = context.request.rawHeaders;
  if (raw.length / 2 > caps.maxHeaders) return ["header_fields_too_large", "header count"];
  let bytes = 0;
  for (let i = 0; i < raw.length; i++) bytes += raw[i].length + 2;
  if (bytes > caps.maxHeaderBytes) return ["header_fields_too_large", "header bytes"];
  if (context.head.path.length + context.head.query.length > caps.maxUrlBytes) {
    return ["uri_too_long", "target length"];
  }
  const length = Number(context.headers["content-length"] ?? 0);
  if (length > caps.maxBodyBytes) return ["payload_too_large", "declared body"];
  return undefined;
}

function blockReply(action: BlockAction, context: RequestContext): Reply {
  if (action === "drop") return { status: 0, withhold: "drop", failure: "blocked" };
  if (action === "timeout") return { status: 0, withhold: "hold", failure: "blocked" };
  if (action === "429") return failureReply("rate_limited", context.requestId);
  return failureReply("no_route", context.requestId);
}

function headerOf(context: RequestContext, name: string): string | undefined {
  const value = context.headers[name];
  return Array.isArray(value) ? value.join(", ") : value;
}

/**
 * Sets the trail's headers on a reply after dropping the `remove` names (lower case): the
 * policies' {@link TenantPolicies.strip} — upstream rate headers when the rate limit runs, and
 * the security headers' removals and replacements.
 */
export function decorate(reply: Reply, trail: PolicyTrail, remove: ReadonlySet<string>): Reply {
  if ((trail.headers.length === 0 && remove.size === 0) || reply.withhold || reply.tunnel) {
    return reply;
  }
  if (reply.rawHeaders) {
    const raw = reply.rawHeaders;
    const out: string[] = [];
    for (let i = 0; i < raw.length; i += 2) {
      if (remove.size === 0 || !remove.has(raw[i].toLowerCase())) out.push(raw[i], raw[i + 1]);
    }
    for (let i = 0; i < trail.headers.length; i++) out.push(trail.headers[i]);
    return { ...reply, rawHeaders: out };
  }
  const headers: Record<string, string> = {};
  for (const [name, value] of Object.entries(reply.headers ?? {})) {
    const lower = name.toLowerCase();
    if (!remove.has(lower)) headers[name] = value;
  }
  for (let i = 0; i < trail.headers.length; i += 2) {
    headers[trail.headers[i]] = trail.headers[i + 1];
  }
  return { ...reply, headers };
}
