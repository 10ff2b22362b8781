/**
 * Unit tests for the tenant route table (`RouteTable`, `parsePath`) and the actions the gateway
 * answers itself (`runAction`).
 *
 * @module
 */
import assert from "node:assert/strict";
import { type LocalAction, namesNoPath, placeholders, runAction } from "../src/proxy/actions.ts";
import { parsePath, type PathPattern, type RouteEntry, RouteTable } from "../src/proxy/routes.ts";
import type { RequestHead } from "../src/request/head.ts";

/** A route named `name`: `/x` exact, `/x/{p}` template, or `prefix:/x/`. */
function route(
  name: string,
  spec: string,
  criteria: { methods?: string[]; host?: string } = {},
): RouteEntry<string> {
  let pattern: PathPattern;
  if (spec.startsWith("prefix:")) {
    pattern = { kind: "prefix", prefix: spec.slice("prefix:".length) };
  } else {
    const parsed = parsePath(spec);
    if (typeof parsed === "string") throw new TypeError(parsed);
    pattern = parsed;
  }
  return {
    name,
    index: 0,
    pattern,
    methods: criteria.methods ? new Set(criteria.methods) : undefined,
    host: criteria.host,
    action: name,
  };
}

/** The name of the route `method path` matches on host `a.example`, or undefined. */
function winner(table: RouteTable<string>, path: string, method = "GET", host = "a.example") {
  return table.match(method, path, host)?.route.name;
}

Deno.test("parsePath() tells exact paths from templates", () => {
  assert.deepEqual(parsePath("/about"), { kind: "exact", path: "/about" });
  assert.deepEqual(parsePath("/users/{id}/posts/{post_id}"), {
    kind: "template",
    segments: ["users", { param: "id" }, "posts", { param: "post_id" }],
  });
  assert.equal(parsePath("/a/{1x}"), "A parameter must be a whole segment such as /users/{id}");
});

Deno.test("RouteTable.match() prefers an exact path over a template listed first", () => {
  const table = new RouteTable([route("template", "/users/{id}"), route("exact", "/users/me")]);
  assert.equal(winner(table, "/users/me"), "exact");
  assert.equal(winner(table, "/users/42"), "template");
});

Deno.test("RouteTable.match() prefers a template over a longer prefix", () => {
  const table = new RouteTable([
    route("prefix", "prefix:/users/"),
    route("template", "/users/{id}"),
  ]);
  assert.equal(winner(table, "/users/42"), "template");
  assert.equal(winner(table, "/users/42/avatar"), "prefix");
});

Deno.test("RouteTable.match() tries templates with more literal segments first", () => {
  const table = new RouteTable([
    route("one-literal", "/{kind}/{id}/edit"),
    route("two-literals", "/users/{id}/edit"),
    route("zero-literals", "/{a}/{b}/{c}"),
  ]);
  assert.equal(winner(table, "/users/7/edit"), "two-literals");
  assert.equal(winner(table, "/posts/7/edit"), "one-literal");
  assert.equal(winner(table, "/posts/7/view"), "zero-literals");
});

Deno.test("RouteTable.match() tries the longest prefix first", () => {
  const table = new RouteTable([
    route("root", "prefix:/"),
    route("static", "prefix:/static/"),
    route("images", "prefix:/static/img/"),
  ]);
  assert.equal(winner(table, "/static/img/a.png"), "images");
  assert.equal(winner(table, "/static/app.js"), "static");
  assert.equal(winner(table, "/anything"), "root");
});

Deno.test("RouteTable.match() breaks specificity ties by file order", () => {
  const table = new RouteTable([
    route("first-template", "/x/{a}"),
    route("second-template", "/{b}/y"),
    route("first-prefix", "prefix:/p/"),
    route("second-prefix", "prefix:/p/"),
    route("first-exact", "/e"),
    route("second-exact", "/e"),
  ]);
  assert.equal(winner(table, "/x/y"), "first-template");
  assert.equal(winner(table, "/p/q"), "first-prefix");
  assert.equal(winner(table, "/e"), "first-exact");
});

Deno.test("RouteTable.match() falls through to the next candidate on a method mismatch", () => {
  const table = new RouteTable([
    route("get-exact", "/a", { methods: ["GET", "HEAD"] }),
    route("post-exact", "/a", { methods: ["POST"] }),
    route("template", "/{x}", { methods: ["PUT"] }),
    route("prefix", "prefix:/"),
  ]);
  assert.equal(winner(table, "/a", "HEAD"), "get-exact");
  assert.equal(winner(table, "/a", "POST"), "post-exact");
  assert.equal(winner(table, "/a", "PUT"), "template");
  assert.equal(winner(table, "/a", "DELETE"), "prefix");
  assert.equal(winner(table, "/a", "get"), "prefix");
});

