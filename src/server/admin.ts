/**
 * Authority to act through `local_health`: draining the edge and reloading its config or
 * certificates. Being a client of the listener is not enough — anything on the machine that can
 * open a loopback connection could otherwise stop the gateway. An acting request needs one of:
 *
 * - a bearer token (`Authorization: Bearer <token>`) equal to the one in `admin.token_file`
 *   (compared as SHA-256 digests in constant time; the file must be readable by its owner only).
 *   The lane's router (lane_router.ts) takes it from the header with Hono's `bearerAuth`, which
 *   reads only RFC 6750 tokens (`A-Z a-z 0-9 . _ ~ + / -`, then `=` padding): a token file holding
 *   anything else is refused at load, not left to fail every request;
 * - to have come over a Unix socket listener: the gateway makes its socket files `0600`, so only
 *   the gateway's own user (or root) can connect at all — the peer's credentials, as the file
 *   system checks them.
 *
 * Reading endpoints (`/healthz`, `/v1/ledger`, `/metrics`, …) stay open to the listener's clients.
 *
 * @module
 */
import { createHash, timingSafeEqual } from "node:crypto";
import { readNamedFile } from "../config/rooted_read.ts";

/** A bearer token as RFC 6750 §2.1 spells it (`b64token`). */
const BEARER_TOKEN = /^[A-Za-z0-9._~+/-]+=*$/;

/** A token file is a secret: owner-only, inside its folder, small. */
const SECRET = { secret: true, maxBytes: 4096 } as const;

/** The admin credential of one edge. */
export class AdminCredential {
  readonly #digest?: Uint8Array;
  /** The realm a refusal's `Bearer` challenge names (`admin.realm`); absent: none. */
  readonly realm?: string;

  private constructor(digest?: Uint8Array, realm?: string) {
    this.#digest = digest;
    this.realm = realm;
  }

  /** No token: only Unix socket clients may act. */
  static none(realm?: string): AdminCredential {
    return new AdminCredential(undefined, realm);
  }

  /**
   * Reads the token from `file`: trimmed, at least 16 characters, and the file readable by its
   * owner only.
   *
   * @throws {Error} naming the file and what is wrong with it (never its content)
   */
  static async load(file: string, realm?: string): Promise<AdminCredential> {
    const token = (await readNamedFile(file, "admin.token_file", SECRET)).trim();
    if (token.length < 16 || !BEARER_TOKEN.test(token)) {
      throw new Error(
        `admin.token_file ${file} must hold one token of at least 16 characters, each one of ` +
          "A-Z a-z 0-9 . _ ~ + / - (then = padding), as a bearer token is spelt (RFC 6750)",
      );
    }
    return new AdminCredential(digest(token), realm);
  }

  /** True when a token is configured. */
  get hasToken(): boolean {
    return this.#digest !== undefined;
  }

  /**
   * Whether `token` (taken from `Authorization: Bearer`) is the admin token; false without one.
   * The same work for any token of a given length.
   */
  permitsToken(token: string): boolean {
    if (!this.#digest) return false;
    return timingSafeEqual(digest(token), this.#digest);
  }

  /**
   * Whether a request may act.
   *
   * @param peer the direct peer's address ("" on a Unix socket)
   * @param authorization the request's `Authorization` header
   */
  permits(peer: string, authorization: string | undefined): boolean {
    if (peer === "") return true;
    if (!this.#digest || authorization === undefined) return false;
    const match = /^Bearer +(\S+) *$/i.exec(authorization);
    if (!match) return false;
    return timingSafeEqual(digest(match[1]), this.#digest);
  }
}

function digest(token: string): Uint8Array {
  return new Uint8Array(createHash("sha256").update(token).digest());
}
