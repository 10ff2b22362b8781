/**
 * The hub's listeners as Hono apps. `api` (and the `https_tunnel` endpoint's ordinary requests,
 * by client certificate whatever `api` uses): the config stream, the pool's view, the door stream
 * and enrolment — to members of the fleet only. `health` (loopback): `/healthz`, status, nodes and
 * reload. A route takes the methods it is declared with — any other is 405 with `Allow` — and an
 * unknown path is 404 `route_not_allowed`, from the failure table like every refusal.
 *
 * Why the api has no `/healthz`: it answered any prober `{"status":"ok"}` with a request id, one
 * more path that told the software apart; liveness is the health listener's.
 *
 * A caller that is no member of the fleet (api_auth.ts `outsiderGate`: no certificate chained to
 * the client CA, no token of the node it names) is answered 404 `route_not_allowed` before any
 * route, method or query is looked at, except `POST /v1/nodes/register` when the fleet CA
 * registers nodes. A member's request passes its checks in one order, each a middleware: the
 * query (a `node_id` that is no file name is `bad_node_id` before the node's credential is judged
 * — with a certificate; a token names its node through the query), the credential
 * (`api_auth.ts`: with the fleet CA, the node's standing before its serial), the `api.nodes`
 * allow-list, then what the route needs (a node the CA registered as a door for the door stream;
 * anything but a door — by registration or by `doors.nodes` — for the config set and the pool,
 * whatever `api.nodes` says: node_standing.ts). Bodies are JSON objects of at most 32 KiB read
 * from the request (json_body.ts), then checked by a valibot schema naming the field.
 *
 * @module
 */
import { Hono, type MiddlewareHandler } from "hono";
import { HTTPException } from "hono/http-exception";
import * as v from "valibot";
import { type FailureKind, failureReply } from "../request/errors.ts";
import { jsonReply, type Reply } from "../request/reply.ts";
import { noReply, replyOf, replyResponse, requestOf } from "../server/hono_adapter.ts";
import {
  declareRoute,
  fieldFailure,
  fieldOf,
  methodNotAllowed,
  validQuery,
} from "../server/hono_kit.ts";
import { type HubEnv, nodeAuth, outsiderGate, REGISTER } from "./api_auth.ts";
import { NODE_ID, type NodeAuthenticator } from "./auth.ts";
import { readJsonBody, RegisterBody, RenewBody } from "./enrolment.ts";
import { hubMetricsReply } from "./hub_metrics.ts";
import type { HubRoute } from "./listeners.ts";
import { DOOR_STREAM_PATH } from "./mirrors/service.ts";
import type { HubRoutes } from "./routes.ts";

/** A query that names a node. */
const NodeQuery = v.object({ node_id: v.pipe(v.string(), v.regex(NODE_ID)) });
/**
 * A poll of a stream: the node, the hash it serves, the hash of a set it received but does not
 * serve (`seen`, the config stream), and `wait=0` for an answer without a hold.
 */
const PollQuery = v.object({
  node_id: v.pipe(v.string(), v.regex(NODE_ID)),
  have: v.optional(v.string(), ""),
  seen: v.optional(v.string(), ""),
  wait: v.optional(v.string()),
});

/** `node_id` is refused as `bad_node_id` (the edge's client knows that kind); the rest as malformed. */
const queryKind = (field: string): FailureKind =>
  field === "node_id" ? "bad_node_id" : "bad_request";

/**
 * The api listener's app.
 *
 * @param routes the state and answers the routes call
 * @param authenticate how a node proves who it is on this listener
 */
export function hubApiApp(routes: HubRoutes, authenticate: NodeAuthenticator): Hono<HubEnv> {
  const app = operatorApp();
  const { enrolment, doors, pool, config } = routes.options;
  app.use(outsiderGate(authenticate, enrolment ? REGISTER : undefined));
  const named = (schema: typeof NodeQuery | typeof PollQuery) => [
    validQuery<HubEnv, typeof schema>(schema, queryKind),
    noteNode,
    nodeAuth(authenticate),
    allowedBy(config.api.nodes),
  ];
  declareRoute(app, "/v1/config/stream", {
    GET: [...named(PollQuery), notDoor(routes), function configPoll(c) {
      const query = {
        nodeId: c.var.nodeId,
        have: c.req.query("have") ?? "",
        seen: c.req.query("seen") ?? "",
        wait: c.req.query("wait"),
      };
      return held(routes.answerPoll(query, c.env.outgoing, heldBy(c)));
    }],
  }, methodNotAllowed);
  if (pool) {
    declareRoute(app, "/v1/pool", {
      GET: [...named(NodeQuery), notDoor(routes), () => send(routes.pool())],
    }, methodNotAllowed);
  }
  if (doors) {
    declareRoute(app, DOOR_STREAM_PATH, {
      GET: [...named(PollQuery), function doorPoll(c) {
        if (!routes.mayFollowDoors(c.var.nodeId)) {
          return refuse("node_not_allowed", c.env.requestId);
        }
        const url = new URL(c.req.url);
        return held(routes.answerDoor(doors, url, c.env.outgoing, heldBy(c)));
      }],
    }, methodNotAllowed);
  }
  if (enrolment) {
    declareRoute(app, REGISTER.path, {
      POST: [jsonBody(RegisterBody), async function register(c) {
        return send(
          await enrolment.register(
            c.var.body as v.InferOutput<typeof RegisterBody>,
            c.env.requestId,
          ),
        );
      }],
    }, methodNotAllowed);
    declareRoute(app, "/v1/nodes/renew", {
      POST: [...named(NodeQuery), jsonBody(RenewBody), async function renew(c) {
        const body = c.var.body as v.InferOutput<typeof RenewBody>;
        const presented = c.var.auth.ok ? c.var.auth.certificate : undefined;
        return send(await enrolment.renew(body, c.env.requestId, c.var.nodeId, presented));
      }],
    }, methodNotAllowed);
  }
  return app;
}

