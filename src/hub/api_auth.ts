/**
 * How the hub's Hono apps authenticate a node, as middleware run after the node id was checked: a
 * token hub through Hono's `bearerAuth`, whose `verifyToken` asks the token book (auth.ts) — the
 * same digests, the same work for a known and an unknown node, and a removed token still told
 * `node_revoked`; a mutual-TLS listener by the certificate's one CN. Either way the outcome is
 * kept for the held poll (`c.var.auth`), and every refusal is an envelope of the failure table.
 *
 * What `bearerAuth` changes at the edge of the old check: no `Authorization` header, or one that is
 * no `Bearer <b64token>` (RFC 6750 §2.1), is refused before the book is asked — neither says
 * anything about which nodes exist — and refusals carry `WWW-Authenticate` (RFC 6750 §3): `Bearer`,
 * with no realm, so the challenge does not name the software. Since the gate below, only a caller
 * that passed it reaches `bearerAuth`, so the plain challenge (sent when no header came) reaches
 * nobody — which is why the hub has no realm setting; a revoked token's 403 carries
 * `Bearer error="invalid_token"`.
 *
 * Before any of that — before a route is matched, a method judged or a query read — the api asks
 * whether the caller belongs to the fleet at all ({@link outsiderGate}): a client certificate that
 * chains to the client CA, or a bearer token (or a revoked one: only its holder can present it) of
 * the node the query names. Anyone else gets one reply, the table's `route_not_allowed` (404, as
 * `errors` renders it), whatever the path, method or query, so the route set, its `Allow` sets and
 * the order of the checks say nothing to a prober (issue 34). The one exception is the request an
 * unregistered node must make: `POST /v1/nodes/register` when the fleet CA registers nodes.
 *
 * @module
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import type { TLSSocket } from "node:tls";
import type { Context, MiddlewareHandler } from "hono";
import { bearerAuth } from "hono/bearer-auth";
import { failureReply } from "../request/errors.ts";
import { replyResponse } from "../server/hono_adapter.ts";
import { bearerChallenge } from "../server/lane_router.ts";
import type { OperatorEnv } from "../server/hono_kit.ts";
import type { AuthFailure, AuthResult, NodeAuthenticator, TokenAuthenticator } from "./auth.ts";

/** What an unregistered node must reach: registration, when the fleet CA registers nodes. */
export const REGISTER = { method: "POST", path: "/v1/nodes/register" } as const;

/** What the hub's apps are handed per request, and what their middleware note on the way. */
export interface HubEnv extends OperatorEnv {
  Bindings: {
    readonly requestId: string;
    readonly incoming: IncomingMessage;
    readonly outgoing: ServerResponse;
  };
  Variables: {
    /** The node id the query named, once checked. */
    nodeId: string;
    /** How the node authenticated, once it has. */
    auth: AuthResult;
    /** The JSON body, once read and checked against its schema. */
    body: unknown;
  };
}

/**
 * The middleware that authenticates `c.var.nodeId` the way `authenticate` does: bearer tokens
 * through `bearerAuth`, anything else (a certificate) by calling it. Its challenge names no realm,
 * and no caller without a credential reaches it (the outsider gate answers them first).
 */
export function nodeAuth(authenticate: NodeAuthenticator): MiddlewareHandler<HubEnv> {
  if ("verify" in authenticate) return bearerNodeAuth(authenticate as TokenAuthenticator);
  return async function certificateNodeAuth(c, next) {
    const result = await authenticate(c.env.incoming, c.var.nodeId);
    if (!result.ok) return replyResponse(failureReply(result.kind, c.env.requestId));
    c.set("auth", result);
    await next();
  };
}

/** Hono's bearer middleware over the token book, answering with the failure table's envelopes. */
function bearerNodeAuth(tokens: TokenAuthenticator): MiddlewareHandler<HubEnv> {
  const refuse = (kind: AuthFailure) => (c: Context<HubEnv>) => envelopeResponse(kind, c);
  return bearerAuth<HubEnv>({
    verifyToken: async function verifyNodeToken(token, c) {
      const result = await tokens.verify(c.var.nodeId, token);
      c.set("auth", result);
      return result.ok;
    },
    noAuthenticationHeader: {
      message: refuse("unauthenticated"),
      wwwAuthenticateHeader: bearerChallenge(undefined),
    },
    invalidAuthenticationHeader: { message: refuse("unauthenticated") },
    invalidToken: {
      message: (c) => {
        const auth = c.var.auth;
        return envelopeResponse(auth && !auth.ok ? auth.kind : "unauthenticated", c);
      },
    },
  });
}

/** A refusal as a Response with its body (`bearerAuth` rebuilds what a message function gives). */
function envelopeResponse(kind: AuthFailure, c: Context<HubEnv>): Response {
  const reply = failureReply(kind, c.env.requestId);
  // The table's envelopes are text.
  return new Response(reply.body as string, { status: reply.status, headers: reply.headers });
}

/**
 * The api's first middleware: a caller that is no member of the fleet gets `route_not_allowed`
 * whatever it asked, except `open` (registration) when given. A member is decided the way its
 * listener authenticates: a certificate that chains to the client CA (the TLS layer's verdict), or
 * a token the book accepts for the query's `node_id` — or one it remembers as that node's revoked
 * token — after the same work for any path, node or token.
 *
 * @param authenticate how this listener authenticates a node
 * @param open the one request let through unauthenticated, if any
 */
export function outsiderGate(
  authenticate: NodeAuthenticator,
  open?: typeof REGISTER,
): MiddlewareHandler<HubEnv> {
  return async function outsiderGate(c, next) {
    const member = await fleetMember(authenticate, c);
    const opened = open !== undefined && c.req.method === open.method && c.req.path === open.path;
    if (!member && !opened) {
      return replyResponse(failureReply("route_not_allowed", c.env.requestId));
    }
    await next();
  };
}

/** A bearer header as `bearerAuth` reads one: the scheme in any case, then one RFC 6750 token. */
const BEARER_HEADER = /^bearer +([A-Za-z0-9._~+/-]+=*)$/i;

/** Whether the caller proved it belongs to the fleet (see {@link outsiderGate}). */
async function fleetMember(authenticate: NodeAuthenticator, c: Context<HubEnv>): Promise<boolean> {
  if (!("verify" in authenticate)) {
    return (c.env.incoming.socket as TLSSocket).authorized === true;
  }
  const header = BEARER_HEADER.exec(c.req.header("authorization") ?? "");
  const tokens = authenticate as TokenAuthenticator;
  const result = await tokens.verify(c.req.query("node_id") ?? "", header?.[1] ?? "");
  return header !== null && (result.ok || result.kind === "node_revoked");
}
