/**
 * Ready means able to serve. An edge or a door that holds nothing to serve answers every request
 * with a miss (an edge: 421 for every host; a door: the cover for every slug), and a load balancer
 * that polls readiness would send real users to it for as long as that lasts. Issue 34 found a
 * remote edge started with no cache while its hub was down answering `/readyz` 200 with 0 tenants.
 *
 * So readiness asks one question beside boot, drain and live workers: is there a verified set? A
 * follower (a remote edge, a door) holds one once its hub's set was received, checked against the
 * hub's hash and taken — or once a cached set verified at start. Until then it is not ready, and
 * says why, as stable codes (what scripts and alerts match) each with a line for the operator:
 *
 * | code | when |
 * |---|---|
 * | `no_set_yet` | no set held, no cached one, and the hub has not yet been heard from |
 * | `hub_unreachable` | no set held, and the hub has not answered since `since` |
 * | `set_rejected` | no set held, and the hub's set was refused here (invalid here, or it did not check against its hash) |
 * | `set_pending` | no set held, and the hub's set waits for the cache folder to take it |
 * | `no_tenants` | the live set holds no tenant (`readiness.empty_tenants: not_ready`, the default) |
 *
 * Once a verified set is held, a refresh that fails — the hub away, a newer set refused, a newer
 * set waiting for the cache — does not make the follower unready: serving the last good set is
 * what it is for (DESIGN §5), and `/v1/config` says what failed. What makes a ready edge unready
 * again is a drain (a signal, `POST /v1/drain`, a revocation's end), a lane with no live worker, or
 * a live set with no tenant; a door's revocation, once its grace is over.
 *
 * The reason texts are for the operator of a loopback listener: they name what is missing and
 * since when, never the product, a tenant host or a file path. This module holds no state: it reads
 * what the store and the follower already record.
 *
 * @module
 */
import type { Reply } from "../request/reply.ts";
import { describeDown, type LaneWorkers } from "../observe/worker_census.ts";

/** Why an edge or a door is not ready, as a stable code. */
export type NotReadyCode =
  | "booting"
  | "draining"
  | "lane_down"
  | "no_set_yet"
  | "hub_unreachable"
  | "set_rejected"
  | "set_pending"
  | "no_tenants"
  | "revoked";

/** One reason for not being ready: a stable code and a line for the operator. */
export interface NotReadyReason {
  readonly code: NotReadyCode;
  readonly message: string;
  /** When the condition began (ISO 8601), where known. */
  readonly since?: string;
}

/** What an edge with an empty live set reports: not ready (default), or ready all the same. */
export type EmptyTenants = "not_ready" | "ready";

/** What a follower's status shows (`/v1/config`'s `hub`, a door's `stream`), as far as read here. */
interface FollowerView {
  readonly unreachable_since?: string | null;
  readonly last_error?: { readonly message: string } | null;
  readonly unverified?: { readonly at: string; readonly message: string } | null;
  readonly pending?: {
    readonly since: string;
    readonly last_error: { readonly message: string };
  } | null;
}

/** The facts about an edge's tenant set that readiness reads. */
export interface SetFacts {
  /** The live generation's number: 0 is the empty set a follower holds before its first one. */
  readonly generation: number;
  /** Tenants in the live set. */
  readonly tenants: number;
  /** The last rejection, when no later load superseded it. */
  readonly rejection?: { readonly at: number; readonly problems: number };
  /** The hub follower's status (remote mode), as `/v1/config` shows it. */
  readonly follower?: Record<string, unknown>;
  /** What a live set with no tenant reports. */
  readonly emptyTenants: EmptyTenants;
  /** What the set is called in the messages: `tenant set` (an edge), `view` (a door). */
  readonly noun?: string;
}

/**
 * Why an edge's (or a door's) set keeps it from serving; empty when it holds a verified set.
 *
 * @example
 * ```ts
 * import { setReasons } from "./readiness.ts";
 * setReasons({ generation: 0, tenants: 0, emptyTenants: "not_ready", follower: {} })[0].code;
 * // "no_set_yet"
 * setReasons({ generation: 3, tenants: 2, emptyTenants: "not_ready" }); // []
 * ```
 */
