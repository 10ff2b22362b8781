/**
 * One canonical path, as an attacker probes it: routes, blocklist rules, rewrites and the upstream
 * used to see different paths — the raw one for the gateway's decisions, the normalised one in the
 * upstream — so `//admin/`, `/./admin/`, `/%61dmin/`, `/%2e/admin/` and `/x/../admin/` passed a
 * `prefix: /admin` deny route, `//secret.txt` or `/%73ecret.txt` a `^/secret` blocklist rule, and
 * `/pub/../secret.txt` walked a `^/pub/(.*)` → `/v2/$1` rewrite out of `/v2/`.
 *
 * Each case sends every spelling through the real gateway and checks the answer and what the
 * recording upstream received: the canonical path, or nothing.
 *
 * @module
 */
import assert from "node:assert/strict";
import { type Arena, type ArenaPorts, arenaTest } from "./arena.ts";

/** A deny route, a rewriting route and a catch-all, all before the same recording upstream. */
function routes(ports: ArenaPorts): Record<string, unknown>[] {
  const upstream = { backends: [{ url: `http://127.0.0.1:${ports.upstream}` }] };
  return [
    { name: "deny", match: { prefix: "/admin" }, respond: { status: 403, body: "denied" } },
    {
      name: "pub",
      match: { prefix: "/pub/" },
      proxy: { ...upstream, rewrite: { regex: "^/pub/(.*)", to: "/v2/$1" } },
    },
    { name: "all", match: { prefix: "/" }, proxy: upstream },
  ];
}

const POLICIES = {
  blocklist: { rules: [{ name: "secret", path: "^/secret", action: "404" }] },
};

/** Sends `path` and returns the status and the error code (or body). */
async function answer(arena: Arena, path: string): Promise<string> {
  const response = await arena.send({ path });
  const body = response.body.startsWith('{"error"')
    ? JSON.parse(response.body).error.code
    : response.body.slice(0, 40);
  return `${response.status} ${body}`;
}

/** Every URL the upstream received. */
function seen(arena: Arena): string[] {
  return arena.upstream.seen.map((request) => request.url);
}

arenaTest("adversarial: one canonical path for routes, policies, rewrites and the upstream", {
  routes,
  policies: POLICIES,
}, {
  "every spelling of /admin meets the deny route, or is refused as ambiguous": async (arena) => {
    const denied = [
      "/admin/",
      "//admin/",
      "/./admin/",
      "/%61dmin/",
      "/%2e/admin/",
      "/x/../admin/",
      "/x/%2e%2e/admin/",
      "/%2E%2E/admin",
      "///admin//",
      "/admin/./",
      "/%41dmin/../admin/",
    ];
    for (const path of denied) assert.equal(await answer(arena, path), "403 denied", path);
    const ambiguous = ["/x/..%2fadmin/", "/%2fadmin/", "/admin%00/", "/x/..;/admin/", "/\\admin/"];
    for (const path of ambiguous) {
      assert.equal(await answer(arena, path), "400 ambiguous_path", path);
    }
    assert.deepEqual(seen(arena), [], "no spelling of /admin reached the upstream");
  },

  "every spelling of /secret meets the blocklist rule": async (arena) => {
    for (const path of ["/secret.txt", "//secret.txt", "/./secret.txt", "/%73ecret.txt"]) {
      assert.equal(await answer(arena, path), "404 no_route", path);
    }
    assert.deepEqual(seen(arena), []);
  },

  "a rewrite never walks its result out of its base": async (arena) => {
    // Canonical first: these are /secret.txt, which the pub route does not match at all.
    for (const path of ["/pub/../secret.txt", "/pub/%2e%2e/secret.txt", "/pub/.%2E/secret.txt"]) {
      assert.equal(await answer(arena, path), "404 no_route", path);
    }
    assert.equal(await answer(arena, "/pub/..%2fsecret.txt"), "400 ambiguous_path");
    assert.deepEqual(seen(arena), []);
    // And the rewrite works for what it is meant for, on the canonical path.
    assert.match(await answer(arena, "/pub/a/./b.txt"), /^200 /);
    assert.match(await answer(arena, "/pub//%7Euser/doc"), /^200 /);
    assert.deepEqual(seen(arena), ["/v2/a/b.txt", "/v2/~user/doc"]);
  },

  "the upstream receives the canonical path, the query untouched": async (arena) => {
    const cases: [string, string][] = [
      ["/a//b/./c", "/a/b/c"],
      ["/a/b/../c/", "/a/c/"],
      ["/%7euser/%41%42", "/~user/AB"],
      ["/q/%3f%2a?x=%2e%2e/&y=..", "/q/%3F%2A?x=%2e%2e/&y=.."],
      ["/caf%C3%A9", "/caf%C3%A9"],
    ];
    for (const [path] of cases) assert.match(await answer(arena, path), /^200 /, path);
    assert.deepEqual(seen(arena), cases.map(([, upstream]) => upstream));
  },
});

arenaTest("adversarial: encoded slashes kept as data when the operator says so", {
  routes,
  edit: (config) => config.paths = { escaped_slashes: "keep", merge_slashes: false },
}, {
  "%2F stays data, a slash run stays, and dot segments still go": async (arena) => {
    // Both are the operator's promise that the upstream does not decode %2F or merge slashes.
    assert.match(await answer(arena, "/%2fadmin/"), /^200 /);
    assert.match(await answer(arena, "/a//b/../c"), /^200 /);
    assert.match(await answer(arena, "/x/%2E%2e/y"), /^200 /);
    assert.deepEqual(seen(arena), ["/%2Fadmin/", "/a//c", "/y"]);
  },
});
