/**
 * Unit tests for the request-head checks (`readHead`, `normalizeHost`) and request ids
 * (`requestIdFor`), with plain objects standing in for `IncomingMessage`.
 *
 * @module
 */
import assert from "node:assert/strict";
import type { IncomingMessage } from "node:http";
import { requestIdFor } from "../src/request/request_id.ts";
import { type HeadLimits, normalizeHost, readHead } from "../src/request/head.ts";

const LIMITS: HeadLimits = { headers: 100, targetBytes: 8192 };

/** What a fake request is made of; HTTP/1.1 `GET /` for `demo.example` unless told. */
interface FakeRequest {
  url?: string;
  method?: string;
  rawHeaders?: string[];
  version?: "1.0" | "1.1";
}

/** Runs readHead() over an IncomingMessage-like object. */
function head(fake: FakeRequest = {}, limits: HeadLimits = LIMITS) {
  const [major, minor] = (fake.version ?? "1.1").split(".").map(Number);
  const request = {
    url: fake.url ?? "/",
    method: fake.method ?? "GET",
    rawHeaders: fake.rawHeaders ?? ["Host", "demo.example"],
    httpVersionMajor: major,
    httpVersionMinor: minor,
  };
  return readHead(request as unknown as IncomingMessage, limits);
}

/** The refusal kind, or "ok". */
function kindOf(fake: FakeRequest, limits?: HeadLimits): string {
  const result = head(fake, limits);
  return "kind" in result ? result.kind : "ok";
}

Deno.test("readHead() splits an origin-form target into path and query", () => {
  assert.deepEqual(
    head({ url: "/users/J%C3%BCrgen?tab=posts&x", rawHeaders: ["Host", "Demo.Example:8080"] }),
    {
      method: "GET",
      path: "/users/J%C3%BCrgen",
      query: "?tab=posts&x",
      host: "demo.example",
      body: "none",
    },
  );
  assert.deepEqual(head({ url: "/a/b", method: "POST" }), {
    method: "POST",
    path: "/a/b",
    query: "",
    host: "demo.example",
    body: "none",
  });
});

Deno.test("readHead() refuses a second Host header", () => {
  const result = head({ rawHeaders: ["Host", "demo.example", "host", "other.example"] });
  assert.deepEqual(result, { kind: "bad_request", detail: "more than one Host header" });
});

Deno.test("readHead() refuses an HTTP/1.1 request without Host", () => {
  assert.deepEqual(head({ rawHeaders: ["Accept", "*/*"] }), {
    kind: "bad_request",
    detail: "HTTP/1.1 without Host",
  });
});

Deno.test("readHead() allows an HTTP/1.0 request without Host, with an empty host", () => {
  assert.deepEqual(head({ version: "1.0", rawHeaders: [], url: "/x?y" }), {
    method: "GET",
    path: "/x",
    query: "?y",
    host: "",
    body: "none",
  });
});

Deno.test("readHead() refuses Transfer-Encoding on HTTP/1.0", () => {
  const rawHeaders = ["Host", "demo.example", "Transfer-Encoding", "chunked"];
  assert.deepEqual(head({ version: "1.0", rawHeaders }), {
    kind: "bad_request",
    detail: "Transfer-Encoding on HTTP/1.0",
  });
  assert.equal(kindOf({ version: "1.1", method: "POST", rawHeaders }), "ok");
});

Deno.test("readHead() reads the body's framing: none, a declared length, or chunked", () => {
  const framing = (rawHeaders: string[], method = "POST") => {
    const result = head({ method, rawHeaders: ["Host", "demo.example", ...rawHeaders] });
    return "body" in result ? result.body : result.kind;
  };
  assert.equal(framing([]), "none");
  assert.equal(framing(["Content-Length", "0"]), 0);
  assert.equal(framing(["Content-Length", "12"]), 12);
  assert.equal(framing(["content-length", " 7 "]), 7);
  assert.equal(framing(["Transfer-Encoding", "chunked"]), "chunked");
  for (const bad of ["", "1e3", "0x10", "-1", "5,5", "12345678901234567"]) {
    assert.equal(framing(["Content-Length", bad]), "bad_request", JSON.stringify(bad));
  }
});

