/**
 * Tests for `canonicalPath`, written as an attacker would: every spelling of a denied prefix that
 * an upstream normaliser folds together must come out as one path, ambiguous paths are refused,
 * and generated hostile paths must be fixed points that two independent normalisers (WHATWG `URL`
 * and Python's `urljoin`) agree with.
 *
 * @module
 */
import assert from "node:assert/strict";
import {
  canonicalPath,
  DEFAULT_PATH_RULES,
  type EscapedSlashAction,
  type PathRules,
} from "../src/request/canonical_path.ts";
import { mulberry32 } from "./fixtures/random.ts";

const ACTIONS: readonly EscapedSlashAction[] = ["reject", "keep", "decode"];
const ALL_RULES: readonly PathRules[] = ACTIONS.flatMap((escapedSlashes) => [
  { mergeSlashes: true, escapedSlashes },
  { mergeSlashes: false, escapedSlashes },
]);

/** The canonical path of `raw` under `rules` (merge, `action`), or "REFUSED". */
function canon(raw: string, action: EscapedSlashAction = "reject", mergeSlashes = true): string {
  const result = canonicalPath(raw, { mergeSlashes, escapedSlashes: action });
  if (typeof result === "string") return result;
  assert.equal(result.refused, true);
  assert.match(result.detail, /^[A-Z][\x20-\x7e]+[^.]$/, "a log-safe detail");
  return "REFUSED";
}

/** Asserts each `[raw, expected]` pair under `action` and merge. */
function expectAll(pairs: [string, string][], action?: EscapedSlashAction, merge?: boolean): void {
  for (const [raw, expected] of pairs) {
    assert.equal(
      canon(raw, action, merge),
      expected,
      `${JSON.stringify(raw)} (${action}, ${merge})`,
    );
  }
}

Deno.test("canonicalPath() returns an already canonical path unchanged", () => {
  // deno-fmt-ignore
  const clean = [
    "/", "/api/v1/users/42", "/.well-known/acme", "/a/", "/a;b=c/d", "/a/...", "/~@:!$&'()*+,=",
  ];
  for (const path of clean) assert.equal(canon(path), path);
  assert.deepEqual(DEFAULT_PATH_RULES, { mergeSlashes: true, escapedSlashes: "reject" });
});

Deno.test("canonicalPath() decodes %61 to a and removes the dot segment of /%2e/admin", () => {
  expectAll([
    ["/%2e/%61dmin", "/admin"],
    ["/%2E/%61%64%6D%69%6E/x", "/admin/x"],
    ["/%2Ewell-known/acme", "/.well-known/acme"],
  ]);
});

Deno.test("canonicalPath() folds every bypass spelling of /admin into what a /admin prefix matches", () => {
  // deno-fmt-ignore
  const spellings = [
    "//admin/", "///admin", "/./admin/", "/%61dmin/", "/%2e/admin/", "/%2E/admin", "/x/../admin/",
    "/x/%2e%2e/admin", "/x/%2E%2e/admin", "/x/.%2e/admin", "/../admin", "/%2e%2e/admin",
    "/x/y/../../admin", "/.//./admin", "/admin/.", "/admin//", "/admi%6E",
  ];
  for (const action of ACTIONS) {
    for (const raw of spellings) assert.match(canon(raw, action), /^\/admin(\/|$)/, raw);
  }
  expectAll([
    ["/x\\..\\admin", "/admin"],
    ["/x%2F..%5cadmin", "/admin"],
    ["/%2fadmin", "/admin"],
  ], "decode");
});

Deno.test("canonicalPath() resolves /pub/../secret.txt and /pub/%2e%2e/secret.txt to /secret.txt", () => {
  for (const action of ACTIONS) {
    expectAll([
      ["/pub/../secret.txt", "/secret.txt"],
      ["/pub/%2e%2e/secret.txt", "/secret.txt"],
    ], action);
  }
});

Deno.test("canonicalPath() refuses /pub/..%2fsecret.txt by default, keeps it as data or decodes it", () => {
  expectAll([["/pub/..%2fsecret.txt", "REFUSED"], ["/pub/..%2Fsecret.txt", "REFUSED"]]);
  expectAll([
    ["/pub/..%2fsecret.txt", "/pub/..%2Fsecret.txt"],
    ["/a%2f%2F..", "/a%2F%2F.."],
    ["/a%2f/..", "/"],
  ], "keep");
  expectAll([["/pub/..%2fsecret.txt", "/secret.txt"], ["/a%2f%2F..%2fb", "/b"]], "decode");
  expectAll([["/a%2f%2F..%2fb", "/a/b"]], "decode", false);
});

