/**
 * Unit tests for the WAF's decodings (`variants`) and the contract of `inspect()`: options switch
 * detections off one by one, headers are read only when listed, only the first 8 KiB of a
 * location is inspected, and no input makes it throw.
 *
 * @module
 */
import assert from "node:assert/strict";
import { inspect, variants, WAF_INSPECT_LIMIT, type WafOptions } from "../src/policy/waf.ts";
import { mulberry32 } from "./fixtures/random.ts";

const ALL: WafOptions = { sqli: true, xss: true, traversal: true, headers: [] };

/** A request with the given path, query and (lower-case) headers. */
function request(path: string, query = "", headers: Readonly<Record<string, string>> = {}) {
  const asked: string[] = [];
  return {
    asked,
    path,
    query,
    header(name: string) {
      asked.push(name);
      return headers[name];
    },
  };
}

Deno.test("variants() decodes percent twice, '+' in a query, entities, case and SQL comments", () => {
  assert.deepEqual(variants("/a/b", false), ["/a/b"]);
  assert.deepEqual(variants("A+B%2BC", true), ["A+B%2BC", "a b+c"]);
  assert.deepEqual(variants("A+B", false), ["A+B", "a+b"]);
  assert.deepEqual(variants("%252e%252e%252f", false), ["%252e%252e%252f", "%2e%2e%2f", "../"]);
  assert.deepEqual(variants("%c0%ae%c0%ae%c0%af", false), ["%c0%ae%c0%ae%c0%af", "../"]);
  assert.deepEqual(variants("%u002E%u002e%5C", false), ["%u002E%u002e%5C", "..\\"]);
  assert.deepEqual(variants("&#60;&#x3E;&#0039;&quot;&sol;&#58", false), [
    "&#60;&#x3E;&#0039;&quot;&sol;&#58",
    "<>'\"/:",
  ]);
  assert.deepEqual(variants("%26lt%3Bb%26gt%3B", true), ["%26lt%3Bb%26gt%3B", "<b>"]);
  assert.deepEqual(variants("UN/**/ION  SEL/*x*/ECT", false), [
    "UN/**/ION  SEL/*x*/ECT",
    "un/**/ion  sel/*x*/ect",
    "union select",
  ]);
  assert.deepEqual(variants("/*!50000union*/select", false), [
    "/*!50000union*/select",
    " union select",
  ]);
});

Deno.test("variants() tolerates malformed escapes and invalid UTF-8", () => {
  assert.deepEqual(variants("100%", true), ["100%"]);
  assert.deepEqual(variants("%zz%4", true), ["%zz%4"]);
  assert.deepEqual(variants("%ff%C3%A9%00", false), ["%ff%C3%A9%00", "\ufffdé\0"]);
  assert.deepEqual(variants("&#600;&#x3c1;&bogus;", false), ["&#600;&#x3c1;&bogus;"]);
  assert.ok(variants("%25%2525%252525", false).length <= 4);
});

Deno.test("inspect() runs only the detections its options switch on", () => {
  const sqli = request("/a", "?id=1%27+or+%271%27%3D%271");
  const xss = request("/a", "?q=%3Cscript%3E");
  const traversal = request("/a/../../etc/passwd");
  const only = (flag: "sqli" | "xss" | "traversal") => ({
    sqli: false,
    xss: false,
    traversal: false,
    headers: [],
    [flag]: true,
  });
  assert.equal(inspect(sqli, only("sqli"))?.detection, "sql_injection");
  assert.equal(inspect(sqli, only("xss")), undefined);
  assert.equal(inspect(sqli, only("traversal")), undefined);
  assert.equal(inspect(xss, only("xss"))?.detection, "xss");
  assert.equal(inspect(xss, only("sqli")), undefined);
  assert.equal(inspect(xss, only("traversal")), undefined);
  assert.equal(inspect(traversal, only("traversal"))?.detection, "path_traversal");
  assert.equal(inspect(traversal, only("sqli")), undefined);
  assert.equal(inspect(traversal, only("xss")), undefined);
  const none = { sqli: false, xss: false, traversal: false, headers: ["user-agent"] };
  const everything = request("/../x", "?q=<script>' or 1=1--", { "user-agent": "<script>" });
  assert.equal(inspect(everything, none), undefined);
  assert.deepEqual(everything.asked, []);
});

