/**
 * Rule 9 of issue 33, for the egress's destination lock (src/egress/destinations.ts): every
 * private and special-purpose range the egress refuses is refused at its first and its last
 * address, and the address one past each end is judged by the range it is in (or is a public
 * address), so a range typed too narrow (172.16.0.0/16 for /12) or too wide fails here. The unit's
 * contract, in process: `refuseInternal()` is what the egress asks before any SOCKS CONNECT or
 * direct dial.
 *
 * The table (tests/fixtures/special_purpose_ranges.ts) is written from the IANA special-purpose
 * registries (RFC 6890, RFC 8190), not from the code; where it departs from "refuse exactly what is
 * not globally reachable", the entry says why. The address one past an end is judged by every
 * entry holding it: refused when any refused entry does, else allowed (a public address, or an
 * entry the egress lets through); an IPv4-mapped address is judged as its IPv4 address.
 *
 * @module
 */
import assert from "node:assert/strict";
import { PrivateAllowance, refuseInternal } from "../src/egress/destinations.ts";
import { type Entry, IPV4, IPV6 } from "./fixtures/special_purpose_ranges.ts";

// ---------------------------------------------------------------------------------------------
// Addresses as numbers, parsed and written here (not with the code under test)

const V4_BITS = 32n;
const V6_BITS = 128n;
/** ::ffff:0:0/96 (RFC 4291 §2.5.5.2). */
const MAPPED = 0xffffn << 32n;

function parseV4(text: string): bigint {
  return text.split(".").reduce((sum, part) => (sum << 8n) | BigInt(Number(part)), 0n);
}

function parseV6(text: string): bigint {
  const [head, tail] = text.includes("::") ? text.split("::") : [text, undefined];
  const left = head === "" ? [] : head.split(":");
  const right = tail === undefined || tail === "" ? [] : tail.split(":");
  const groups = tail === undefined
    ? left
    : [...left, ...Array(8 - left.length - right.length).fill("0"), ...right];
  assert.equal(groups.length, 8, text);
  return groups.reduce((sum, group) => (sum << 16n) | BigInt(parseInt(group, 16)), 0n);
}

function formatV4(value: bigint): string {
  return [24n, 16n, 8n, 0n].map((shift) => String((value >> shift) & 0xffn)).join(".");
}

/** All eight groups, uncompressed: a spelling the code must read like any other. */
function formatV6(value: bigint): string {
  const groups: string[] = [];
  for (let shift = 112n; shift >= 0n; shift -= 16n) {
    groups.push(((value >> shift) & 0xffffn).toString(16));
  }
  return groups.join(":");
}

interface Range {
  readonly entry: Entry;
  readonly first: bigint;
  readonly last: bigint;
}

function rangeOf(entry: Entry, bits: bigint): Range {
  const [address, length] = entry.block.split("/");
  const value = bits === V4_BITS ? parseV4(address) : parseV6(address);
  const host = bits - BigInt(Number(length));
  const first = (value >> host) << host;
  assert.equal(first, value, `${entry.block} is written as its network address`);
  return { entry, first, last: first + (1n << host) - 1n };
}

const V4_RANGES = IPV4.map((entry) => rangeOf(entry, V4_BITS));
const V6_RANGES = IPV6.map((entry) => rangeOf(entry, V6_BITS));

/** What the egress must do with an address: refuse it when a refused entry holds it. */
function expected(value: bigint, bits: bigint): { refused: boolean; by: string } {
  if (bits === V6_BITS && value >> 32n === MAPPED >> 32n) {
    return expected(value & 0xffff_ffffn, V4_BITS); // an IPv4-mapped address is its IPv4 address
  }
  const holding = (bits === V4_BITS ? V4_RANGES : V6_RANGES)
    .filter((range) => range.first <= value && value <= range.last);
  const refusing = holding.find((range) => range.entry.refused);
  if (refusing) return { refused: true, by: refusing.entry.block };
  return { refused: false, by: holding.map((range) => range.entry.block).join(", ") || "public" };
}

const NOTHING_ALLOWED = new PrivateAllowance([]);

/** The egress's verdict on a literal address: the refusal sentence, or undefined. */
function verdict(address: string): string | undefined {
  return refuseInternal(address, 443, NOTHING_ALLOWED);
}

/** Checks one address against the table; returns a line describing a disagreement, if any. */
function judge(value: bigint, bits: bigint, what: string): string | undefined {
  const text = bits === V4_BITS ? formatV4(value) : formatV6(value);
  const want = expected(value, bits);
  const got = verdict(text);
  if (want.refused && got === undefined) {
    return `${what} ${text}: allowed, but ${want.by} is refused`;
  }
  if (!want.refused && got !== undefined) return `${what} ${text} (${want.by}): refused: ${got}`;
  if (want.refused) assert.match(got!, /, not in egress\.allow_private$/, text);
  return undefined;
}

