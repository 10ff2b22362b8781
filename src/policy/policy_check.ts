/**
 * What a request-side policy is to the runner in `checks.ts`: a phase name, a mode, and a check
 * that either lets the request by or names the reply it would refuse it with, and why. A check
 * never decides what its refusal does — that is the mode's job, applied once by the runner (on:
 * answer; dry run: log, count, go on) — so a new policy cannot get dry run wrong. Side effects
 * that only a live policy may have (rate headers, escalation into the TTL list, the body limit)
 * stay in the check, which knows its own mode.
 *
 * @module
 */
import type { PoliciesDocument } from "../config/policy_schema.ts";
import { failureReply } from "../request/errors.ts";
import type { RequestContext } from "../request/context.ts";
import type { Reply } from "../request/reply.ts";

/** How a policy that is not off runs. */
export type PolicyMode = "on" | "dry_run";

/** A policy's validated config section, once resolved as on or dry run. */
export type ActivePolicy<K extends keyof PoliciesDocument> =
  & NonNullable<PoliciesDocument[K]>
  & { readonly mode: PolicyMode };

/** What a blocklist match (or a TTL block) does to the request. */
export type BlockAction = "drop" | "404" | "429" | "timeout";

/** What a request collects on its way through the policies. */
export interface PolicyTrail {
  /** Response headers to set (flat, lower-case names), replacing any upstream values. */
  readonly headers: string[];
  /** Streaming request-body limit (bytes), when caps are on. */
  maxBodyBytes?: number;
}

/** One request as every check sees it: read once per request, shared by the checks. */
export interface PolicyRequest {
  readonly context: RequestContext;
  /** The injected clock's reading when the policies started (ms). */
  readonly now: number;
  /** The effective client address (behind trusted proxies, from their headers), computed once. */
  client(): string;
  /** A request header (lower-case name); repeated fields joined with ", ". */
  header(name: string): string | undefined;
}

/** Why a check would refuse a request, and the reply that refuses it. */
export interface Refusal {
  readonly reply: Reply;
  /** For the log line: "rule admin", "header count". */
  readonly reason: string;
}

/** One request-side policy that is on or in dry run. */
export interface PolicyCheck {
  /** The name counters and log lines carry: "ttl_block", "caps", "rate_limit", … */
  readonly phase: string;
  readonly mode: PolicyMode;
  /**
   * Evaluates `request`, adding to `trail` what the policy sets whatever the outcome.
   *
   * @returns the refusal, or undefined to let the request by — later when it asks a fleet store
   */
  check(
    request: PolicyRequest,
    trail: PolicyTrail,
  ): Refusal | undefined | Promise<Refusal | undefined>;
}

/** The reply a block `action` answers with. */
export function blockReply(action: BlockAction, requestId: string): Reply {
  if (action === "drop") return { status: 0, withhold: "drop", failure: "blocked" };
  if (action === "timeout") return { status: 0, withhold: "hold", failure: "blocked" };
  if (action === "429") return failureReply("rate_limited", requestId);
  return failureReply("no_route", requestId);
}
