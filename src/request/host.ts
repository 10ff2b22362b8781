/**
 * Host and `host:port` parsing, in every spelling a resolver accepts: one reading shared by the
 * config checks, the egress locks and the request head, so that no two of them can disagree on
 * what a host is.
 *
 * @module
 */
import { canonicalAddress } from "./cidr.ts";

/** A destination host as this module sees it. */
export interface Host {
  /** The host as a resolver would read it: an address, or a lower-case name without final dot. */
  readonly canonical: string;
  readonly kind: "address" | "name";
}

/**
 * Reads a host the way resolvers do: IPv4 in every `inet_aton` form becomes dotted decimal (the
 * WHATWG URL parser implements those forms), IPv6 is compressed with an IPv4-mapped address as its
 * IPv4, a name is lower-cased without its final dot.
 *
 * @param host a host name or IP literal, IPv6 with or without brackets
 * @returns undefined when no URL could carry the host
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { readHost } from "./host.ts";
 * assert.equal(readHost("0x7f.1")?.canonical, "127.0.0.1");
 * assert.equal(readHost("2130706433")?.canonical, "127.0.0.1");
 * assert.equal(readHost("[::ffff:127.0.0.1]")?.canonical, "127.0.0.1");
 * assert.equal(readHost("Shop.Example.")?.canonical, "shop.example");
 * ```
 */
export function readHost(host: string): Host | undefined {
  const bare = host.startsWith("[") && host.endsWith("]") ? host.slice(1, -1) : host;
  let hostname: string;
  try {
    hostname = new URL(`http://${bare.includes(":") ? `[${bare}]` : bare}/`).hostname;
  } catch {
    return undefined;
  }
  if (hostname.startsWith("[")) {
    const address = canonicalAddress(hostname.slice(1, -1));
    return address === undefined ? undefined : { canonical: address, kind: "address" };
  }
  const address = canonicalAddress(hostname);
  if (address !== undefined) return { canonical: address, kind: "address" };
  return { canonical: hostname.replace(/\.+$/, ""), kind: "name" };
}

/**
 * Splits `host:port` (IPv6 in brackets) into a canonical host and a port; undefined for a CIDR or
 * a bare address.
 */
export function splitTarget(text: string): { host: string; port: number } | undefined {
  const match = /^(\[[^\]]+\]|[^:/[\]]+):(\d{1,5})$/.exec(text);
  if (!match) return undefined;
  const host = readHost(match[1]);
  return host ? { host: host.canonical, port: Number(match[2]) } : undefined;
}
