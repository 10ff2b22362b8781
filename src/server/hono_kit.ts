/**
 * What the operator apps (the hub's listeners, `local_health`) share on top of Hono: a route
 * declared with the methods it takes, so every other method gets one answer with `Allow` (RFC 9110
 * §15.5.6: a 405 must list what the route takes); queries checked by a valibot schema; and a
 * refusal that names the field that failed.
 *
 * @module
 */
import type { Env, Handler, Hono, MiddlewareHandler } from "hono";
import { validator } from "hono/validator";
import * as v from "valibot";
import { type FailureKind, failureReply } from "../request/errors.ts";
import type { Reply } from "../request/reply.ts";
import { replyResponse } from "./hono_adapter.ts";

/** What every operator app is handed per request: the request's id, for its envelopes. */
export interface OperatorEnv extends Env {
  Bindings: { readonly requestId: string };
}

/** One step of a route's chain: a middleware, or the handler that ends it. */
export type RouteStep<E extends OperatorEnv> = MiddlewareHandler<E> | Handler<E>;

/** The methods a route takes, each with its chain of middleware and handler. */
export type MethodTable<E extends OperatorEnv> = Partial<
  Record<"GET" | "POST", readonly RouteStep<E>[]>
>;

/** What a route answers to a method it does not take, given what it takes. */
export type WrongMethod = (requestId: string, allow: string) => Reply;

/**
 * Declares `path` on `app` with the methods in `table` (GET also answers HEAD); any other method is
 * answered by `wrong`.
 */
export function declareRoute<E extends OperatorEnv>(
  app: Hono<E>,
  path: string,
  table: MethodTable<E>,
  wrong: WrongMethod,
): void {
  const allow: string[] = [];
  for (const [method, chain] of Object.entries(table)) {
    // deno-lint-ignore no-explicit-any
    (app.on as any)(method, path, ...chain!);
    allow.push(...(method === "GET" ? ["GET", "HEAD"] : [method]));
  }
  const allowed = allow.join(", ");
  app.all(path, function wrongMethod(c) {
    return replyResponse(wrong(c.env.requestId, allowed));
  });
}

/** The hub's answer to a method a route does not take: 405 `method_not_allowed` with `Allow`. */
export function methodNotAllowed(requestId: string, allow: string): Reply {
  return failureReply("method_not_allowed", requestId, { headers: { allow } });
}

/**
 * A failure whose envelope also names the request field that caused it:
 * `{"error":{"code","message","request_id","field"}}`.
 *
 * @example
 * ```ts
 * import { fieldFailure } from "./hono_kit.ts";
 * const reply = fieldFailure("bad_node_id", "req-1", "node_id");
 * JSON.parse(reply.body as string).error.field; // "node_id"
 * ```
 */
export function fieldFailure(kind: FailureKind, requestId: string, field: string): Reply {
  const reply = failureReply(kind, requestId);
  const envelope = JSON.parse(reply.body as string);
  envelope.error.field = field;
  return { ...reply, body: JSON.stringify(envelope) };
}

/** The dotted name of the field a valibot issue is about (`csr`, `nodes.0`), or "body". */
export function fieldOf(issue: v.BaseIssue<unknown> | undefined, whole = "body"): string {
  const path = issue?.path?.map((item) => String(item.key)) ?? [];
  return path.length > 0 ? path.join(".") : whole;
}

/**
 * Checks the query against `schema` (a value repeated in the query is an array, so it fails a
 * string field); the first failing field is refused with the kind `kindOf` gives it.
 *
 * @param schema what the query must be
 * @param kindOf the failure kind for a field (e.g. `bad_node_id` for `node_id`)
 */
export function validQuery<E extends OperatorEnv, S extends v.GenericSchema>(
  schema: S,
  kindOf: (field: string) => FailureKind,
): MiddlewareHandler<E> {
  return validator("query", function checkQuery(value, c) {
    const result = v.safeParse(schema, value);
    if (result.success) return result.output;
    const field = fieldOf(result.issues?.[0], "query");
    return replyResponse(fieldFailure(kindOf(field), c.env.requestId, field));
  }) as unknown as MiddlewareHandler<E>;
}
