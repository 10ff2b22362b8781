/**
 * The policy phase of the public dataplane: runs a tenant's {@link TenantPolicies.checks} in their
 * order (cheapest first; `policies.ts` says why) and applies each refusal's mode here, once. A
 * policy that is on answers the request, counts `portcullis_policy_denied_total{phase}` and logs
 * one line. A policy in dry run logs one structured line, counts
 * `portcullis_policy_dry_run_total{phase,route}` and lets the request go on to the next check — so
 * a live deny always wins over a dry one, and once a live one answers, later checks neither run
 * nor count. What a policy adds whatever the outcome (rate headers, the streaming body limit) it
 * leaves on the {@link PolicyTrail} itself.
 *
 * @module
 */
import type { AddressSet } from "../request/cidr.ts";
import { effectiveClient } from "../request/client_ip_headers.ts";
import type { RequestContext } from "../request/context.ts";
import type { Reply } from "../request/reply.ts";
import type { TenantPolicies } from "./policies.ts";
import type { PolicyCheck, PolicyRequest, PolicyTrail, Refusal } from "./policy_check.ts";
import type { PolicyStats } from "./policy_stats.ts";

export type { PolicyTrail } from "./policy_check.ts";

/** What the phase needs from the edge. */
export interface PolicyServices {
  readonly clock: () => number;
  readonly trusted: AddressSet;
  readonly log: (line: string) => void;
  readonly policyStats: PolicyStats;
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
): Reply | undefined | Promise<Reply | undefined> {
  return runFrom(0, policies.checks, new PolicyRun(context, route, services), trail);
}

/**
 * Runs `checks` from index `first` in order; a check that asks a fleet store makes the rest wait
 * for its answer (the order, and so which refusal wins, never changes).
 */
function runFrom(
  first: number,
  checks: readonly PolicyCheck[],
  run: PolicyRun,
  trail: PolicyTrail,
): Reply | undefined | Promise<Reply | undefined> {
  for (let i = first; i < checks.length; i++) {
    const check = checks[i];
    const refusal = check.check(run, trail);
    if (refusal instanceof Promise) {
      return refusal.then((answer) => {
        const reply = answer && verdict(check, answer, run);
        return reply ?? runFrom(i + 1, checks, run, trail);
      });
    }
    const reply = refusal && verdict(check, refusal, run);
    if (reply) return reply;
  }
  return undefined;
}

/** One run of the checks over a request: the clock read once, the client worked out at most once. */
class PolicyRun implements PolicyRequest {
  readonly context: RequestContext;
  readonly route: string;
  readonly services: PolicyServices;
  readonly now: number;
  #client: string | undefined;

  constructor(context: RequestContext, route: string, services: PolicyServices) {
    this.context = context;
    this.route = route;
    this.services = services;
    this.now = services.clock();
  }

  client(): string {
    const context = this.context;
    return this.#client ??= effectiveClient(
      context.request.rawHeaders,
      context.peer,
      this.services.trusted,
    );
  }

  header(name: string): string | undefined {
    const value = this.context.headers[name];
    return Array.isArray(value) ? value.join(", ") : value;
  }
}

/**
 * Applies a check's mode to its refusal: on, the reply (counted and logged); in dry run, a count
 * and a JSON line, and undefined so the request goes on.
 */
function verdict(check: PolicyCheck, refusal: Refusal, run: PolicyRun): Reply | undefined {
  const { phase, mode } = check;
  const { context, route, services } = run;
  if (mode === "on") {
    services.policyStats.denied(phase);
    services.log(
      `portcullis: policy ${phase}: request ${context.requestId} refused (${refusal.reason})`,
    );
    return refusal.reply;
  }
  services.policyStats.dryRun(phase, route);
  services.log(JSON.stringify({
    event: "policy_dry_run",
    phase,
    would: refusal.reply.status || refusal.reply.withhold,
    reason: refusal.reason,
    route,
    request_id: context.requestId,
  }));
  return undefined;
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
