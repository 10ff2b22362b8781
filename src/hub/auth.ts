/**
 * How a node proves who it is to the hub: a client certificate chained to the hub's client CA whose
 * CN is the node id (mutual TLS; the TLS layer has already refused any other chain), or — where the
 * hub has no TLS — a bearer token equal to the contents of `<tokens_dir>/<node_id>.token`, compared
 * in constant time. An unknown node and a wrong token get the same answer.
 *
 * @module
 */
import { timingSafeEqual } from "node:crypto";
import type { IncomingMessage } from "node:http";
import { join } from "node:path";
import type { TLSSocket } from "node:tls";

/** The outcome of authenticating one request. */
export type AuthResult =
  | { readonly ok: true }
  | {
    readonly ok: false;
    readonly status: 401 | 403;
    readonly code: string;
    readonly message: string;
  };

/** Authenticates a request that says it comes from `nodeId`. */
export type NodeAuthenticator = (request: IncomingMessage, nodeId: string) => Promise<AuthResult>;

/** A node id as a file name may carry it (the schema's rule for `node_id`). */
export const NODE_ID = /^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$/;

const REFUSED: AuthResult = {
  ok: false,
  status: 401,
  code: "unauthenticated",
  message: "The node could not be authenticated",
};

/** Mutual TLS: the peer certificate's CN must be the node id. */
export function certificateAuth(): NodeAuthenticator {
  return (request, nodeId) => {
    const socket = request.socket as TLSSocket;
    if (!socket.authorized) return Promise.resolve(REFUSED);
    const cn = socket.getPeerCertificate()?.subject?.CN;
    const name = Array.isArray(cn) ? cn[0] : cn;
    if (name !== nodeId) {
      return Promise.resolve({
        ok: false,
        status: 403,
        code: "wrong_node",
        message: "The client certificate was issued to another node",
      });
    }
    return Promise.resolve({ ok: true });
  };
}

/** Token files: `Authorization: Bearer <token>` must equal `<dir>/<node_id>.token` (trimmed). */
export function tokenAuth(dir: string): NodeAuthenticator {
  return async (request, nodeId) => {
    const header = request.headers.authorization ?? "";
    const match = /^Bearer ([\x21-\x7e]{1,1024})$/.exec(header);
    let expected = "";
    try {
      expected = (await Deno.readTextFile(join(dir, `${nodeId}.token`))).trim();
    } catch {
      // An unknown node: still compare, so timing says nothing about which nodes exist.
    }
    const ok = await constantTimeEqual(match?.[1] ?? "", expected) && expected.length > 0 &&
      match !== null;
    return ok ? { ok: true } : REFUSED;
  };
}

/** Compares two secrets in constant time (over their SHA-256 digests, so lengths do not leak). */
export async function constantTimeEqual(a: string, b: string): Promise<boolean> {
  const encoder = new TextEncoder();
  const [da, db] = await Promise.all([
    crypto.subtle.digest("SHA-256", encoder.encode(a)),
    crypto.subtle.digest("SHA-256", encoder.encode(b)),
  ]);
  return timingSafeEqual(new Uint8Array(da), new Uint8Array(db));
}