Deno.test("readHead() refuses a body on GET, HEAD and TRACE in either framing", () => {
  for (const method of ["GET", "HEAD", "TRACE", "get"]) {
    for (const framing of [["Content-Length", "5"], ["Transfer-Encoding", "chunked"]]) {
      const rawHeaders = ["Host", "demo.example", ...framing];
      const expected = method === "get" ? "ok" : "body_not_allowed";
      assert.equal(kindOf({ method, rawHeaders }), expected, `${method} ${framing[0]}`);
    }
  }
  // No body, or an empty declared one, is fine on every method.
  for (const method of ["GET", "HEAD", "TRACE"]) {
    assert.equal(kindOf({ method, rawHeaders: ["Host", "demo.example"] }), "ok");
    assert.equal(
      kindOf({ method, rawHeaders: ["Host", "demo.example", "Content-Length", "0"] }),
      "ok",
    );
  }
  // The other methods may carry one; the proxy frames it upstream itself.
  for (const method of ["OPTIONS", "DELETE", "POST", "PUT", "PATCH"]) {
    const rawHeaders = ["Host", "demo.example", "Transfer-Encoding", "chunked"];
    assert.equal(kindOf({ method, rawHeaders }), "ok", method);
  }
});

Deno.test("readHead() makes the path canonical and refuses an ambiguous one", () => {
  const path = (url: string) => {
    const result = head({ url });
    return "path" in result ? result.path : result.kind;
  };
  for (const spelling of ["//admin/", "/./admin/", "/%61dmin/", "/%2e/admin/", "/x/../admin/"]) {
    assert.equal(path(spelling), "/admin/", spelling);
  }
  assert.equal(path("/a%2fb"), "ambiguous_path");
  assert.equal(path("/a%00b"), "ambiguous_path");
  assert.equal(path("/a/..;/b"), "ambiguous_path");
  assert.equal(path("http://demo.example//x/./y?q=1"), "/x/y");
  assert.equal(
    "path" in head({ url: "/a%2fb", method: "GET" }, {
      ...LIMITS,
      paths: { mergeSlashes: true, escapedSlashes: "keep" },
    }),
    true,
  );
});

Deno.test("readHead() refuses Transfer-Encoding beside Content-Length", () => {
  // (POST: on GET the body alone would be refused first.)
  const rawHeaders = [
    "Host",
    "demo.example",
    "content-length",
    "5",
    "TRANSFER-ENCODING",
    "chunked",
  ];
  assert.deepEqual(head({ method: "POST", rawHeaders }), {
    kind: "bad_request",
    detail: "Transfer-Encoding with Content-Length",
  });
});

Deno.test("readHead() refuses two Content-Length headers, even equal ones", () => {
  const rawHeaders = ["Host", "demo.example", "Content-Length", "5", "Content-Length", "5"];
  assert.deepEqual(head({ method: "POST", rawHeaders }), {
    kind: "bad_request",
    detail: "more than one Content-Length",
  });
  assert.equal(kindOf({ method: "POST", rawHeaders: rawHeaders.slice(0, 4) }), "ok");
});

Deno.test("readHead() refuses more header fields than the cap", () => {
  const rawHeaders = ["Host", "demo.example"];
  for (let i = 0; i < 4; i++) rawHeaders.push(`X-Extra-${i}`, "v");
  const limits = { headers: 4, targetBytes: 8192 };
  assert.deepEqual(head({ rawHeaders }, limits), {
    kind: "header_fields_too_large",
    detail: "5 header fields",
  });
  assert.equal(kindOf({ rawHeaders: rawHeaders.slice(0, 8) }, limits), "ok");
});

Deno.test("readHead() refuses a target longer than the cap with uri_too_long", () => {
  const limits = { headers: 100, targetBytes: 256 };
  assert.deepEqual(head({ url: `/${"a".repeat(256)}` }, limits), {
    kind: "uri_too_long",
    detail: "257 byte target",
  });
  assert.equal(kindOf({ url: `/${"a".repeat(255)}` }, limits), "ok");
});

Deno.test("readHead() refuses a Host value that is not a host", () => {
  assert.deepEqual(head({ rawHeaders: ["Host", "demo example"] }), {
    kind: "bad_request",
    detail: "invalid Host",
  });
  assert.equal(kindOf({ rawHeaders: ["Host", "demo.example/x"] }), "bad_request");
  assert.equal(kindOf({ rawHeaders: ["Host", "[::1]:9901"] }), "ok");
});

Deno.test("readHead() takes host, path and query from an absolute-form target", () => {
  assert.deepEqual(
    head({ url: "HTTP://Demo.Example:8080/p/q?x=1", rawHeaders: ["Host", "demo.example"] }),
    { method: "GET", path: "/p/q", query: "?x=1", host: "demo.example", body: "none" },
  );
  assert.deepEqual(head({ url: "https://demo.example", rawHeaders: ["Host", "demo.example"] }), {
    method: "GET",
    path: "/",
    query: "",
    host: "demo.example",
    body: "none",
  });
  assert.deepEqual(head({ url: "http://demo.example/x", version: "1.0", rawHeaders: [] }), {
    method: "GET",
    path: "/x",
    query: "",
    host: "demo.example",
    body: "none",
  });
});

