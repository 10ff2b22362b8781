/**
 * Trusted-proxy address sets: IPv4 and IPv6 CIDR ranges (RFC 4632 §3.1, RFC 4291 §2.3) and the
 * per-request "is this peer inside?" test the forwarded-header rules need.
 *
 * Addresses follow RFC 4291 §2.2 ("::" once, an optional dotted IPv4 tail) and the strict
 * dotted-quad form (no leading zeros, so "010" is never read as octal). An IPv4-mapped IPv6 address
 * (RFC 4291 §2.5.5.2, "::ffff:10.1.2.3", how Node reports IPv4 peers on a dual-stack socket) is the
 * IPv4 address it carries: it matches IPv4 ranges, and IPv6 ranges as the mapped address, so
 * "::/0" and "::ffff:0:0/96" hold every IPv4 address.
 *
 * Written by hand rather than on `node:net`'s `BlockList`: under Deno 2.9 each `check()` crosses
 * into Rust and costs about 2 µs, ten times this parser, on every hop of every forwarded request.
 *
 * @module
 */

const DOT = 0x2e;
const COLON = 0x3a;
const PREFIX = /^(?:0|[1-9][0-9]{0,2})$/;

/** An address as 32-bit words in network order: one for IPv4, four for IPv6. */
type Words = readonly number[];

/** One parsed range. */
export interface Cidr {
  readonly family: 4 | 6;
  /** Canonical text, host bits cleared, always with a prefix: "10.0.0.0/8", "2001:db8::/32". */
  readonly text: string;
  /** Prefix length in bits. */
  readonly prefix: number;
  /** The network as 32-bit words (one for IPv4, four for IPv6), host bits cleared. */
  readonly network: Words;
  /** The netmask, word by word. */
  readonly mask: Words;
}

/**
 * Parses a CIDR range or a bare address (a /32 or /128). Host bits are accepted and cleared.
 *
 * @param text e.g. "10.0.0.0/8", "2001:db8::/32", "192.0.2.7"
 * @returns the range, or a message naming the bad entry
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { parseCidr } from "./cidr.ts";
 * const range = parseCidr("10.1.2.3/8");
 * assert.equal(typeof range === "string" ? range : range.text, "10.0.0.0/8");
 * assert.equal(parseCidr("10.0.0.0/33"), 'Invalid CIDR "10.0.0.0/33": prefix /33 is longer than IPv4\'s 32 bits');
 * ```
 */
export function parseCidr(text: string): Cidr | string {
  const slash = text.indexOf("/");
  const host = slash === -1 ? text : text.slice(0, slash);
  const family = host.includes(":") ? 6 : 4;
  const words = family === 6 ? parseIPv6(host, 0, host.length) : ipv4Words(host);
  if (words === undefined) return `Invalid CIDR "${text}": not an IP address`;
  const bits = family === 6 ? 128 : 32;
  let prefix = bits;
  if (slash !== -1) {
    const digits = text.slice(slash + 1);
    if (!PREFIX.test(digits)) return `Invalid CIDR "${text}": prefix "${digits}" is not a number`;
    prefix = Number(digits);
    if (prefix > bits) {
      return `Invalid CIDR "${text}": prefix /${prefix} is longer than IPv${family}'s ${bits} bits`;
    }
  }
  const mask = words.map((_, index) => maskWord(prefix, index));
  const network = words.map((word, index) => (word & mask[index]) >>> 0);
  const address = family === 6 ? formatIPv6(network) : formatIPv4(network[0]);
  return { family, text: `${address}/${prefix}`, prefix, network, mask };
}

/**
 * A set of CIDR ranges answering membership for peer addresses.
 *
 * @internal
 */
export class AddressSet {
  /** How many ranges the set was built from. */
  readonly size: number;
  /** The ranges, in the order given. */
  readonly cidrs: readonly Cidr[];
  readonly #v4: readonly Cidr[];
  readonly #v6: readonly Cidr[];

  private constructor(cidrs: readonly Cidr[]) {
    this.cidrs = cidrs;
    this.size = cidrs.length;
    this.#v4 = cidrs.filter((cidr) => cidr.family === 4);
    this.#v6 = cidrs.filter((cidr) => cidr.family === 6);
  }