/** The health listener's app (loopback): `/healthz`, status, metrics, nodes, and reload on POST. */
export function hubHealthApp(routes: HubRoutes): Hono<HubEnv> {
  const app = operatorApp();
  declareRoute(
    app,
    "/healthz",
    { GET: [() => send(jsonReply({ status: "ok" }))] },
    methodNotAllowed,
  );
  declareRoute(
    app,
    "/v1/config",
    { GET: [() => send(jsonReply(routes.status()))] },
    methodNotAllowed,
  );
  declareRoute(app, "/metrics", {
    GET: [() => send(hubMetricsReply(routes.options.revocations.families()))],
  }, methodNotAllowed);
  declareRoute(app, "/v1/nodes", {
    GET: [() => send(jsonReply({ nodes: [...routes.nodes.values()] }))],
  }, methodNotAllowed);
  declareRoute(app, "/v1/config/reload", {
    POST: [async () => send(await routes.reload())],
  }, methodNotAllowed);
  return app;
}

/** A listener's route through `app`: the Reply it answered with, none when the client went. */
export function hubRoute(app: Hono<HubEnv>): HubRoute {
  return async function routeByHono(incoming, outgoing, requestId) {
    const response = await app.fetch(requestOf(incoming), { requestId, incoming, outgoing });
    return await replyOf(response);
  };
}

/** An app whose unknown paths are `route_not_allowed` and whose throws reach the listener. */
function operatorApp(): Hono<HubEnv> {
  const app = new Hono<HubEnv>();
  app.notFound((c) => refuse("route_not_allowed", c.env.requestId));
  app.onError((error) => {
    if (error instanceof HTTPException) return error.getResponse();
    throw error; // the listener answers `internal` and logs it
  });
  return app;
}

const send = (reply: Reply) => replyResponse(reply);
const refuse = (kind: FailureKind, requestId: string) => send(failureReply(kind, requestId));

/** Notes the checked `node_id` for the middleware after. */
const noteNode: MiddlewareHandler<HubEnv> = async function noteNode(c, next) {
  c.set("nodeId", c.req.query("node_id")!);
  await next();
};

/** Refuses a node `api.nodes` does not list (no list: every node). */
function allowedBy(nodes: readonly string[] | undefined): MiddlewareHandler<HubEnv> {
  return async function allowList(c, next) {
    if (nodes && !nodes.includes(c.var.nodeId)) return refuse("node_not_allowed", c.env.requestId);
    await next();
  };
}

/** A door never gets the tenant set (backends, onion addresses) or the pool. */
function notDoor(routes: HubRoutes): MiddlewareHandler<HubEnv> {
  return async function notDoor(c, next) {
    if (await routes.isDoor(c.var.nodeId)) return refuse("node_not_allowed", c.env.requestId);
    await next();
  };
}

/** Reads the body as one small JSON object and checks it against `schema`. */
function jsonBody(schema: v.GenericSchema): MiddlewareHandler<HubEnv> {
  return async function checkBody(c, next) {
    const raw = await readJsonBody(c.env.incoming);
    if (!raw) return refuse("payload_not_json", c.env.requestId);
    const result = v.safeParse(schema, raw);
    if (!result.success) {
      return send(fieldFailure("bad_request", c.env.requestId, fieldOf(result.issues?.[0])));
    }
    c.set("body", result.output);
    await next();
  };
}

/** What a held answer needs of the request: its id and how the node authenticated. */
function heldBy(c: { env: HubEnv["Bindings"]; var: { auth: HubEnv["Variables"]["auth"] } }) {
  return { requestId: c.env.requestId, auth: c.var.auth };
}

/** A held answer as a Response: none when the client went away. */
async function held(answer: Promise<Reply | undefined>): Promise<Response> {
  const reply = await answer;
  return reply ? send(reply) : noReply();
}
