/**
 * Kills operator-mutation survivors in the request modules: the canonical path
 * (`src/request/canonical_path.ts`), CIDR sets (`src/request/cidr.ts`), the client-IP headers
 * (`src/request/client_ip_headers.ts`), the request head (`src/request/head.ts`) and the host
 * (`src/request/host.ts`). Each test names the rule it guards and checks both sides of it, as the
 * operator (the refusal's log detail) or the client (the path, the answer) sees it.
 *
 * @module
 */
import assert from "node:assert/strict";
import type { IncomingMessage } from "node:http";
import { canonicalPath, DEFAULT_PATH_RULES } from "../src/request/canonical_path.ts";
import { AddressSet, canonicalAddress, networkOf, parseCidr } from "../src/request/cidr.ts";
import { carriesBody, type HeadLimits, readHead } from "../src/request/head.ts";
import { readHost, splitTarget } from "../src/request/host.ts";

/** The log detail of a refused path (fails when the path is accepted). */
function refusalDetail(raw: string): string {
  const result = canonicalPath(raw, DEFAULT_PATH_RULES);
  assert.ok(typeof result !== "string", `${JSON.stringify(raw)} was accepted as ${result}`);
  return result.detail;
}

// ---- The canonical path's refusals: the detail an operator reads names the right offset.

Deno.test("canonicalPath() refusal detail: a dot segment with a ; parameter is named at its own offset, the first one at 1", () => {
  assert.equal(refusalDetail("/.;x"), 'Segment at offset 1 is a dot segment with a ";" parameter');
  assert.equal(
    refusalDetail("/..;/a"),
    'Segment at offset 1 is a dot segment with a ";" parameter',
  );
  assert.equal(
    refusalDetail("/a/..;/b"),
    'Segment at offset 3 is a dot segment with a ";" parameter',
  );
  assert.equal(
    refusalDetail("/%2e%2e%3Bx"),
    'Segment at offset 1 is a dot segment with a ";" parameter',
  );
});

Deno.test("canonicalPath() refusal detail: a refused character is written as two hex digits, never itself", () => {
  assert.equal(refusalDetail("/a\x01b"), "Character 0x01 at offset 2 is not allowed in a path");
  assert.equal(refusalDetail("/\x0a"), "Character 0x0A at offset 1 is not allowed in a path");
  assert.equal(refusalDetail("/a b"), "Character 0x20 at offset 2 is not allowed in a path");
  assert.equal(refusalDetail("/\u0100"), "Character 0x100 at offset 1 is not allowed in a path");
});

// ---- Addresses: a dotted quad is exactly four runs of digits, nothing after the last.

Deno.test("cidr: a dotted quad with a trailing dot or a / after it is not an address, anywhere it is read", () => {
  const trusted = AddressSet.of(["1.2.3.0/24", "::ffff:0:0/96"]);
  for (
    const text of ["1.2.3.", "1.2.3.4/", "1.2.3.4/8", "1.2.3./", "::ffff:1.2.3.", "::ffff:1.2.3.4/"]
  ) {
    assert.equal(canonicalAddress(text), undefined, text);
    assert.equal(trusted.has(text), false, text);
    assert.equal(networkOf(text, 24, 64), undefined, text);
  }
  assert.equal(parseCidr("1.2.3./24"), 'Invalid CIDR "1.2.3./24": not an IP address');
  // The other side: the same quads, well formed.
  assert.equal(canonicalAddress("1.2.3.4"), "1.2.3.4");
  assert.equal(canonicalAddress("::ffff:1.2.3.0"), "1.2.3.0");
  assert.equal(trusted.has("1.2.3.0"), true);
});

Deno.test("cidr: only ::ffff:0:0/96 is written as a mapped IPv4 address, not an address with the same third word", () => {
  assert.equal(canonicalAddress("0:0:0:1:0:ffff:102:304"), "::1:0:ffff:102:304");
  assert.equal(canonicalAddress("0:0:1:0:0:ffff:102:304"), "::1:0:0:ffff:102:304");
  assert.equal(networkOf("0:0:0:1:0:ffff:102:304", 32, 128), "::1:0:ffff:102:304");
  const range = parseCidr("0:0:0:1:0:ffff:102:300/120");
  assert.equal(typeof range === "string" ? range : range.text, "::1:0:ffff:102:300/120");
  assert.equal(canonicalAddress("::ffff:102:304"), "1.2.3.4", "the mapped range itself is IPv4");
});

// ---- The request head, with plain objects standing in for IncomingMessage.

const LIMITS: HeadLimits = { headers: 100, targetBytes: 8192 };

/** readHead() over a request of `version` (default 1.1) with these raw headers. */
function head(
  rawHeaders: string[],
  options: { method?: string; version?: string; limits?: HeadLimits } = {},
) {
  const [major, minor] = (options.version ?? "1.1").split(".").map(Number);
  const request = {
    url: "/",
    method: options.method ?? "GET",
    rawHeaders,
    httpVersionMajor: major,
    httpVersionMinor: minor,
  };
  return readHead(request as unknown as IncomingMessage, options.limits ?? LIMITS);
}

