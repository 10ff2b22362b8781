/**
 * Per-tenant stream isolation (`egress.isolate_tenants`): every upstream SOCKS connection made for
 * a tenant authenticates with RFC 1929 credentials derived from that tenant, so a Tor instance
 * running with `IsolateSOCKSAuth` (the default for a `SocksPort`) never puts two tenants' streams
 * on one circuit, and a kept-alive upstream connection is never handed to another tenant (the
 * agents are per instance *and* tenant, see `socks_ways.ts`).
 *
 * The username is `t-` and the first 16 hex digits of SHA-256(salt ‖ lower-cased tenant host);
 * the password is the same text (RFC 1929 wants one; Tor compares both). The salt is 32 random
 * bytes made when the egress is made — per process, and per request worker — never read from
 * `observe.salt_file`: a salt that outlives the process would let whoever sees the SOCKS
 * usernames (the hub, its Tor pool) link one tenant's traffic across restarts, and the host is
 * never sent in the clear either way. The price is a new circuit per tenant after a restart and
 * per request worker, which isolation asks for anyway.
 *
 * `egress.socks` entries carry no credentials of their own, so there is nothing to combine: with
 * isolation on, the tenant's credentials are the only ones sent; with it off, none are.
 *
 * @module
 */
import { createHash } from "node:crypto";

/** RFC 1929 credentials for one tenant. */
export interface TenantCredentials {
  readonly username: string;
  readonly password: string;
}

/** How many tenant → credentials entries are memoised before the table is cleared. */
const MEMO_LIMIT = 10_000;

/**
 * Salted, memoised tenant credentials.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { TenantIsolation } from "./isolation.ts";
 * const isolation = new TenantIsolation(new Uint8Array(32));
 * const a = isolation.credentials("a.example");
 * assert.match(a.username, /^t-[0-9a-f]{16}$/);
 * assert.equal(isolation.credentials("A.EXAMPLE").username, a.username);
 * assert.notEqual(isolation.credentials("b.example").username, a.username);
 * ```
 */
export class TenantIsolation {
  readonly #salt: Uint8Array;
  readonly #memo = new Map<string, TenantCredentials>();

  /** @param salt the salt (default: 32 random bytes, this process's own) */
  constructor(salt: Uint8Array = crypto.getRandomValues(new Uint8Array(32))) {
    this.#salt = salt.slice();
  }

  /**
   * The credentials a tenant's upstream connections authenticate with.
   *
   * @param tenant the tenant's host (case does not matter)
   */
  credentials(tenant: string): TenantCredentials {
    const host = tenant.toLowerCase();
    const known = this.#memo.get(host);
    if (known) return known;
    const digest = createHash("sha256").update(this.#salt).update(host).digest("hex");
    const username = `t-${digest.slice(0, 16)}`;
    const credentials = { username, password: username };
    if (this.#memo.size >= MEMO_LIMIT) this.#memo.clear();
    this.#memo.set(host, credentials);
    return credentials;
  }
}
