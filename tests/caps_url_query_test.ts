/**
 * Rule 1 of issue 33, for the caps policy (src/policy/caps.ts): `caps.max_url_bytes` bounds the
 * whole request target a tenant receives — path and query — so a short path carrying a long query
 * is 414 like a long path is. Against the real gateway under its derived flags (the adversarial
 * arena): each side of the cap, at it and one byte over, with the bytes in the path and with
 * almost all of them in the query; what the client got and whether the upstream saw the request.
 *
 * What the cap counts: the canonical path plus the query with its `?` (the fragment is never part
 * of a request). The targets here are canonical already, so their length is what is counted.
 *
 * @module
 */
import assert from "node:assert/strict";
import { withArena } from "./adversarial/arena.ts";

/** The tenant's cap, small so each side of it is cheap to reach. */
const MAX_URL_BYTES = 64;
/** `/api/` is the arena's route to the recording upstream (the prefix is stripped there). */
const ROUTE = "/api/";

/** A path-only target of exactly `length` bytes under the route. */
function pathOnly(length: number): string {
  return ROUTE + "p".repeat(length - ROUTE.length);
}

/** A target of exactly `length` bytes whose path is `/api/q` and whose query holds the rest. */
function queryHeavy(length: number): string {
  const path = `${ROUTE}q?x=`;
  return path + "v".repeat(length - path.length);
}

Deno.test(
  "rule 1: caps.max_url_bytes counts the query string: a short path with a long query is 414, at the cap it passes",
  async () => {
    await withArena(
      { policies: { caps: { max_url_bytes: MAX_URL_BYTES } } },
      async (arena) => {
        const cases = [
          { what: "path only, at the cap", target: pathOnly(MAX_URL_BYTES), status: 200 },
          { what: "path only, one over", target: pathOnly(MAX_URL_BYTES + 1), status: 414 },
          { what: "query-heavy, at the cap", target: queryHeavy(MAX_URL_BYTES), status: 200 },
          { what: "query-heavy, one over", target: queryHeavy(MAX_URL_BYTES + 1), status: 414 },
          // Far over in the query alone: the path is 6 bytes, a tenth of the cap.
          { what: "query-heavy, far over", target: queryHeavy(4 * MAX_URL_BYTES), status: 414 },
        ];
        for (const { what, target, status } of cases) {
          arena.upstream.seen.length = 0;
          arena.upstream.heads.length = 0;
          const response = await arena.send({ path: target });
          assert.equal(response.status, status, `${what} (${target.length} bytes): ${target}`);
          if (status === 414) {
            assert.equal(JSON.parse(response.body).error.code, "uri_too_long", what);
            assert.deepEqual(arena.upstream.heads, [], `${what}: nothing reached the upstream`);
            assert.deepEqual(arena.upstream.seen, [], what);
          } else {
            // The upstream got the whole target (less the route's stripped prefix), query included.
            const forwarded = target.slice(ROUTE.length - 1);
            assert.deepEqual(arena.upstream.seen.map((s) => s.url), [forwarded], what);
          }
        }
      },
    );
  },
);