Deno.test("readHead() never takes the path of an absolute-form target from its query", () => {
  assert.deepEqual(
    head({ url: "http://demo.example?next=/admin/x", rawHeaders: ["Host", "demo.example"] }),
    { method: "GET", path: "/", query: "?next=/admin/x", host: "demo.example", body: "none" },
  );
  assert.deepEqual(
    head({ url: "http://demo.example:8080?a=1", rawHeaders: ["Host", "demo.example:8080"] }),
    { method: "GET", path: "/", query: "?a=1", host: "demo.example", body: "none" },
  );
});

Deno.test("readHead() refuses an absolute-form authority that differs from Host", () => {
  assert.deepEqual(
    head({ url: "http://admin.example/", rawHeaders: ["Host", "demo.example"] }),
    { kind: "bad_request", detail: "absolute-form authority differs from Host" },
  );
  assert.equal(kindOf({ url: "ftp://demo.example/" }), "bad_request");
  assert.equal(kindOf({ url: "demo.example/x" }), "bad_request");
});

Deno.test("readHead() accepts OPTIONS * and nothing else with an asterisk target", () => {
  assert.deepEqual(head({ method: "OPTIONS", url: "*" }), {
    method: "OPTIONS",
    path: "*",
    query: "",
    host: "demo.example",
    body: "none",
  });
  assert.deepEqual(head({ method: "GET", url: "*" }), {
    kind: "bad_request",
    detail: "unsupported request target",
  });
});

Deno.test("readHead() strips a fragment from path and query", () => {
  const fragmentOf = (url: string) => {
    const result = head({ url });
    return "kind" in result ? result.kind : `${result.path}|${result.query}`;
  };
  assert.equal(fragmentOf("/docs#intro"), "/docs|");
  assert.equal(fragmentOf("/docs?v=2#intro"), "/docs|?v=2");
  assert.equal(fragmentOf("/docs?v=2#a?b"), "/docs|?v=2");
});

Deno.test("normalizeHost() lower-cases and drops port and trailing dot", () => {
  assert.equal(normalizeHost("Demo.Example"), "demo.example");
  assert.equal(normalizeHost("demo.example:8080"), "demo.example");
  assert.equal(normalizeHost("Demo.Example.:8080"), "demo.example");
  assert.equal(normalizeHost("demo.example."), "demo.example");
  assert.equal(normalizeHost(""), "");
});

Deno.test("normalizeHost() keeps an IPv6 literal in brackets, without its port", () => {
  assert.equal(normalizeHost("[::1]:9901"), "[::1]");
  assert.equal(normalizeHost("[FE80::1]"), "[fe80::1]");
  assert.equal(normalizeHost("[2001:db8::1]:443"), "[2001:db8::1]");
  assert.equal(normalizeHost("127.0.0.1:8080"), "127.0.0.1");
});

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

Deno.test("requestIdFor() keeps printable ASCII ids of up to 128 bytes", () => {
  for (const id of ["abc-123", "a b", "~!{}[]", "x".repeat(128), "0"]) {
    assert.equal(requestIdFor(id), id);
  }
});

Deno.test("requestIdFor() replaces absent, empty, long or unprintable ids with a UUID", () => {
  const replaced = [
    undefined,
    "",
    " leading",
    "trailing ",
    "x".repeat(129),
    "bad\u0001id",
    "tab\tid",
    "line\nbreak",
    "caf\u00e9",
    ["a", "b"],
  ];
  const ids = replaced.map((inbound) => requestIdFor(inbound));
  for (const [i, id] of ids.entries()) assert.match(id, UUID, `input ${i}`);
  assert.equal(new Set(ids).size, ids.length);
});

Deno.test("readHead() takes chunked alone as a Transfer-Encoding, nothing else", () => {
  const kind = (...fields: string[][]) =>
    kindOf({ method: "POST", rawHeaders: ["Host", "demo.example", ...fields.flat()] });
  assert.equal(kind(["Transfer-Encoding", "chunked"]), "ok");
  assert.equal(kind(["transfer-encoding", " Chunked "]), "ok");
  for (const value of ["identity, chunked", "gzip, chunked", "chunked, chunked", "identity"]) {
    assert.equal(kind(["Transfer-Encoding", value]), "bad_request", value);
  }
  assert.equal(
    kind(["Transfer-Encoding", "identity"], ["Transfer-Encoding", "chunked"]),
    "bad_request",
    "two fields",
  );
  assert.equal(
    kind(["Transfer-Encoding", "chunked"], ["Transfer-Encoding", "chunked"]),
    "bad_request",
  );
});
