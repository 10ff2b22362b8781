/**
 * Route actions the gateway answers itself: `respond` (fixed status, headers, body or file) and
 * `redirect` (a Location built from the route; when the configured location names no path, the
 * request's path and query are kept). A body file is opened through the rooted read at every
 * request (body_file.ts), never trusted from load.
 *
 * @module
 */
import type { Reply } from "../request/reply.ts";
import type { Backend } from "../egress/destinations.ts";
import { bodyFileReply } from "./body_file.ts";
import type { Rewriter } from "./rewrite.ts";
import type { RequestHead } from "../request/head.ts";

/** The proxy action: where to send the request and how hard to try. */
export interface ProxyAction {
  readonly kind: "proxy";
  readonly backends: readonly Backend[];
  readonly rewrite?: Rewriter;
  /** Attempts in all for retry-eligible methods. */
  readonly attempts: number;
  readonly retryPost: boolean;
  /** Per attempt: the most time to a usable connection (default: the egress's connect timeout). */
  readonly connectMs?: number;
  /** Per attempt: the most time from the request written to the response head. */
  readonly firstByteMs?: number;
  /** For the injected context headers. */
  readonly tenant: string;
  readonly route: string;
}

/** An action the gateway answers itself. */
export type LocalAction = Exclude<Action, ProxyAction>;

/** The respond action: a fixed status and headers, with a fixed body or a body file. */
export interface RespondAction {
  readonly kind: "respond";
  readonly status: number;
  readonly headers: Readonly<Record<string, string>>;
  readonly body: string;
  /** A file (absolute path, inside `root`) streamed as the body instead of `body`. */
  readonly file?: string;
  /** The folder `file` must stay inside at every read: the tenants folder. Set with `file`. */
  readonly root?: string;
}

/** A compiled route action. */
export type Action =
  | ProxyAction
  | RespondAction
  | {
    readonly kind: "redirect";
    readonly status: number;
    readonly location: string;
    /** The location is scheme and authority only: append the request's path and query. */
    readonly keepPath: boolean;
  };

/** True when `location` is `scheme://authority` with nothing after it. */
export function namesNoPath(location: string): boolean {
  return /^https?:\/\/[^/?#]+$/i.test(location);
}

/** The `{name}` placeholders a location uses. */
export function placeholders(location: string): string[] {
  return [...location.matchAll(/\{([A-Za-z_][A-Za-z0-9_]*)\}/g)].map((m) => m[1]);
}

/**
 * Runs an action. A respond action with a body file answers once the file is open (or throws the
 * rooted read's refusal, which the lane server logs and answers with a 500 envelope).
 *
 * @param action the route's action
 * @param head the request head
 * @param params the route's template parameters
 * @example
 * ```ts
 * import { runAction } from "./actions.ts";
 * const reply = runAction(
 *   { kind: "redirect", status: 308, location: "https://new.example", keepPath: true },
 *   { method: "GET", path: "/a/b", query: "?x=1" },
 *   {},
 * );
 * (reply as { headers: Record<string, string> }).headers.location; // "https://new.example/a/b?x=1"
 * ```
 */
export function runAction(
  action: LocalAction,
  head: Pick<RequestHead, "method" | "path" | "query">,
  params: Readonly<Record<string, string>>,
): Reply | Promise<Reply> {
  if (action.kind === "respond") {
    if (action.file !== undefined) return bodyFileReply(action, head.method);
    return { status: action.status, headers: action.headers, body: action.body };
  }
  let location = action.location;
  if (location.includes("{")) {
    location = location.replace(
      /\{([A-Za-z_][A-Za-z0-9_]*)\}/g,
      (_, name: string) => encodeURIComponent(params[name] ?? ""),
    );
  }
  if (action.keepPath) location += head.path + head.query;
  return { status: action.status, headers: { location }, body: "" };
}