Deno.test("RouteTable.match() falls through to the next candidate on a host mismatch", () => {
  const table = new RouteTable([
    route("www-only", "/", { host: "www.a.example" }),
    route("www-template", "/{page}", { host: "www.a.example" }),
    route("any-host", "prefix:/"),
  ]);
  assert.equal(winner(table, "/", "GET", "www.a.example"), "www-only");
  assert.equal(winner(table, "/", "GET", "a.example"), "any-host");
  assert.equal(winner(table, "/about", "GET", "www.a.example"), "www-template");
  assert.equal(winner(table, "/about", "GET", "a.example"), "any-host");
});

Deno.test("RouteTable.match() returns undefined when nothing matches", () => {
  const table = new RouteTable([route("about", "/about"), route("docs", "prefix:/docs/")]);
  assert.equal(table.match("GET", "/docs", "a.example"), undefined);
  assert.equal(table.match("GET", "/about/", "a.example"), undefined);
  assert.equal(table.match("GET", "/About", "a.example"), undefined);
});

Deno.test("RouteTable.match() percent-decodes template parameters", () => {
  const table = new RouteTable([route("user", "/users/{name}/{file}")]);
  const match = table.match("GET", "/users/J%C3%BCrgen/a%2Fb%20c.txt", "a.example");
  assert.equal(match?.route.name, "user");
  assert.deepEqual(match?.params, { name: "Jürgen", file: "a/b c.txt" });
});

Deno.test("RouteTable.match() does not match malformed percent-encoding or empty segments", () => {
  const table = new RouteTable([route("user", "/users/{id}"), route("fallback", "prefix:/users")]);
  assert.equal(winner(table, "/users/%E0%A4%A"), "fallback");
  assert.equal(winner(table, "/users/%zz"), "fallback");
  assert.equal(winner(table, "/users/"), "fallback");
  assert.equal(winner(table, "/users/1/2"), "fallback");
  const bare = new RouteTable([route("user", "/users/{id}")]);
  assert.equal(bare.match("GET", "/users/%C3", "a.example"), undefined);
});

const HEAD: RequestHead = {
  method: "GET",
  path: "/old/a%20b",
  query: "?x=1&y=2",
  host: "a.example",
  body: "none",
};

/** A redirect action as `compileTenants` builds it. */
function redirect(location: string, status = 302): LocalAction {
  return { kind: "redirect", status, location, keepPath: namesNoPath(location) };
}

Deno.test("runAction() answers respond with its status, headers and body", () => {
  const action: LocalAction = {
    kind: "respond",
    status: 201,
    headers: { "content-type": "text/plain" },
    body: "made",
  };
  assert.deepEqual(runAction(action, HEAD, {}), {
    status: 201,
    headers: { "content-type": "text/plain" },
    body: "made",
  });
  // A body file is opened at every request: tests/rooted_read_test.ts.
});

Deno.test("runAction() keeps path and query when the redirect location names no path", async () => {
  assert.deepEqual(runAction(redirect("https://new.example", 308), HEAD, {}), {
    status: 308,
    headers: { location: "https://new.example/old/a%20b?x=1&y=2" },
    body: "",
  });
  const bare = { ...HEAD, path: "/", query: "" };
  assert.equal(
    (await runAction(redirect("http://new.example:8080"), bare, {})).headers?.location,
    "http://new.example:8080/",
  );
});

Deno.test("runAction() uses a location with a path verbatim", () => {
  for (
    const location of ["https://new.example/", "https://new.example/landing?from=old", "/home"]
  ) {
    assert.deepEqual(runAction(redirect(location, 301), HEAD, {}), {
      status: 301,
      headers: { location },
      body: "",
    });
  }
});

Deno.test("runAction() percent-encodes substituted placeholders", async () => {
  const action = redirect("/profiles/{id}/{tab}");
  assert.equal(action.kind === "redirect" && action.keepPath, false);
  const reply = await runAction(action, HEAD, { id: "a b/c?d#e", tab: "ünï" });
  assert.deepEqual(reply.headers, { location: "/profiles/a%20b%2Fc%3Fd%23e/%C3%BCn%C3%AF" });
  assert.equal(reply.status, 302);
});

Deno.test("placeholders() and namesNoPath() read a redirect location", () => {
  assert.deepEqual(placeholders("https://x.example/{a}/{b_2}/{3c}"), ["a", "b_2"]);
  assert.equal(namesNoPath("https://x.example"), true);
  assert.equal(namesNoPath("HTTP://x.example:81"), true);
  assert.equal(namesNoPath("https://x.example/"), false);
  assert.equal(namesNoPath("https://x.example?q"), false);
  assert.equal(namesNoPath("/path"), false);
});