Deno.test("canonicalPath() refuses %00 under every rule and keeps other encoded controls", () => {
  for (const rules of ALL_RULES) {
    assert.equal(canon("/a%00.txt", rules.escapedSlashes, rules.mergeSlashes), "REFUSED");
  }
  expectAll([["/a%0d%0Ab", "/a%0D%0Ab"], ["/%01", "/%01"]]);
});

Deno.test("canonicalPath() refuses a % without two hex digits after it", () => {
  for (const raw of ["/%", "/a%4", "/%zz", "/%4g", "/%%41", "/%u0041", "/%41%", "/%2"]) {
    expectAll([[raw, "REFUSED"]], "decode");
  }
  expectAll([["/%41", "/A"], ["/%2541", "/%2541"]]);
});

Deno.test("canonicalPath() upper-cases kept hex and decodes unreserved escapes in either case", () => {
  expectAll([
    ["/a%3fb", "/a%3Fb"],
    ["/%c3%A9", "/%C3%A9"],
    ["/%7e%7E%2d%5f%30", "/~~-_0"],
    ["/%4a%4A", "/JJ"],
    ["/%3B%3b", "/%3B%3B"],
  ]);
});

Deno.test("canonicalPath() refuses a dot segment with a ; parameter, raw or decoded", () => {
  // deno-fmt-ignore
  const refused = [
    "/..;/admin", "/.;/admin", "/pub/..;x/admin", "/%2e%2e;/admin", "/%2E;x", "/..%3bfoo",
    "/a/..;", "/a/.%3B",
  ];
  for (const raw of refused) expectAll([[raw, "REFUSED"]], "keep");
  const accepted = ["/a;b/c", "/...;x", "/..a;b", "/.x;y", "/a/;../b"];
  for (const raw of accepted) assert.equal(canon(raw), raw);
});

Deno.test("canonicalPath() treats a raw or encoded backslash by escapedSlashes", () => {
  expectAll([["/a\\b", "REFUSED"], ["/a%5cb", "REFUSED"]], "reject");
  expectAll([
    ["/a\\b", "/a%5Cb"],
    ["/a%5cb", "/a%5Cb"],
    ["/x\\..\\admin", "/x%5C..%5Cadmin"],
  ], "keep");
  expectAll([
    ["/a\\b", "/a/b"],
    ["/a%5cb", "/a/b"],
    ["/a\\\\b", "/a/b"],
    ["/x\\..\\admin", "/admin"],
  ], "decode");
  expectAll([["/a\\\\b", "/a//b"]], "decode", false);
});

Deno.test("canonicalPath() refuses raw controls, space, # and ?", () => {
  for (const bad of ["\x00", "\t", "\n", "\r", "\x1f", "\x7f", " ", "#", "?"]) {
    for (const rules of ALL_RULES) {
      assert.equal(canon(`/a${bad}b`, rules.escapedSlashes, rules.mergeSlashes), "REFUSED");
    }
  }
});

Deno.test("canonicalPath() percent-encodes latin1 bytes and refuses chars above U+00FF", () => {
  expectAll([
    ["/caf\u00e9", "/caf%E9"],
    ["/\u00c3\u00a9", "/%C3%A9"],
    ["/\u0080\u00ff", "/%80%FF"],
  ]);
  expectAll([["/\u0100", "REFUSED"], ["/\u{1f600}", "REFUSED"], ["/\u2215admin", "REFUSED"]]);
});

Deno.test("canonicalPath() percent-encodes the raw characters RFC 3986 keeps out of a path", () => {
  expectAll([['/"<>^`{|}[]', "/%22%3C%3E%5E%60%7B%7C%7D%5B%5D"], ["/a|b/../c", "/c"]]);
});

Deno.test("canonicalPath() merges slashes only when mergeSlashes is on", () => {
  const cases: [string, string, string][] = [
    ["/a//b", "/a/b", "/a//b"],
    ["/a//../b", "/b", "/a/b"],
    ["/a/b//..", "/a/", "/a/b/"],
    ["//", "/", "//"],
    ["/a//", "/a/", "/a//"],
    ["//a/./", "/a/", "//a/"],
    ["/..//a", "/a", "//a"],
  ];
  for (const [raw, merged, kept] of cases) {
    assert.equal(canon(raw, "reject", true), merged, raw);
    assert.equal(canon(raw, "reject", false), kept, raw);
  }
});

