/**
 * Cost of making the request path canonical, paid once per request before routing: a typical
 * clean path (the fast path, returned as it is), a path needing decoding, slash merging and dot
 * removal, a long clean path (~200 chars, the fast path's scan at its longest in practice), and
 * the clean path as the request-head parser hands it over: a slice of `request.url` cut at "?".
 * Run with `deno bench --no-prompt bench/canonical_path_bench.ts`.
 */
import { canonicalPath, DEFAULT_PATH_RULES } from "../src/request/canonical_path.ts";

const CLEAN = "/api/v1/users/42";
const MESSY = "/a/%2e%2e/b//c/%61";
const LONG = `/static/v2/assets${"/chunk-0123456789abcdef".repeat(8)}/app.min.js`;
const URL_WITH_QUERY = "/api/v1/users/42?fields=name,email&page=2";
const SLICED = URL_WITH_QUERY.slice(0, URL_WITH_QUERY.indexOf("?"));

/** Fails the bench when a fixture does not take the path it is there to measure. */
function expectResult(label: string, raw: string, expected: string): void {
  if (canonicalPath(raw, DEFAULT_PATH_RULES) !== expected) {
    throw new Error(`Bench fixture "${label}" did not canonicalise to "${expected}"`);
  }
}
expectResult("clean", CLEAN, CLEAN);
expectResult("messy", MESSY, "/b/c/a");
expectResult("long", LONG, LONG);
expectResult("sliced", SLICED, CLEAN);

Deno.bench("canonicalPath, clean /api/v1/users/42", { group: "path", baseline: true }, () => {
  canonicalPath(CLEAN, DEFAULT_PATH_RULES);
});

Deno.bench("canonicalPath, decode + merge + dots /a/%2e%2e/b//c/%61", { group: "path" }, () => {
  canonicalPath(MESSY, DEFAULT_PATH_RULES);
});

Deno.bench(`canonicalPath, clean ${LONG.length}-char path`, { group: "path" }, () => {
  canonicalPath(LONG, DEFAULT_PATH_RULES);
});

Deno.bench("canonicalPath, clean path sliced from request.url", { group: "path" }, () => {
  canonicalPath(SLICED, DEFAULT_PATH_RULES);
});