Deno.test("inspect() reports the first finding: path, then query, then headers in listed order", () => {
  const headers = { "user-agent": "' or 1=1--", referer: "<script>" };
  const both = request("/a", "?q=%3Cscript%3E", headers);
  assert.equal(inspect(both, ALL)?.location, "query");
  const listed = { ...ALL, headers: ["referer", "user-agent"] };
  assert.deepEqual(inspect(request("/a", "", headers), listed), {
    detection: "xss",
    location: "header:referer",
    rule: "xss.script_tag",
  });
  assert.equal(inspect(request("/../a", "?q=<script>"), ALL)?.location, "path");
  assert.equal(inspect(request("/a", "?<script>' or 1=1--"), ALL)?.detection, "sql_injection");
});

Deno.test("inspect() reads headers only when listed, by their lower-case name", () => {
  const headers = { "user-agent": "<script>alert(1)</script>", "x-search": "' or '1'='1" };
  const unlisted = request("/", "", headers);
  assert.equal(inspect(unlisted, ALL), undefined);
  assert.deepEqual(unlisted.asked, []);
  const listed = request("/", "", headers);
  const finding = inspect(listed, { ...ALL, headers: ["x-search", "cookie"] });
  assert.deepEqual(finding, {
    detection: "sql_injection",
    location: "header:x-search",
    rule: "sqli.tautology",
  });
  assert.deepEqual(listed.asked, ["x-search"]);
  const absent = request("/", "", headers);
  assert.equal(inspect(absent, { ...ALL, headers: ["cookie", "referer"] }), undefined);
  assert.deepEqual(absent.asked, ["cookie", "referer"]);
});

Deno.test("inspect() reads the query with or without its leading '?'", () => {
  assert.equal(inspect(request("/", "?q=%3Cscript%3E"), ALL)?.detection, "xss");
  assert.equal(inspect(request("/", "q=%3Cscript%3E"), ALL)?.detection, "xss");
  assert.equal(inspect(request("/", "?"), ALL), undefined);
  assert.equal(inspect(request("/", "&&&"), ALL), undefined);
});

Deno.test("inspect() inspects only the first 8 KiB of each location", () => {
  const a = (n: number) => "a".repeat(n);
  const limit = WAF_INSPECT_LIMIT;
  assert.equal(inspect(request(`/${a(limit - 5)}/../`), ALL)?.rule, "traversal.dot_segment");
  assert.equal(inspect(request(`/${a(limit)}/../../x`), ALL), undefined);
  assert.equal(inspect(request("/", `?q=${a(limit - 9)}<script`), ALL)?.detection, "xss");
  assert.equal(inspect(request("/", `?q=${a(limit)}<script>`), ALL), undefined);
  const referer = { ...ALL, headers: ["referer"] };
  assert.equal(
    inspect(request("/", "", { referer: `${a(limit - 7)}<script` }), referer)?.rule,
    "xss.script_tag",
  );
  assert.equal(inspect(request("/", "", { referer: `${a(limit)}<script>` }), referer), undefined);
});

const PIECES = [
  "%",
  "%2",
  "%25",
  "%u",
  "%u00",
  "%c0%",
  "&#",
  "&#x",
  ";",
  "&",
  "=",
  "+",
  "'",
  '"',
  "`",
  "<",
  ">",
  "/",
  "\\",
  "..",
  "/*",
  "*/",
  "/*!",
  "--",
  "#",
  "(",
  ")",
  "or",
  "union",
  "select",
  "on",
  "script",
  " ",
  "\t",
  "\0",
  "\ud800",
  "é",
  "𝓍",
  "a",
  "1",
  "0x",
  ":",
  "javascript",
  "etc/passwd",
]; // deno-fmt-ignore

/** A random string mixing WAF-relevant fragments and random code units, up to ~12 KiB. */
function fuzzString(next: () => number): string {
  const long = next() < 0.02;
  const parts = Math.floor(next() * (long ? 3000 : 40));
  let text = "";
  for (let i = 0; i < parts; i++) {
    text += next() < 0.8
      ? PIECES[Math.floor(next() * PIECES.length)]
      : String.fromCharCode(Math.floor(next() * 0x10000));
  }
  return text;
}

Deno.test("inspect() never throws on 10,000 seeded random strings", () => {
  const next = mulberry32(0x5eed);
  const options = { ...ALL, headers: ["user-agent", "cookie"] };
  const detections = new Set([undefined, "sql_injection", "xss", "path_traversal"]);
  let found = 0;
  for (let i = 0; i < 10_000; i++) {
    const text = fuzzString(next);
    const finding = inspect(request(text, text, { "user-agent": text, cookie: text }), options);
    assert.ok(detections.has(finding?.detection), `Bad finding for string ${i}`);
    if (finding) found++;
    assert.ok(variants(text, i % 2 === 0).length <= 4);
  }
  assert.ok(found > 0 && found < 10_000, `Implausible ${found} findings out of 10,000`);
});
