/**
 * The WAF policy: {@link inspect} over the path, the query and the headers the tenant lists. It
 * runs last of the checks because it is the dearest — up to four decoded variants of each
 * location matched against every rule (`bench/waf_bench.ts`) — so a client the cheaper checks
 * already refuse costs it nothing. Kept apart from `waf.ts`, which is the detection itself and
 * knows nothing of requests, modes or replies.
 *
 * @module
 */
import { failureReply } from "../request/errors.ts";
import type {
  ActivePolicy,
  PolicyCheck,
  PolicyMode,
  PolicyRequest,
  Refusal,
} from "./policy_check.ts";
import { inspect, type WafOptions } from "./waf.ts";

/** The WAF policy: which detections run, on which headers. */
export class WafCheck implements PolicyCheck {
  readonly phase = "waf";
  readonly mode: PolicyMode;
  readonly options: WafOptions;

  /** @param policy the resolved `waf` section */
  constructor(policy: ActivePolicy<"waf">) {
    this.mode = policy.mode;
    this.options = {
      sqli: policy.sqli,
      xss: policy.xss,
      traversal: policy.traversal,
      headers: policy.headers.map((h) => h.toLowerCase()),
    };
  }

  /** Refuses a request with a finding, naming the detection, where, and the rule. */
  check(request: PolicyRequest): Refusal | undefined {
    const head = request.context.head;
    const finding = inspect({
      path: head.path,
      query: head.query,
      header: (name) => request.header(name),
    }, this.options);
    if (!finding) return undefined;
    return {
      reply: failureReply("blocked", request.context.requestId),
      reason: `${finding.detection} in ${finding.location} (${finding.rule})`,
    };
  }
}
