/**
 * Request ids: an inbound `X-Request-Id` is kept when it is printable ASCII of at most 128 bytes;
 * anything else (absent, empty, too long, control characters) is replaced by a fresh UUID.
 *
 * @module
 */

const VALID = /^[\x21-\x7e](?:[\x20-\x7e]{0,126}[\x21-\x7e])?$/;

/**
 * Keeps a valid inbound request id or mints one.
 *
 * @param inbound the inbound header value(s)
 * @example
 * ```ts
 * import { requestIdFor } from "./request_id.ts";
 * requestIdFor("abc-123"); // "abc-123"
 * requestIdFor("bad\u0001id").length; // 36 (a fresh UUID)
 * ```
 */
export function requestIdFor(inbound: string | string[] | undefined): string {
  if (typeof inbound === "string" && VALID.test(inbound)) return inbound;
  return crypto.randomUUID();
}
