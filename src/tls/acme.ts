/**
 * ACME http-01 challenges (RFC 8555 §8.3): `GET /.well-known/acme-challenge/<token>` answered with
 * the key authorization an ACME client wrote to `<challenge_dir>/<token>`. Tokens are base64url
 * (RFC 8555 §8.1), so a token can never name a path outside the folder; and the file is read rooted
 * in the folder (config/rooted_read.ts), so a challenge file that is a symlink out of it, or not a
 * regular file, is not served (the request is answered as if there were no challenge).
 *
 * @module
 */
import { readRooted } from "../config/rooted_read.ts";
import type { Reply } from "../request/reply.ts";

const PREFIX = "/.well-known/acme-challenge/";
const TOKEN = /^[A-Za-z0-9_-]{1,256}$/;
/** A key authorization is a token, a dot and a thumbprint: under 400 bytes. */
const MAX_CHALLENGE_BYTES = 4096;

/**
 * The challenge reply for `path`, or undefined when `path` is not a challenge request.
 *
 * @param path the request path
 * @param challengeDir where the ACME client writes key authorizations
 */
export async function acmeChallenge(
  path: string,
  challengeDir: string,
): Promise<Reply | undefined> {
  if (!path.startsWith(PREFIX)) return undefined;
  const token = path.slice(PREFIX.length);
  if (!TOKEN.test(token)) return undefined;
  try {
    const body = await readRooted(challengeDir, token, { maxBytes: MAX_CHALLENGE_BYTES });
    return { status: 200, headers: { "content-type": "application/octet-stream" }, body };
  } catch {
    return undefined;
  }
}

/** True for a path under `/.well-known/acme-challenge/`. */
export function isAcmePath(path: string): boolean {
  return path.startsWith(PREFIX);
}
