/**
 * Unit tests for route criteria: header, query and cookie conditions as `compileRoute()` builds
 * them and `RouteTable.match()` checks them (all must hold; a failed candidate falls through to the
 * next), and `requestFacts()`, which parses the query and the Cookie header for them.
 *
 * @module
 */
import assert from "node:assert/strict";
import type { IncomingHttpHeaders } from "node:http";
import type { RouteDocument } from "../src/config/tenant_schema.ts";
import { requestFacts } from "../src/pipeline/tenant_phases.ts";
import { compileRoute } from "../src/proxy/route_compile.ts";
import { type Criteria, parsePath, type RequestFacts, RouteTable } from "../src/proxy/routes.ts";
import type { RequestContext } from "../src/request/context.ts";

/** A route named `name` on `spec` (`/x`, `/x/{p}` or `prefix:/x/`) with these criteria. */
function route(name: string, spec: string, criteria?: Partial<Criteria>) {
  const parsed = spec.startsWith("prefix:")
    ? { kind: "prefix" as const, prefix: spec.slice("prefix:".length) }
    : parsePath(spec);
  if (typeof parsed === "string") throw new TypeError(parsed);
  return {
    name,
    index: 0,
    pattern: parsed,
    criteria: criteria && { headers: [], query: [], cookies: [], ...criteria },
    action: name,
  };
}

/** The facts of a request with these headers and query (`?a=1` or ""). */
function factsOf(headers: IncomingHttpHeaders, query = ""): RequestFacts {
  const context = { headers, head: { method: "GET", path: "/", query, host: "a.example" } };
  return requestFacts(context as unknown as RequestContext);
}

/** The winning route's name for `GET path` with these facts. */
function winner(table: RouteTable<string>, path: string, facts?: RequestFacts) {
  return table.match("GET", path, "a.example", facts)?.route.name;
}

Deno.test("compileRoute() lower-cases header names and keeps query and cookie names", async () => {
  const document: RouteDocument = {
    match: {
      path: "/api",
      headers: { "X-Api-Key": "k1", "Accept": true },
      query: { Debug: true, v: "2" },
      cookies: { Session: "abc" },
    },
    respond: { status: 200, headers: {}, body: "ok" },
    priority: 5,
  };
  const problems: unknown[] = [];
  const entry = await compileRoute(
    document,
    { dir: "/tmp", index: 3, names: ["a.example"], tenant: "a.example" },
    (...problem) => problems.push(problem),
  );
  assert.deepEqual(problems, []);
  assert.deepEqual(entry?.criteria, {
    headers: [["x-api-key", "k1"], ["accept", true]],
    query: [["Debug", true], ["v", "2"]],
    cookies: [["Session", "abc"]],
  });
  assert.equal(entry?.name, "route-3");
});

Deno.test("compileRoute() leaves criteria undefined when the match names none", async () => {
  const entry = await compileRoute(
    { match: { path: "/" }, respond: { status: 200, headers: {}, body: "" }, priority: 5 },
    { dir: "/tmp", index: 0, names: ["a.example"], tenant: "a.example" },
    () => assert.fail("no problem expected"),
  );
  assert.equal(entry?.criteria, undefined);
});

Deno.test("RouteTable.match() ANDs header, query and cookie conditions", () => {
  const table = new RouteTable([route("all", "/api", {
    headers: [["x-key", "k1"]],
    query: [["debug", true]],
    cookies: [["session", "abc"]],
  })]);
  const every = factsOf({ "x-key": "k1", cookie: "session=abc" }, "?debug");
  assert.equal(winner(table, "/api", every), "all");
  const without = [
    factsOf({ cookie: "session=abc" }, "?debug"),
    factsOf({ "x-key": "k2", cookie: "session=abc" }, "?debug"),
    factsOf({ "x-key": "k1", cookie: "session=abc" }, "?other=1"),
    factsOf({ "x-key": "k1", cookie: "session=abd" }, "?debug"),
    factsOf({ "x-key": "k1" }, "?debug"),
  ];
  assert.deepEqual(without.map((facts) => winner(table, "/api", facts)), [
    undefined,
    undefined,
    undefined,
    undefined,
    undefined,
  ]);
  assert.equal(winner(table, "/api"), undefined, "no facts: a route with criteria never matches");
});

Deno.test("RouteTable.match() tells query presence from an empty value from a value", () => {
  const table = new RouteTable([
    route("present", "/p", { query: [["flag", true]] }),
    route("empty", "/e", { query: [["flag", ""]] }),
    route("valued", "/v", { query: [["flag", "on"]] }),
  ]);
  const queries = ["?flag", "?flag=", "?flag=on", "?flag=off", "?other", ""];
  assert.deepEqual(
    ["/p", "/e", "/v"].map((path) => queries.map((q) => winner(table, path, factsOf({}, q)))),
    [
      ["present", "present", "present", "present", undefined, undefined],
      ["empty", "empty", undefined, undefined, undefined, undefined],
      [undefined, undefined, "valued", undefined, undefined, undefined],
    ],
  );
});

Deno.test("RouteTable.match() falls through to the next candidate when criteria fail", () => {
  const table = new RouteTable([
    route("beta-exact", "/app", { cookies: [["beta", "1"]] }),
    route("exact", "/app"),
    route("beta-template", "/users/{id}", { headers: [["x-beta", true]] }),
    route("prefix", "prefix:/users/"),
  ]);
  assert.equal(winner(table, "/app", factsOf({ cookie: "beta=1" })), "beta-exact");
  assert.equal(winner(table, "/app", factsOf({ cookie: "beta=0" })), "exact");
  assert.equal(winner(table, "/users/7", factsOf({ "x-beta": "" })), "beta-template");
  const beta = table.match("GET", "/users/7", "a.example", factsOf({ "x-beta": "" }));
  assert.deepEqual(beta?.params, { id: "7" });
  assert.deepEqual(table.match("GET", "/users/7", "a.example", factsOf({}))?.params, {});
  assert.equal(winner(table, "/users/7", factsOf({})), "prefix");
});

Deno.test("requestFacts() reads headers by lower-case name, joining repeated ones", () => {
  const facts = factsOf({ "x-one": "1", "x-many": ["a", "b"] });
  assert.deepEqual([facts.header("x-one"), facts.header("x-many"), facts.header("x-none")], [
    "1",
    "a, b",
    undefined,
  ]);
});

Deno.test("requestFacts() parses query parameters: empty, first of repeats, decoded", () => {
  const facts = factsOf({}, "?a=1&flag&b=&a=2&q=x%20y+z&e=%3D");
  assert.deepEqual(["a", "flag", "b", "q", "e", "missing"].map((n) => facts.query(n)), [
    "1",
    "",
    "",
    "x y z",
    "=",
    undefined,
  ]);
  assert.equal(factsOf({}, "").query("a"), undefined);
});

Deno.test("requestFacts() parses cookies: pairs, first wins, '=' in values, no-value skipped", () => {
  const facts = factsOf({ cookie: "a=1; b=2;c=3 ; a=9; tok=x=y==; novalue; e=" });
  assert.deepEqual(["a", "b", "c", "tok", "e"].map((n) => facts.cookie(n)), [
    "1",
    "2",
    "3",
    "x=y==",
    "",
  ]);
  assert.equal(facts.cookie("novalue"), undefined);
  assert.equal(facts.cookie("x"), undefined);
});

Deno.test("requestFacts() answers no cookie when the request has no Cookie header", () => {
  const facts = factsOf({ "x-other": "a=1" });
  assert.equal(facts.cookie("a"), undefined);
});