  /**
   * Builds a set from CIDR texts.
   *
   * @throws {TypeError} naming the first entry that is not a CIDR or address
   * @example
   * ```ts
   * import assert from "node:assert/strict";
   * import { AddressSet } from "./cidr.ts";
   * const trusted = AddressSet.of(["10.0.0.0/8", "2001:db8::/32"]);
   * assert.equal(trusted.has("::ffff:10.1.2.3"), true);
   * assert.equal(trusted.has("[2001:db8::1]"), true);
   * assert.equal(trusted.has("192.0.2.1"), false);
   * ```
   */
  static of(cidrs: readonly string[]): AddressSet {
    const parsed: Cidr[] = [];
    for (const text of cidrs) {
      const cidr = parseCidr(text);
      if (typeof cidr === "string") throw new TypeError(cidr);
      parsed.push(cidr);
    }
    return new AddressSet(parsed);
  }

  /**
   * Tells whether an address lies inside any range. Accepts IPv4, IPv6, IPv4-mapped IPv6,
   * bracketed IPv6 ("[::1]") and a zone suffix ("fe80::1%eth0"); anything else is outside.
   */
  has(address: string): boolean {
    if (this.size === 0) return false;
    const words = parseAddress(address);
    if (words === undefined) return false;
    if (words.length === 1) {
      return inside(words, this.#v4) ||
        (this.#v6.length > 0 && inside([0, 0, 0xffff, words[0]], this.#v6));
    }
    return inside(words, this.#v6);
  }
}

/**
 * The address as the gateway writes it: brackets and zone removed, an IPv4-mapped IPv6 address as
 * plain dotted IPv4, other IPv6 compressed per RFC 5952; `undefined` when it is not an address.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { canonicalAddress } from "./cidr.ts";
 * assert.equal(canonicalAddress("::ffff:1.2.3.4"), "1.2.3.4");
 * assert.equal(canonicalAddress("[2001:DB8:0:0::1]"), "2001:db8::1");
 * assert.equal(canonicalAddress("unknown"), undefined);
 * ```
 */
export function canonicalAddress(text: string): string | undefined {
  const words = parseAddress(text);
  if (words === undefined) return undefined;
  return words.length === 1 ? formatIPv4(words[0]) : formatIPv6(words);
}

/**
 * The network of `ipv4Prefix` or `ipv6Prefix` bits an address lies in, as one text whatever the
 * address's spelling: canonical like {@link canonicalAddress} (an IPv4-mapped IPv6 address is its
 * IPv4 address and takes the IPv4 prefix), host bits cleared, and `/prefix` after it unless the
 * prefix is the whole address; `undefined` when it is not an address. Prefixes are not checked
 * here (the config schema bounds them).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { networkOf } from "./cidr.ts";
 * assert.equal(networkOf("[2001:DB8:0:0:1:2:3:4%eth0]", 32, 64), "2001:db8::/64");
 * assert.equal(networkOf("::ffff:203.0.113.77", 24, 64), "203.0.113.0/24");
 * assert.equal(networkOf("203.0.113.77", 32, 64), "203.0.113.77");
 * ```
 */
export function networkOf(
  text: string,
  ipv4Prefix: number,
  ipv6Prefix: number,
): string | undefined {
  const words = parseAddress(text);
  if (words === undefined) return undefined;
  const v4 = words.length === 1;
  const prefix = v4 ? ipv4Prefix : ipv6Prefix;
  const network = words.map((word, index) => (word & maskWord(prefix, index)) >>> 0);
  const address = v4 ? formatIPv4(network[0]) : formatIPv6(network);
  return prefix === (v4 ? 32 : 128) ? address : `${address}/${prefix}`;
}

/** True when the words fall inside one of the ranges (all of the words' family). */
function inside(words: Words, ranges: readonly Cidr[]): boolean {
  outer: for (const range of ranges) {
    for (let index = 0; index < words.length; index++) {
      if (((words[index] & range.mask[index]) >>> 0) !== range.network[index]) continue outer;
    }
    return true;
  }
  return false;
}

/** Parses a peer or forwarded address; IPv4 and IPv4-mapped IPv6 both yield one word. */
function parseAddress(text: string): Words | undefined {
  let start = 0;
  let end = text.length;
  const bracketed = end > 2 && text.charCodeAt(0) === 0x5b && text.charCodeAt(end - 1) === 0x5d;
  if (bracketed) [start, end] = [1, end - 1];
  const colon = text.indexOf(":", start);
  if (colon === -1 || colon >= end) return bracketed ? undefined : ipv4Words(text);
  const zone = text.indexOf("%", start);
  if (zone !== -1 && zone < end) {
    if (zone === end - 1) return undefined;
    end = zone;
  }
  const words = parseIPv6(text, start, end);
  if (words !== undefined && words[0] === 0 && words[1] === 0 && words[2] === 0xffff) {
    return [words[3]];
  }
  return words;
}

/** A dotted quad as one word, or `undefined`. */
function ipv4Words(text: string): Words | undefined {
  const value = parseIPv4(text, 0, text.length);
  return value === -1 ? undefined : [value];
}

/** Parses a strict dotted quad between `start` and `end`; -1 when malformed. */
function parseIPv4(text: string, start: number, end: number): number {
  let result = 0;
  let octet = 0;
  let digits = 0;
  let dots = 0;
  for (let index = start; index < end; index++) {
    const code = text.charCodeAt(index);
    if (code === DOT) {
      if (digits === 0 || dots === 3) return -1;
      result = result * 256 + octet;
      octet = 0;
      digits = 0;
      dots++;
    } else if (code >= 0x30 && code <= 0x39) {
      if (digits > 0 && octet === 0) return -1;
      octet = octet * 10 + code - 0x30;
      digits++;
      if (octet > 255) return -1;
    } else {
      return -1;
    }
  }
  return digits === 0 || dots !== 3 ? -1 : result * 256 + octet;
}

/** Parses RFC 4291 §2.2 text between `start` and `end` into four words. */
function parseIPv6(text: string, start: number, end: number): Words | undefined {
  const groups: number[] = [];
  let gap = -1;
  let index = start;
  if (
    end - start >= 2 && text.charCodeAt(start) === COLON && text.charCodeAt(start + 1) === COLON
  ) {
    gap = 0;
    index += 2;
  }
  while (index < end) {
    let value = 0;
    let next = index;
    for (let digit = hexValue(text.charCodeAt(next)); digit !== -1 && next - index < 5;) {
      value = value * 16 + digit;
      digit = ++next < end ? hexValue(text.charCodeAt(next)) : -1;
    }
    if (next < end && text.charCodeAt(next) === DOT) {
      const v4 = groups.length <= 6 ? parseIPv4(text, index, end) : -1;
      if (v4 === -1) return undefined;
      groups.push(Math.floor(v4 / 65536), v4 % 65536);
      break;
    }
    if (next === index || next - index > 4 || groups.length === 8) return undefined;
    groups.push(value);
    if (next === end) break;
    if (text.charCodeAt(next) !== COLON || next + 1 === end) return undefined;
    if (text.charCodeAt(next + 1) === COLON) {
      if (gap !== -1) return undefined;
      gap = groups.length;
      next++;
    }
    index = next + 1;
  }
  if (gap === -1 ? groups.length !== 8 : groups.length > 7) return undefined;
  const words = [0, 0, 0, 0];
  const missing = 8 - groups.length;
  for (let group = 0; group < groups.length; group++) {
    const slot = gap !== -1 && group >= gap ? group + missing : group;
    words[slot >> 1] += slot & 1 ? groups[group] : groups[group] * 65536;
  }
  return words;
}

/** The value of a hex digit, or -1. */
function hexValue(code: number): number {
  if (code >= 0x30 && code <= 0x39) return code - 0x30;
  const lower = code | 0x20;
  return lower >= 0x61 && lower <= 0x66 ? lower - 0x57 : -1;
}

/** The netmask word at `index` for a prefix length. */
function maskWord(prefix: number, index: number): number {
  const bits = Math.min(32, Math.max(0, prefix - index * 32));
  return bits === 0 ? 0 : (0xffffffff << (32 - bits)) >>> 0;
}

/** Dotted-quad text of one word. */
function formatIPv4(word: number): string {
  return `${word >>> 24}.${(word >>> 16) & 255}.${(word >>> 8) & 255}.${word & 255}`;
}

/** RFC 5952 text: lower case, longest zero run (two groups or more) as "::", mapped as dotted. */
function formatIPv6(words: Words): string {
  if (words[0] === 0 && words[1] === 0 && words[2] === 0xffff) {
    return `::ffff:${formatIPv4(words[3])}`;
  }
  const groups = words.flatMap((word) => [word >>> 16, word & 0xffff]);
  let best = -1;
  let bestLength = 1;
  for (let start = 0; start < 8;) {
    let end = start;
    while (end < 8 && groups[end] === 0) end++;
    if (end - start > bestLength) [best, bestLength] = [start, end - start];
    start = end + 1;
  }
  const hex = groups.map((group) => group.toString(16));
  if (best === -1) return hex.join(":");
  return `${hex.slice(0, best).join(":")}::${hex.slice(best + bestLength).join(":")}`;
}
