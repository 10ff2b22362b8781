/**
 * Unit tests for proxy path rewrites (`compileRewrite()`): strip_prefix, replace with `{param}`
 * placeholders, and regex with `$1`, `${name}` and `$$`, plus every refusal at load.
 *
 * @module
 */
import assert from "node:assert/strict";
import {
  applyRewrite,
  compileRewrite,
  type Rewriter,
  type RewriteSpec,
} from "../src/proxy/rewrite.ts";

/** Compiles a rewrite that must be accepted. */
function compiled(spec: RewriteSpec, params: readonly string[] = []): Rewriter {
  const rewrite = compileRewrite(spec, params);
  if (typeof rewrite === "string") assert.fail(`refused: ${rewrite}`);
  return rewrite;
}

/** The message a refused rewrite yields. */
function refusal(spec: RewriteSpec, params: readonly string[] = []): string {
  const rewrite = compileRewrite(spec, params);
  assert.equal(typeof rewrite, "string", `accepted ${JSON.stringify(spec)}`);
  return rewrite as string;
}

/** Each path through `rewrite`, with no parameters. */
function through(rewrite: Rewriter, paths: readonly string[]): string[] {
  return paths.map((path) => rewrite(path, {}));
}

Deno.test("strip_prefix without a trailing slash removes it and keeps a leading '/'", () => {
  const rewrite = compiled({ strip_prefix: "/api" });
  assert.deepEqual(through(rewrite, ["/api/users", "/api", "/api/", "/api/a/b"]), [
    "/users",
    "/",
    "/",
    "/a/b",
  ]);
});

Deno.test("strip_prefix with a trailing slash also strips the bare prefix", () => {
  const rewrite = compiled({ strip_prefix: "/api/" });
  assert.deepEqual(through(rewrite, ["/api/users", "/api/", "/api", "/api/v1/x"]), [
    "/users",
    "/",
    "/",
    "/v1/x",
  ]);
});

Deno.test("strip_prefix leaves a path that does not start with the prefix untouched", () => {
  assert.deepEqual(through(compiled({ strip_prefix: "/api" }), ["/other", "/", "/ap", "/apix"]), [
    "/other",
    "/",
    "/ap",
    "/apix",
  ]);
  assert.deepEqual(
    through(compiled({ strip_prefix: "/api/" }), ["/apix", "/apix/y", "/v1/api/x"]),
    ["/apix", "/apix/y", "/v1/api/x"],
  );
});

Deno.test("strip_prefix '/' changes nothing", () => {
  assert.deepEqual(through(compiled({ strip_prefix: "/" }), ["/", "/a", "/a/b/"]), [
    "/",
    "/a",
    "/a/b/",
  ]);
});

Deno.test("replace sets the whole path, percent-encoding {param} values", () => {
  const rewrite = compiled({ replace: "/v2/users/{id}/tabs/{tab}" }, ["id", "tab"]);
  assert.equal(
    rewrite("/users/x/y", { id: "a b/c?d", tab: "100%" }),
    "/v2/users/a%20b%2Fc%3Fd/tabs/100%25",
  );
  assert.equal(rewrite("/anything", { id: "42", tab: "é" }), "/v2/users/42/tabs/%C3%A9");
});

Deno.test("replace without placeholders answers the same path for every request", () => {
  const rewrite = compiled({ replace: "/health" });
  assert.deepEqual(through(rewrite, ["/", "/a/b", "/health"]), ["/health", "/health", "/health"]);
});

Deno.test("replace refuses a placeholder the route's match does not define", () => {
  assert.equal(
    refusal({ replace: "/v2/{id}/{other}" }, ["id"]),
    "Placeholder {other} is not a path parameter",
  );
  assert.equal(refusal({ replace: "/v2/{id}" }), "Placeholder {id} is not a path parameter");
});

Deno.test("regex replaces the match with $1 and ${name} groups", () => {
  const numbered = compiled({ regex: "^/api/v(\\d+)/(.*)$", to: "/v$1/$2" });
  assert.equal(numbered("/api/v3/users/7", {}), "/v3/users/7");
  const named = compiled({ regex: "^/api/(?<rest>.*)$", to: "/v2/${rest}" });
  assert.equal(named("/api/users", {}), "/v2/users");
  const mixed = compiled({ regex: "^/(?<a>[a-z]+)/([0-9]+)$", to: "/$2/${a}" });
  assert.equal(mixed("/items/12", {}), "/12/items");
});

Deno.test("regex reads $$ as a literal dollar, never as a group", () => {
  const rewrite = compiled({ regex: "^/price/(\\d+)$", to: "/cost/$$$1/$$1" });
  assert.equal(rewrite("/price/5", {}), "/cost/$5/$1");
});

