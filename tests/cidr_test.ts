/**
 * Unit tests for trusted-proxy CIDR sets: `parseCidr`, `AddressSet` and `canonicalAddress`.
 *
 * @module
 */
import assert from "node:assert/strict";
import { AddressSet, canonicalAddress, type Cidr, parseCidr } from "../src/request/cidr.ts";

/** The parsed range, failing the test on a message. */
function cidr(text: string): Cidr {
  const parsed = parseCidr(text);
  if (typeof parsed === "string") throw new Error(parsed);
  return parsed;
}

Deno.test("parseCidr() reads IPv4 and IPv6 ranges into canonical text", () => {
  assert.deepEqual(cidr("10.0.0.0/8"), {
    family: 4,
    text: "10.0.0.0/8",
    prefix: 8,
    network: [0x0a000000],
    mask: [0xff000000],
  });
  assert.deepEqual(cidr("2001:db8::/32"), {
    family: 6,
    text: "2001:db8::/32",
    prefix: 32,
    network: [0x20010db8, 0, 0, 0],
    mask: [0xffffffff, 0, 0, 0],
  });
  assert.equal(cidr("0.0.0.0/0").text, "0.0.0.0/0");
  assert.equal(cidr("::/0").text, "::/0");
  assert.equal(cidr("2001:0DB8:0000:0000:0000:0000:0000:0001/128").text, "2001:db8::1/128");
  assert.equal(cidr("1:0:0:2:0:0:0:3/128").text, "1:0:0:2::3/128");
  assert.equal(cidr("1:2:3:4:5:6:7:8").text, "1:2:3:4:5:6:7:8/128");
  assert.equal(cidr("::ffff:10.0.0.0/104").text, "::ffff:10.0.0.0/104");
  assert.equal(cidr("64:ff9b::192.0.2.33/128").text, "64:ff9b::c000:221/128");
});

Deno.test("parseCidr() treats a bare address as /32 or /128", () => {
  assert.equal(cidr("192.0.2.7").text, "192.0.2.7/32");
  assert.equal(cidr("::1").text, "::1/128");
});

Deno.test("parseCidr() accepts host bits and clears them", () => {
  assert.equal(cidr("10.1.2.3/8").text, "10.0.0.0/8");
  assert.equal(cidr("192.168.77.200/17").text, "192.168.0.0/17");
  assert.equal(cidr("2001:db8:ffff:1::1/32").text, "2001:db8::/32");
  assert.equal(cidr("2001:db8:0:0:ffff::/65").text, "2001:db8:0:0:8000::/65");
});

Deno.test("parseCidr() names the entry and the problem", () => {
  const cases: [string, string][] = [
    ["10.0.0.0/33", `Invalid CIDR "10.0.0.0/33": prefix /33 is longer than IPv4's 32 bits`],
    ["::/129", `Invalid CIDR "::/129": prefix /129 is longer than IPv6's 128 bits`],
    ["10.0.0.0/x", `Invalid CIDR "10.0.0.0/x": prefix "x" is not a number`],
    ["10.0.0.0/", `Invalid CIDR "10.0.0.0/": prefix "" is not a number`],
    ["10.0.0.0/08", `Invalid CIDR "10.0.0.0/08": prefix "08" is not a number`],
    ["10.0.0.0/-1", `Invalid CIDR "10.0.0.0/-1": prefix "-1" is not a number`],
    ["example.com", `Invalid CIDR "example.com": not an IP address`],
    ["", `Invalid CIDR "": not an IP address`],
  ];
  for (const [text, message] of cases) assert.equal(parseCidr(text), message, text);
});

Deno.test("parseCidr() refuses malformed addresses", () => {
  const bad = [
    "256.0.0.1",
    "1.2.3",
    "1.2.3.4.5",
    "010.0.0.1",
    "1..2.3",
    " 10.0.0.0/8",
    "1:2:3:4:5:6:7:8:9",
    "1:2:3:4:5:6:7",
    "1::2::3",
    "12345::",
    ":1::",
    "1:",
    "1:::2",
    "::g",
    "[::1]",
    "fe80::1%eth0/64",
    "1:2:3:4:5:6:7:1.2.3.4",
    "::1.2.3",
  ];
  for (const text of bad) {
    assert.equal(parseCidr(text), `Invalid CIDR "${text}": not an IP address`, text);
  }
});

Deno.test("AddressSet.of() throws a TypeError naming the first bad entry", () => {
  assert.throws(() => AddressSet.of(["10.0.0.0/8", "nope", "10.0.0.0/99"]), {
    name: "TypeError",
    message: `Invalid CIDR "nope": not an IP address`,
  });
});

Deno.test("AddressSet.of() keeps every range in order", () => {
  const set = AddressSet.of(["10.0.0.0/8", "2001:db8::/32", "10.0.0.0/8"]);
  assert.equal(set.size, 3);
  assert.deepEqual(set.cidrs.map((range) => range.text), [
    "10.0.0.0/8",
    "2001:db8::/32",
    "10.0.0.0/8",
  ]);
});

