/**
 * Replies on a plain-HTTP listener never carry `Strict-Transport-Security`: RFC 6797 §7.2 forbids
 * it over an insecure transport (a man in the middle could use it to pin a host to HTTPS, or strip
 * it). Whatever set it — the tenant's security headers, a `respond` route, an upstream — it is
 * dropped here, in the one place every reply passes.
 *
 * @module
 */
import type { Reply } from "../request/reply.ts";

const HSTS = "strict-transport-security";

/**
 * The reply without any Strict-Transport-Security field (the same object when it has none).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { withoutHsts } from "./plain_reply.ts";
 * const reply = { status: 200, rawHeaders: ["Strict-Transport-Security", "max-age=1", "A", "b"] };
 * assert.deepEqual(withoutHsts(reply).rawHeaders, ["A", "b"]);
 * ```
 */
export function withoutHsts(reply: Reply): Reply {
  const raw = reply.rawHeaders;
  if (raw) {
    let found = false;
    for (let i = 0; i < raw.length; i += 2) {
      if (raw[i].length === HSTS.length && raw[i].toLowerCase() === HSTS) found = true;
    }
    if (!found) return reply;
    const kept: string[] = [];
    for (let i = 0; i < raw.length; i += 2) {
      if (raw[i].toLowerCase() !== HSTS) kept.push(raw[i], raw[i + 1]);
    }
    return { ...reply, rawHeaders: kept };
  }
  const headers = reply.headers;
  if (!headers) return reply;
  let found = false;
  for (const name in headers) {
    if (name.length === HSTS.length && name.toLowerCase() === HSTS) found = true;
  }
  if (!found) return reply;
  const kept: Record<string, string> = {};
  for (const [name, value] of Object.entries(headers)) {
    if (name.toLowerCase() !== HSTS) kept[name] = value;
  }
  return { ...reply, headers: kept };
}