Deno.test("regex keeps the unmatched rest of the path and leaves a non-match untouched", () => {
  const rewrite = compiled({ regex: "/old/", to: "/new/" });
  assert.deepEqual(through(rewrite, ["/a/old/b", "/nothing/here"]), ["/a/new/b", "/nothing/here"]);
});

Deno.test("regex output always starts with '/' and an unmatched group is empty", () => {
  assert.equal(compiled({ regex: "^/api", to: "" })("/api/x", {}), "/x");
  assert.equal(compiled({ regex: "^/", to: "" })("/x", {}), "/x");
  assert.equal(compiled({ regex: "^/a(/b)?$", to: "/z$1" })("/a", {}), "/z");
});

Deno.test("regex refuses group numbers and names the expression does not have", () => {
  assert.equal(refusal({ regex: "^/a/(.*)$", to: "/$2" }), "Group $2 is not in the regex");
  assert.equal(refusal({ regex: "^/a/(.*)$", to: "/$0" }), "Group $0 is not in the regex");
  assert.equal(refusal({ regex: "^/a$", to: "/$1" }), "Group $1 is not in the regex");
  assert.equal(
    refusal({ regex: "^/(?<x>.*)$", to: "/${y}" }),
    "Group ${y} is not in the regex",
  );
});

Deno.test("regex refuses an invalid expression with the engine's reason", () => {
  const message = refusal({ regex: "^/(unclosed", to: "/x" });
  assert.match(message, /^Invalid regular expression: \S/);
  assert.match(message, /Unterminated group/);
  assert.match(refusal({ regex: "*", to: "/x" }), /^Invalid regular expression: /);
});

Deno.test("a rewrite must give exactly one of strip_prefix, replace and regex", () => {
  const exactlyOne = "Give exactly one of strip_prefix, replace and regex";
  assert.equal(refusal({}), exactlyOne);
  assert.equal(refusal({ strip_prefix: "/a", replace: "/b" }), exactlyOne);
  assert.equal(refusal({ replace: "/b", regex: "^/a", to: "/c" }), exactlyOne);
  assert.equal(refusal({ strip_prefix: "/a", replace: "/b", regex: "^/a", to: "/c" }), exactlyOne);
});

Deno.test("to goes only with regex, and regex needs to", () => {
  assert.equal(refusal({ strip_prefix: "/a", to: "/b" }), "to goes with regex");
  assert.equal(refusal({ replace: "/a", to: "/b" }), "to goes with regex");
  assert.equal(refusal({ regex: "^/a" }), "A regex rewrite needs to: the replacement path");
});

const RULES = { mergeSlashes: true, escapedSlashes: "reject" } as const;

Deno.test("compileRewrite() gives each form the base its results must stay under", () => {
  assert.equal(compiled({ strip_prefix: "/api" }).base, "/");
  assert.equal(compiled({ replace: "/profiles/{id}" }, ["id"]).base, "/profiles/");
  assert.equal(compiled({ replace: "/static/index.html" }).base, "/static/");
  assert.equal(compiled({ regex: "^/pub/(.*)$", to: "/v2/$1" }).base, "/v2/");
  assert.equal(compiled({ regex: "^/pub/(?<rest>.*)$", to: "/v2/x/${rest}" }).base, "/v2/x/");
  assert.equal(compiled({ regex: "^/pub/(.*)$", to: "/v2$1" }).base, "/");
  assert.equal(compiled({ regex: "pub", to: "/v2/" }).base, "/", "unanchored: the lead stays");
});

Deno.test("applyRewrite() makes the result canonical and refuses one that leaves its base", () => {
  const rewrite = compiled({ regex: "^/pub/(.*)x(.*)$", to: "/v2/$1$2" });
  assert.equal(applyRewrite(rewrite, "/pub/axb", {}, RULES), "/v2/ab");
  // The groups put ".." back together: "/v2/../secret" would be "/secret" upstream.
  const escaped = applyRewrite(rewrite, "/pub/.x./secret", {}, RULES);
  assert.equal(typeof escaped, "object");
  // "//" put together is merged, not refused.
  assert.equal(applyRewrite(rewrite, "/pub/ax/b", {}, RULES), "/v2/a/b");
  // A path the rewrite does not touch passes as it is (it is canonical already).
  assert.equal(applyRewrite(rewrite, "/other", {}, RULES), "/other");
});

Deno.test("applyRewrite() keeps a regex rewrite of the issue's example inside /v2/", () => {
  const rewrite = compiled({ regex: "^/pub/(.*)", to: "/v2/$1" });
  // Canonical request paths: the escapes were resolved before routing, so none gets here.
  for (const path of ["/pub/a/b.txt", "/pub/", "/pub/%2F"]) {
    const out = applyRewrite(rewrite, path, {}, RULES);
    if (typeof out === "string") assert.ok(out.startsWith("/v2/"), `${path} -> ${out}`);
  }
});