Deno.test("AddressSet.has() answers false for everything when empty", () => {
  const empty = AddressSet.of([]);
  assert.equal(empty.size, 0);
  for (const address of ["10.0.0.1", "::1", "::ffff:10.0.0.1", "", "junk"]) {
    assert.equal(empty.has(address), false, address);
  }
});

Deno.test("AddressSet.has() matches IPv4 ranges at their edges", () => {
  const set = AddressSet.of(["10.0.0.0/8", "192.168.1.0/24", "198.51.100.7", "172.16.0.0/31"]);
  const cases: [string, boolean][] = [
    ["10.0.0.0", true],
    ["10.255.255.255", true],
    ["9.255.255.255", false],
    ["11.0.0.0", false],
    ["192.168.1.255", true],
    ["192.168.2.0", false],
    ["198.51.100.7", true],
    ["198.51.100.8", false],
    ["172.16.0.1", true],
    ["172.16.0.2", false],
  ];
  for (const [address, inside] of cases) assert.equal(set.has(address), inside, address);
  assert.equal(AddressSet.of(["0.0.0.0/0"]).has("255.255.255.255"), true);
  assert.equal(AddressSet.of(["0.0.0.0/0"]).has("::1"), false);
});

Deno.test("AddressSet.has() matches IPv4-mapped IPv6 addresses as IPv4", () => {
  const set = AddressSet.of(["10.0.0.0/8"]);
  assert.equal(set.has("::ffff:10.1.2.3"), true);
  assert.equal(set.has("::FFFF:10.1.2.3"), true);
  assert.equal(set.has("0:0:0:0:0:ffff:a01:203"), true);
  assert.equal(set.has("[::ffff:10.1.2.3]"), true);
  assert.equal(set.has("::ffff:11.1.2.3"), false);
  assert.equal(set.has("::a01:203"), false, "IPv4-compatible is not IPv4-mapped");
});

Deno.test("AddressSet.has() matches IPv6 ranges, bracketed and zoned addresses", () => {
  const set = AddressSet.of(["2001:db8::/32", "fe80::/10", "::1"]);
  const cases: [string, boolean][] = [
    ["2001:db8::1", true],
    ["2001:DB8:FFFF:FFFF:FFFF:FFFF:FFFF:FFFF", true],
    ["[2001:db8::1]", true],
    ["2001:db9::", false],
    ["2001:db7:ffff:ffff:ffff:ffff:ffff:ffff", false],
    ["fe80::1%eth0", true],
    ["febf::1", true],
    ["fec0::1", false],
    ["::1", true],
    ["0:0:0:0:0:0:0:1", true],
    ["::2", false],
    ["10.0.0.1", false],
  ];
  for (const [address, inside] of cases) assert.equal(set.has(address), inside, address);
});

Deno.test("AddressSet.has() lets IPv6 ranges that cover ::ffff:0:0/96 hold IPv4 addresses", () => {
  assert.equal(AddressSet.of(["::ffff:0:0/96"]).has("203.0.113.9"), true);
  assert.equal(AddressSet.of(["::ffff:10.0.0.0/104"]).has("10.9.9.9"), true);
  assert.equal(AddressSet.of(["::ffff:10.0.0.0/104"]).has("11.0.0.1"), false);
  assert.equal(AddressSet.of(["::/0"]).has("203.0.113.9"), true);
  assert.equal(AddressSet.of(["2001:db8::/32"]).has("203.0.113.9"), false);
});

Deno.test("AddressSet.has() answers false for non-addresses", () => {
  const set = AddressSet.of(["0.0.0.0/0", "::/0"]);
  const junk = [
    "",
    "unknown",
    "10.0.0.1:80",
    "[10.0.0.1]",
    "[::1",
    "::1]",
    "[::1]:443",
    " 10.0.0.1",
    "10.0.0.1 ",
    "fe80::1%",
    "1.2.3.04",
    "_hidden",
    "localhost",
  ];
  for (const address of junk) assert.equal(set.has(address), false, address);
});

Deno.test("canonicalAddress() writes the address the gateway forwards", () => {
  assert.equal(canonicalAddress("203.0.113.9"), "203.0.113.9");
  assert.equal(canonicalAddress("::ffff:203.0.113.9"), "203.0.113.9");
  assert.equal(canonicalAddress("[2001:DB8:0:0:0:0:0:1]"), "2001:db8::1");
  assert.equal(canonicalAddress("fe80::1%eth0"), "fe80::1");
  assert.equal(canonicalAddress("::"), "::");
  assert.equal(canonicalAddress("1.2.3.4:80"), undefined);
  assert.equal(canonicalAddress(""), undefined);
});