Deno.test("canonicalPath() removes dot segments as RFC 3986 §5.2.4 does", () => {
  expectAll([
    ["/a/.", "/a/"],
    ["/a/b/..", "/a/"],
    ["/..", "/"],
    ["/.", "/"],
    ["/../../a", "/a"],
    ["/a/./b/../c", "/a/c"],
    ["/a/b/c/./../../g", "/a/g"],
    ["/mid/content=5/../6", "/mid/6"],
    ["/a/b..", "/a/b.."],
    ["/a/.b", "/a/.b"],
  ]);
});

Deno.test("canonicalPath() refuses a path that does not start with /", () => {
  for (const raw of ["", "a/b", "*", "%2fa", "\\admin"]) {
    assert.equal(canon(raw, "decode"), "REFUSED", raw);
  }
});

// ---- Generated hostile paths --------------------------------------------------------------------

// Tokens a path is built from, repeated for weight: whole dot segments in several spellings,
// the ways to write a slash, escapes to decode or keep, and characters to encode.
// deno-fmt-ignore
const COMMON = [
  "/", "/", "/", "/", "/..", "/..", "/.", "/%2e%2e", "/%2E", "/.%2e", "/%2e.", ".", "..", "%2e",
  "%2E", "%2f", "%2F", "%5c", "\\", "a", "b", "%61", "%41", ";", "%3b", "%25", "%3f", "~", "%7E",
  "%7e", "\u00c3\u00a9", "|", "-", "x.y", "=", "@",
];
const RARE = ["%", "%4", "%zz", "%00", " ", "\t", "#", "\u0100"];

/**
 * `count` random paths from `seed`, each "/" + 1 to 12 tokens; a token is rare (refused) with a
 * chance growing with the length, so about one path in ten is refused for one.
 */
function hostilePaths(seed: number, count: number): string[] {
  const random = mulberry32(seed);
  const pick = (tokens: readonly string[]) => tokens[Math.floor(random() * tokens.length)];
  return Array.from({ length: count }, () => {
    let path = "/";
    const length = 1 + Math.floor(random() * 12);
    for (let i = 0; i < length; i++) path += random() < 0.003 * length ? pick(RARE) : pick(COMMON);
    return path;
  });
}