export function setReasons(facts: SetFacts): NotReadyReason[] {
  const noun = facts.noun ?? "tenant set";
  if (facts.generation > 0) {
    if (facts.tenants > 0 || facts.emptyTenants === "ready") return [];
    return [{
      code: "no_tenants",
      message: `The live ${noun} holds no tenant: every host is a miss`,
    }];
  }
  return missingSetReasons(noun, facts.rejection, (facts.follower ?? {}) as FollowerView);
}

/** A follower that holds no set: what it knows about why, else that it waits for a first one. */
function missingSetReasons(
  noun: string,
  rejection: SetFacts["rejection"],
  follower: FollowerView,
): NotReadyReason[] {
  const reasons: NotReadyReason[] = [];
  if (rejection) {
    reasons.push({
      code: "set_rejected",
      message: `The hub's ${noun} was refused here (${rejection.problems} problems; see ` +
        "/v1/config) and no earlier one is held",
      since: new Date(rejection.at).toISOString(),
    });
  }
  if (follower.unverified) {
    reasons.push({
      code: "set_rejected",
      message: `The hub's ${noun} did not check against its hash: ${follower.unverified.message}`,
      since: follower.unverified.at,
    });
  }
  if (follower.pending) {
    reasons.push({
      code: "set_pending",
      message:
        `The hub's ${noun} waits for the cache folder: ${follower.pending.last_error.message}`,
      since: follower.pending.since,
    });
  }
  if (follower.unreachable_since) {
    const why = follower.last_error?.message;
    reasons.push({
      code: "hub_unreachable",
      message: `No ${noun} held, and the hub has not answered since ${follower.unreachable_since}` +
        (why ? `: ${why}` : ""),
      since: follower.unreachable_since,
    });
  }
  if (reasons.length > 0) return reasons;
  return [{
    code: "no_set_yet",
    message: `No verified ${noun} yet: none was cached, and the hub's first one has not arrived`,
  }];
}

/** What an edge's readiness reads: its lifecycle, its lanes' workers, its tenant set. */
export interface EdgeFacts {
  /** A drain has begun. */
  readonly draining: boolean;
  /** Every listener is bound, checked and armed (the lifecycle's `ready`). */
  readonly armed: boolean;
  /** The lanes with no live request worker. */
  readonly down: readonly LaneWorkers[];
  readonly set: SetFacts;
}

/**
 * Why an edge is not ready, most pressing first; empty when it is ready. A draining edge gives
 * that reason alone: it is going away, and nothing else is worth fixing.
 *
 * @example
 * ```ts
 * import { edgeReasons } from "./readiness.ts";
 * const set = { generation: 1, tenants: 1, emptyTenants: "not_ready" } as const;
 * edgeReasons({ draining: false, armed: true, down: [], set }); // []
 * edgeReasons({ draining: true, armed: false, down: [], set })[0].code; // "draining"
 * ```
 */
export function edgeReasons(facts: EdgeFacts): NotReadyReason[] {
  if (facts.draining) {
    return [{ code: "draining", message: "Draining: the edge is shutting down" }];
  }
  const reasons: NotReadyReason[] = [];
  if (!facts.armed) reasons.push({ code: "booting", message: "The listeners are not armed yet" });
  if (facts.down.length > 0) {
    reasons.push({ code: "lane_down", message: facts.down.map(describeDown).join("; ") });
  }
  reasons.push(...setReasons(facts.set));
  return reasons;
}

/**
 * The `/readyz` answer: 200 `{"ready":true}`, or 503 with every reason. The body keeps the
 * envelope earlier versions answered — `{"error":{"code","message","request_id"}}`, the code
 * `draining`, `lane_down` or `not_ready` by the first reason — and adds `error.reasons`; it is
 * built here rather than from the client-facing error replies, because it is read by the operator
 * of a loopback listener, not by a client.
 *
 * @param reasons why not ready, most pressing first; none means ready
 * @param requestId the request id to echo
 * @param extra further fields of the 503 body (e.g. `lanes_down`)
 */
export function readinessReply(
  reasons: readonly NotReadyReason[],
  requestId: string,
  extra: Record<string, unknown> = {},
): Reply {
  const json = { "content-type": "application/json" };
  if (reasons.length === 0) return { status: 200, headers: json, body: '{"ready":true}' };
  const first = reasons[0];
  const kind = first.code === "draining" || first.code === "lane_down" ? first.code : "not_ready";
  const error = { code: kind, message: first.message, request_id: requestId, reasons };
  return {
    status: 503,
    headers: json,
    body: JSON.stringify({ error, ...extra }),
    failure: kind,
  };
}
