/**
 * The `local_health` lane's allowlist as a Hono app: the routes the config kept, each with its
 * methods; the acting ones (drain, reloads) behind the admin credential (admin.ts) through Hono's
 * `bearerAuth`, which a Unix socket client skips (the socket file's mode already said who it is).
 *
 * What stays the lane's and not Hono's: the request reaches the router admitted by the ledger and
 * with its head checked (the pipeline's `admit` and `head` phases), routes by its canonical path,
 * and a path or method the allowlist does not pair is `route_not_allowed` (404), counted as a
 * denial like on every lane — not 405: what a protected lane answers to anything off its list is
 * one answer (proofs/p4_route_scope_test.ts). Each handler's {@link Reply} is the lane's answer
 * as before, written by the lane's own writer.
 *
 * A refusal's challenge is `WWW-Authenticate: Bearer`, with `realm="<admin.realm>"` only where the
 * operator named one (RFC 6750 §3 makes the realm optional): a default realm would name the
 * software to whoever knocks.
 *
 * @module
 */
import { Hono, type MiddlewareHandler } from "hono";
import { bearerAuth } from "hono/bearer-auth";
import { HTTPException } from "hono/http-exception";
import type { RequestContext } from "../request/context.ts";
import { failureReply } from "../request/errors.ts";
import type { Reply } from "../request/reply.ts";
import type { AdminCredential } from "./admin.ts";
import { replyOf, replyResponse, requestOf } from "./hono_adapter.ts";
import { declareRoute, type MethodTable, type OperatorEnv } from "./hono_kit.ts";

/** One route of a lane, as the lane declares it (src/pipeline/lane_table.ts). */
export interface RoutedPath<S> {
  readonly path: string;
  readonly methods: readonly string[];
  readonly handle: (context: RequestContext, services: S) => Reply | Promise<Reply>;
}

/** What the lane's app is handed per request. */
interface LaneEnv<S> extends OperatorEnv {
  Bindings: { readonly requestId: string; readonly context: RequestContext; readonly services: S };
}

/** How the router finds what it needs. */
export interface LaneRouterOptions<S> {
  /** The paths that act on the gateway (they need the admin credential). */
  readonly acting: ReadonlySet<string>;
  /** The edge's admin credential. */
  readonly credential: (services: S) => AdminCredential;
}

/**
 * Builds the router of a lane's kept routes.
 *
 * @returns the handler the allowlist phase calls for every request of the lane
 */
export function laneRouter<S>(
  routes: readonly RoutedPath<S>[],
  options: LaneRouterOptions<S>,
): (context: RequestContext, services: S) => Promise<Reply> {
  const app = new Hono<LaneEnv<S>>();
  const admin = adminCredential<S>(options.credential);
  for (const route of routes) {
    const answer = function answer(c: { env: LaneEnv<S>["Bindings"] }) {
      return Promise.resolve(route.handle(c.env.context, c.env.services)).then(replyResponse);
    };
    const chain = options.acting.has(route.path) ? [admin, answer] : [answer];
    const table: MethodTable<LaneEnv<S>> = {};
    for (const method of route.methods) {
      if (method === "GET" || method === "POST") table[method] = chain;
    }
    declareRoute(
      app,
      route.path,
      table,
      (requestId) => failureReply("route_not_allowed", requestId),
    );
  }
  app.notFound((c) => replyResponse(failureReply("route_not_allowed", c.env.requestId)));
  app.onError((error) => {
    if (error instanceof HTTPException) return error.getResponse();
    throw error; // the runner answers `internal`
  });
  return async function routeLane(context, services) {
    const request = requestOf(context.request, context.head.path + context.head.query);
    const response = await app.fetch(request, { requestId: context.requestId, context, services });
    return (await replyOf(response))!;
  };
}

/** The admin credential as middleware: a Unix socket client, or `Authorization: Bearer <token>`. */
function adminCredential<S>(
  credential: (services: S) => AdminCredential,
): MiddlewareHandler<LaneEnv<S>> {
  const refused = (c: { env: LaneEnv<S>["Bindings"] }) => {
    const reply = failureReply("admin_credential_required", c.env.requestId, {
      headers: { "www-authenticate": bearerChallenge(credential(c.env.services).realm) },
    });
    return new Response(reply.body as string, { status: reply.status, headers: reply.headers });
  };
  const bearer = bearerAuth<LaneEnv<S>>({
    verifyToken: (token, c) => credential(c.env.services).permitsToken(token),
    noAuthenticationHeader: { message: refused },
    invalidAuthenticationHeader: { message: refused },
    invalidToken: { message: refused },
  });
  return async function adminCredential(c, next) {
    if (c.env.context.peer === "") return await next();
    return await bearer(c, next);
  };
}

/**
 * A `Bearer` challenge (RFC 6750 §3): with `realm="<realm>"` when one is set (config checks it
 * holds no `"` or `\`), else the scheme alone.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { bearerChallenge } from "./lane_router.ts";
 * assert.equal(bearerChallenge(undefined), "Bearer");
 * assert.equal(bearerChallenge("ops"), 'Bearer realm="ops"');
 * ```
 */
export function bearerChallenge(realm: string | undefined): string {
  return realm === undefined ? "Bearer" : `Bearer realm="${realm}"`;
}
