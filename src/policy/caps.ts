/**
 * The caps policy: header count, header bytes, target length and declared body, judged from the
 * head alone — so an oversized request is refused before any of its body is read or anything
 * reaches the upstream. A body sent without a declared length is held to the same limit while it
 * streams: the check leaves `maxBodyBytes` on the trail for the proxy when the policy is on.
 *
 * @module
 */
import { type FailureKind, failureReply } from "../request/errors.ts";
import type { RequestContext } from "../request/context.ts";
import type {
  ActivePolicy,
  PolicyCheck,
  PolicyMode,
  PolicyRequest,
  PolicyTrail,
  Refusal,
} from "./policy_check.ts";

/** The caps policy's limits and its check. */
export class CapsCheck implements PolicyCheck {
  readonly phase = "caps";
  readonly mode: PolicyMode;
  readonly maxHeaders: number;
  readonly maxHeaderBytes: number;
  readonly maxUrlBytes: number;
  readonly maxBodyBytes: number;

  /** @param policy the resolved `caps` section */
  constructor(policy: ActivePolicy<"caps">) {
    this.mode = policy.mode;
    this.maxHeaders = policy.max_headers;
    this.maxHeaderBytes = policy.max_header_bytes;
    this.maxUrlBytes = policy.max_url_bytes;
    this.maxBodyBytes = policy.max_body_bytes;
  }

  /** Refuses the first cap the head exceeds; else, when on, sets the streaming body limit. */
  check(request: PolicyRequest, trail: PolicyTrail): Refusal | undefined {
    const over = capExceeded(request.context, this);
    if (over) return { reply: failureReply(over[0], request.context.requestId), reason: over[1] };
    if (this.mode === "on") trail.maxBodyBytes = this.maxBodyBytes;
    return undefined;
  }
}

/** The first cap the request's head exceeds: the failure and the reason, or undefined. */
function capExceeded(context: RequestContext, caps: CapsCheck): [FailureKind, string] | undefined {
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