const PATHS = hostilePaths(0x5eed, 4000);
const RFC_CHARS = /^\/[A-Za-z0-9\-._~!$&'()*+,;=:@/%]*$/;
const ESCAPE = /%(..)/g;

/** Asserts what every canonical path holds: a fixed point with nothing left to normalise. */
function assertCanonical(out: string, rules: PathRules, raw: string): void {
  const where = `${JSON.stringify(raw)} -> ${JSON.stringify(out)} (${JSON.stringify(rules)})`;
  assert.equal(canonicalPath(out, rules), out, `not idempotent: ${where}`);
  assert.match(out, RFC_CHARS, where);
  assert.ok(!out.split("/").some((s) => s === "." || s === ".."), `dot segment: ${where}`);
  for (const [, hex] of out.matchAll(ESCAPE)) {
    assert.match(hex, /^[0-9A-F]{2}$/, `lower-case or broken escape: ${where}`);
    assert.doesNotMatch(String.fromCharCode(parseInt(hex, 16)), /[A-Za-z0-9\-._~]/, where);
  }
  if (rules.mergeSlashes) assert.ok(!out.includes("//"), `"//" left: ${where}`);
}

Deno.test("canonicalPath() output is a fixed point with nothing left to normalise, for generated paths", () => {
  let accepted = 0;
  for (const raw of PATHS) {
    const outputs = ALL_RULES.map((rules) => canonicalPath(raw, rules));
    outputs.forEach((out, i) => {
      if (typeof out !== "string") return;
      accepted++;
      assertCanonical(out, ALL_RULES[i], raw);
    });
    // Without an escaped slash to act on, the action cannot matter: reject's answer is everyone's.
    if (typeof outputs[0] === "string") {
      assert.deepEqual(outputs.filter((_, i) => i % 2 === 0), [outputs[0], outputs[0], outputs[0]]);
    }
  }
  assert.ok(accepted > PATHS.length * 2, `only ${accepted} accepted`);
});

/**
 * An independent reading of the escape rules (regex tokens instead of a char table): the path with
 * escapes normalised and characters encoded, before merging and dot removal; undefined if refused.
 */
function normaliseEscapes(raw: string, action: EscapedSlashAction): string | undefined {
  let out = "";
  for (const token of raw.startsWith("/") ? raw.match(/%[0-9a-f]{2}|[^]/gi)! : ["%"]) {
    const char = token.length === 3 ? String.fromCharCode(parseInt(token.slice(1), 16)) : token;
    if (token === "%" || token === "%00" || token > "\u00ff" || /[\0- \x7f#?]/.test(token)) {
      return undefined;
    }
    if (char === "/" && token.length === 3 || char === "\\") {
      if (action === "reject") return undefined;
      out += action === "decode" ? "/" : token.length === 3 ? token.toUpperCase() : "%5C";
    } else if (/[A-Za-z0-9\-._~]/.test(char) || /[!$&'()*+,;=:@/]/.test(token)) {
      out += char;
    } else {
      out += `%${char.charCodeAt(0).toString(16).toUpperCase().padStart(2, "0")}`;
    }
  }
  return out.split("/").some((s) => /^\.\.?(;|%3B)/.test(s)) ? undefined : out;
}

/**
 * WHATWG `URL` and RFC 3986 §5.2.4 differ on raw paths: WHATWG keeps `%61` and lower-case hex,
 * reads `\` as `/`, percent-encodes a smaller set (`|` `^` `[` `]` stay raw), refuses nothing and
 * never merges `//`. Once escapes are normalised (no `\`, `%2e` already `.`) and slashes merged the
 * same way, the two dot-segment removals agree on every generated path: `..` pops an empty segment
 * in both and either dot as the last segment leaves a trailing "/".
 */
Deno.test("canonicalPath() agrees with WHATWG URL on dot segments, for generated paths", () => {
  for (const rules of ALL_RULES) {
    for (const raw of PATHS) {
      const escaped = normaliseEscapes(raw, rules.escapedSlashes);
      const merged = escaped !== undefined && rules.mergeSlashes
        ? escaped.replace(/\/+/g, "/")
        : escaped;
      const expected = merged === undefined ? "REFUSED" : new URL(`http://h${merged}`).pathname;
      assert.equal(
        canon(raw, rules.escapedSlashes, rules.mergeSlashes),
        expected,
        `${JSON.stringify(raw)} ${JSON.stringify(rules)}`,
      );
    }
  }
});

/** The generated paths that `decode` accepts, with escapes normalised and slashes merged. */
const MERGED = PATHS.flatMap((raw) => {
  const escaped = normaliseEscapes(raw, "decode");
  return escaped === undefined ? [] : [{ raw, merged: escaped.replace(/\/+/g, "/") }];
});

// urlparse() splits a ";" parameter off the last segment and drops it when empty, so ";" travels
// as "!", which no generated path holds.
const URLJOIN = `import json, sys, urllib.parse as u
print(json.dumps([u.urljoin("http://h/", p.replace(";", "!"))[8:].replace("!", ";")
                  for p in json.loads(sys.argv[1])]))`;

/** Python's `urljoin` of each path in one run, or undefined where `python3` cannot be started. */
function pythonUrljoin(paths: readonly string[]): string[] | undefined {
  let output: Deno.CommandOutput;
  try {
    output = new Deno.Command("python3", { args: ["-c", URLJOIN, JSON.stringify(paths)] })
      .outputSync();
  } catch {
    return undefined;
  }
  if (!output.success) throw new Error(new TextDecoder().decode(output.stderr));
  return JSON.parse(new TextDecoder().decode(output.stdout));
}

const JOINED = pythonUrljoin(MERGED.map(({ merged }) => merged));

/**
 * Python's `urljoin` removes dot segments as RFC 3986 §5.2.4 but pops the root's empty segment on
 * `..`, which only shows when empty segments remain, so it is compared with slashes merged.
 */
Deno.test({
  name: "canonicalPath() agrees with Python's urljoin on dot segments, for generated paths",
  ignore: JOINED === undefined,
  fn() {
    assert.ok(!PATHS.some((raw) => raw.includes("!")));
    assert.equal(JOINED?.length, MERGED.length);
    MERGED.forEach(({ raw }, i) => {
      assert.equal(canon(raw, "decode"), JOINED?.[i], JSON.stringify(raw));
    });
  },
});