/** Every end of every range and the address one past it, judged; the disagreements. */
function disagreements(ranges: readonly Range[], bits: bigint): string[] {
  const top = (1n << bits) - 1n;
  const problems: string[] = [];
  for (const { entry, first, last } of ranges) {
    const label = `${entry.block} (${entry.name})`;
    for (
      const [value, what] of [
        [first, `first of ${label}`],
        [last, `last of ${label}`],
        [first - 1n, `one before ${label}`],
        [last + 1n, `one after ${label}`],
      ] as const
    ) {
      if (value < 0n || value > top) continue;
      const problem = judge(value, bits, what);
      if (problem) problems.push(problem);
    }
  }
  return problems;
}

Deno.test(
  "rule 9: every IPv4 range the egress refuses is refused at its first and last address, and one past each end is judged by its own range",
  () => {
    assert.deepEqual(disagreements(V4_RANGES, V4_BITS), []);
    // The IPv4 ends again, spelled as IPv4-mapped IPv6 in brackets: read as their IPv4 address.
    for (const { entry, first, last } of V4_RANGES) {
      for (const value of [first, last]) {
        const mapped = `[::ffff:${formatV4(value)}]`;
        const want = expected(value, V4_BITS).refused;
        assert.equal(verdict(mapped) !== undefined, want, `${mapped} in ${entry.block}`);
      }
    }
  },
);

Deno.test(
  "rule 9: every IPv6 range the egress refuses is refused at its first and last address, and one past each end is judged by its own range",
  () => {
    assert.deepEqual(disagreements(V6_RANGES, V6_BITS), []);
    // ::ffff:0:0/96 carries IPv4: its ends are 0.0.0.0 (refused) and 255.255.255.255 (refused),
    // and the addresses around it are no IPv4 at all (0000::/8, reserved by the IETF, public here).
    const mapped = rangeOf({
      block: "::ffff:0:0/96",
      name: "IPv4-mapped",
      global: false,
      refused: true,
    }, V6_BITS);
    const problems = [mapped.first, mapped.last, mapped.first - 1n, mapped.last + 1n]
      .map((value) => judge(value, V6_BITS, "IPv4-mapped"))
      .filter((problem) => problem !== undefined);
    assert.deepEqual(problems, []);
  },
);

Deno.test("rule 9: the table is the registries', whatever the code lists", () => {
  // Every entry's verdict is `!global` unless it says why not: a change to the table is a decision.
  for (const entry of [...IPV4, ...IPV6]) {
    if (entry.keep !== undefined || entry.global === null) continue;
    assert.equal(entry.refused, !entry.global, `${entry.block} ${entry.name}: refused ≠ !global`);
  }
  // A range the egress refuses narrower than written fails the tests above at its last address;
  // one wider at the address one past its end. Spot checks of the classic mistakes:
  assert.notEqual(verdict("172.31.255.255"), undefined, "172.16.0.0/12, not /16");
  assert.equal(verdict("172.32.0.0"), undefined, "172.16.0.0/12, not /11");
  assert.notEqual(verdict("100.127.255.255"), undefined, "100.64.0.0/10");
  assert.notEqual(verdict("198.19.255.255"), undefined, "198.18.0.0/15, not /16");
  assert.notEqual(verdict("fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"), undefined, "fc00::/7");
  assert.notEqual(verdict("febf:ffff:ffff:ffff:ffff:ffff:ffff:ffff"), undefined, "fe80::/10");
});

Deno.test("the refusal names the kind of range at both ends of neighbouring ranges (multicast, then reserved)", () => {
  // 224.0.0.0/4 and 240.0.0.0/4 are both refused: a multicast range typed as /3 would swallow the
  // reserved one, and only the sentence the operator reads would tell.
  for (const address of ["224.0.0.0", "239.255.255.255"]) {
    assert.match(verdict(address) ?? "", /is a multicast address,/, address);
  }
  for (const address of ["240.0.0.0", "255.255.255.255"]) {
    assert.match(verdict(address) ?? "", /is a reserved address,/, address);
  }
  assert.match(verdict("::") ?? "", /unspecified/, "::");
  assert.match(verdict("::1") ?? "", /loopback/, "::1");
});

Deno.test("a host no resolver reads the same way is refused, and no allowance lets it through", () => {
  const everything = new PrivateAllowance(["0.0.0.0/0", "::/0"]);
  for (const host of ["exa mple.test", "a\u0000b", "[::1", "1.2.3.4.5.6"]) {
    assert.match(
      refuseInternal(host, 443, NOTHING_ALLOWED) ?? "",
      /:443 is not a host any resolver reads the same way, not in egress\.allow_private$/,
      JSON.stringify(host),
    );
    assert.equal(everything.allows(host, 443), false, JSON.stringify(host));
    assert.notEqual(refuseInternal(host, 443, everything), undefined, JSON.stringify(host));
  }
});