/** The refusal's kind, or the host the head was read for. */
function outcome(rawHeaders: string[], options?: Parameters<typeof head>[1]): string {
  const result = head(rawHeaders, options);
  return "kind" in result ? result.kind : `host ${result.host}`;
}

Deno.test("request head: one declared body byte is a body, refused on GET; zero is none", () => {
  assert.equal(carriesBody(1), true);
  assert.equal(carriesBody(0), false);
  assert.equal(carriesBody("none"), false);
  assert.equal(outcome(["Host", "demo.example", "Content-Length", "1"]), "body_not_allowed");
  assert.equal(outcome(["Host", "demo.example", "Content-Length", "0"]), "host demo.example");
});

Deno.test("request head: a Host may hold every RFC 3986 sub-delimiter of a reg-name", () => {
  for (
    const host of ["a!b", "a$b", "a&b", "a'b", "a(b", "a)b", "a*b", "a+b", "a;b", "a=b", "a%41b"]
  ) {
    assert.equal(outcome(["Host", host]), `host ${host.toLowerCase()}`, host);
  }
  for (const host of ["a b", "a,b", 'a"b', "a<b", "a@b", "a/b"]) {
    assert.equal(outcome(["Host", host]), "bad_request", host);
  }
});

Deno.test("request head: header_bytes counts each name and value with 2 bytes more, and the cap itself is allowed", () => {
  const raw = ["Host", "demo.example", "X-Pad", "0123456789"];
  const bytes = (4 + 2) + (12 + 2) + (5 + 2) + (10 + 2); // 39
  assert.equal(outcome(raw, { limits: { ...LIMITS, headerBytes: bytes } }), "host demo.example");
  assert.deepEqual(head(raw, { limits: { ...LIMITS, headerBytes: bytes - 1 } }), {
    kind: "header_fields_too_large",
    detail: `${bytes} header bytes`,
  });
});

Deno.test("request head: only a field named Host counts as one; other four-letter fields do not", () => {
  assert.equal(outcome(["Host", "demo.example", "Date", "other.example"]), "host demo.example");
  assert.equal(outcome(["Date", "x", "Host", "demo.example", "Vary", "y"]), "host demo.example");
  assert.equal(outcome(["HOST", "demo.example", "hOsT", "demo.example"]), "bad_request");
});

Deno.test("request head: Expect is read from the Expect field only; anything but 100-continue is 417", () => {
  assert.equal(outcome(["Host", "demo.example", "Expect", "fancy"]), "expectation_failed");
  assert.equal(outcome(["Host", "demo.example", "EXPECT", " 100-Continue "]), "host demo.example");
  assert.equal(outcome(["Host", "demo.example", "Accept", "fancy"]), "host demo.example");
  assert.equal(outcome(["Host", "demo.example", "Expec", "fancy"]), "host demo.example");
});

Deno.test("request head: HTTP/2 :authority stands for Host, alone or beside an equal Host, in either order", () => {
  const h2 = { version: "2.0" };
  assert.equal(outcome([":authority", "demo.example"], h2), "host demo.example");
  assert.equal(
    outcome([":authority", "demo.example", "host", "demo.example"], h2),
    "host demo.example",
  );
  assert.equal(
    outcome(["host", "demo.example", ":authority", "demo.example"], h2),
    "host demo.example",
  );
  assert.deepEqual(head(["host", "demo.example", ":authority", "other.example"], h2), {
    kind: "bad_request",
    detail: ":authority differs from Host",
  });
  assert.deepEqual(head([":authority", "demo.example", "host", "other.example"], h2), {
    kind: "bad_request",
    detail: ":authority differs from Host",
  });
  assert.deepEqual(head([":authority", "demo.example", "host", "demo.example", "x", "y"], h2), {
    method: "GET",
    path: "/",
    query: "",
    host: "demo.example",
    body: "none",
  });
});

// ---- Hosts and host:port targets.

Deno.test("readHost() takes an IPv6 literal in brackets as the address inside them", () => {
  assert.deepEqual(readHost("[::1]"), { canonical: "::1", kind: "address" });
  assert.deepEqual(readHost("[2001:DB8:0::1]"), { canonical: "2001:db8::1", kind: "address" });
  assert.deepEqual(readHost("2001:db8::1"), { canonical: "2001:db8::1", kind: "address" });
});

Deno.test("splitTarget() reads host:port exactly: the host before the colon, five digits at most, nothing after", () => {
  assert.deepEqual(splitTarget("Shop.Example:8080"), { host: "shop.example", port: 8080 });
  assert.deepEqual(splitTarget("[::1]:443"), { host: "::1", port: 443 });
  assert.deepEqual(splitTarget("10.0.0.1:65535"), { host: "10.0.0.1", port: 65535 });
  for (
    const text of [
      "shop.example:80x",
      "shop.example:443/path",
      "shop.example:123456",
      "shop.example:",
    ]
  ) {
    assert.equal(splitTarget(text), undefined, text);
  }
});
