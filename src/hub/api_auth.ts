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
 * with `realm="<api.realm>"` only where the operator named one, so the challenge does not name the
 * software.
 *
 * @module
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Context, MiddlewareHandler } from "hono";
import { bearerAuth } from "hono/bearer-auth";
import { failureReply } from "../request/errors.ts";
import { replyResponse } from "../server/hono_adapter.ts";
import { bearerChallenge } from "../server/lane_router.ts";
import type { OperatorEnv } from "../server/hono_kit.ts";
import type { AuthFailure, AuthResult, NodeAuthenticator, TokenAuthenticator } from "./auth.ts";

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
 * through `bearerAuth`, anything else (a certificate) by calling it.
 *
 * @param realm the realm of the bearer challenge (`api.realm`); absent: none
 */
export function nodeAuth(
  authenticate: NodeAuthenticator,
  realm?: string,
): MiddlewareHandler<HubEnv> {
  if ("verify" in authenticate) return bearerNodeAuth(authenticate as TokenAuthenticator, realm);
  return async function certificateNodeAuth(c, next) {
    const result = await authenticate(c.env.incoming, c.var.nodeId);
    if (!result.ok) return replyResponse(failureReply(result.kind, c.env.requestId));
    c.set("auth", result);
    await next();
  };
}

/** Hono's bearer middleware over the token book, answering with the failure table's envelopes. */
function bearerNodeAuth(
  tokens: TokenAuthenticator,
  realm: string | undefined,
): MiddlewareHandler<HubEnv> {
  const refuse = (kind: AuthFailure) => (c: Context<HubEnv>) => envelopeResponse(kind, c);
  return bearerAuth<HubEnv>({
    verifyToken: async function verifyNodeToken(token, c) {
      const result = await tokens.verify(c.var.nodeId, token);
      c.set("auth", result);
      return result.ok;
    },
    noAuthenticationHeader: {
      message: refuse("unauthenticated"),
      wwwAuthenticateHeader: bearerChallenge(realm),
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
