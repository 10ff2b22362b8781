/**
 * The marks the gateway leaves on what it forwards — its Via entry and the headers that name the
 * tenant, the route and the request id to backends — resolved once at boot from
 * `forwarding` (config/forwarding_schema.ts), where the defaults and their reasons are: none of
 * them is written unless the operator named it, so by default no client or backend reads a
 * product name or a project-specific header name in a forwarded message.
 *
 * @module
 */
import { type BackendHeaders, foldName } from "../config/forwarding_schema.ts";

/** How forwarded messages are marked, as the proxy phase uses it. */
export interface Forwarding {
  /** The Via pseudonym per direction (`forwarding.via`); absent: no entry of the gateway's that way. */
  readonly via: { readonly backends?: string; readonly clients?: string };
  /** The names that carry tenant, route and request id to backends (`forwarding.backend_headers`). */
  readonly backendHeaders: BackendHeaders;
  /** Those names folded (lower case, "_" as "-"): the gateway's own, both ways. */
  readonly owned: ReadonlySet<string>;
  /** Lower-case client-address header names kept only from a trusted proxy. */
  readonly clientIpHeaders: ReadonlySet<string>;
}

/**
 * The proxy's view of the `forwarding` section.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { forwardingOf } from "./forwarding.ts";
 * const marks = forwardingOf({ via: {}, backendHeaders: { tenant: "X_Tenant" }, clientIpHeaders: [] });
 * assert.deepEqual([...marks.owned], ["x-tenant"]);
 * ```
 */
export function forwardingOf(config: {
  readonly via: Forwarding["via"];
  readonly backendHeaders: BackendHeaders;
  readonly clientIpHeaders: readonly string[];
}): Forwarding {
  const { tenant, route, requestId } = config.backendHeaders;
  const named = [tenant, route, requestId].filter((name) => name !== undefined);
  return {
    via: config.via,
    backendHeaders: config.backendHeaders,
    owned: new Set(named.map(foldName)),
    clientIpHeaders: new Set(config.clientIpHeaders),
  };
}

/**
 * Writes a message's Via list (RFC 9110 §7.6.3) with `1.1 <pseudonym>` appended; without a
 * pseudonym the list as it came, and no field at all when it came empty.
 */
export function appendVia(
  out: string[],
  via: readonly string[],
  pseudonym: string | undefined,
): void {
  let list = "";
  for (const value of via) {
    const trimmed = value.trim();
    if (trimmed !== "") list += list === "" ? trimmed : `, ${trimmed}`;
  }
  if (pseudonym !== undefined) list += list === "" ? `1.1 ${pseudonym}` : `, 1.1 ${pseudonym}`;
  if (list !== "") out.push("Via", list);
}

/** Writes the backend headers the operator named, in the order tenant, route, request id. */
export function appendBackendHeaders(
  out: string[],
  named: BackendHeaders | undefined,
  values: { readonly tenant: string; readonly route: string; readonly requestId: string },
): void {
  if (named?.tenant) out.push(named.tenant, values.tenant);
  if (named?.route) out.push(named.route, values.route);
  if (named?.requestId) out.push(named.requestId, values.requestId);
}
