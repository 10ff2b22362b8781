/**
 * The hub's `/metrics` page on its health listener (loopback, like `/v1/config`): Prometheus text
 * (observe/exposition.ts) of what the hub enforces — today the CRL's state (enforced_crl.ts), so a
 * hub serving with its last good copy of a damaged CRL shows on a dashboard and an alert, not
 * only in its log.
 *
 * @module
 */
import { expose, type Family } from "../observe/exposition.ts";
import type { Reply } from "../request/reply.ts";

/** The metrics page of `families`, as the edge serves its own (text format 0.0.4). */
export function hubMetricsReply(families: readonly Family[]): Reply {
  return {
    status: 200,
    headers: { "content-type": "text/plain; version=0.0.4; charset=utf-8" },
    body: expose(families),
  };
}
