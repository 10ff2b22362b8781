/**
 * Path rewrites for proxy routes, compiled once at load: strip a prefix (whole segments only),
 * replace the whole path (with `{name}` path parameters), or a regular expression whose
 * replacement takes `$1` and `${name}` groups. The query string is never touched here; the caller
 * appends it unchanged.
 *
 * A rewrite works on the canonical path and its result is made canonical again and must stay under
 * the rewrite's base — the literal part of its target up to the last "/" before the first
 * substitution (`/v2/` for `to: /v2/$1`) — else the request is refused ({@link applyRewrite}).
 * Without that, a captured group that puts `..` or `//` back together (`/pub/.x./a` through
 * `^/pub/(.*)x(.*)` → `/v2/$1$2`) would let the upstream's own normaliser walk out of `/v2/`.
 *
 * @module
 */
import { canonicalPath, type PathRefusal, type PathRules } from "../request/canonical_path.ts";

/** A compiled rewrite: request path and route parameters in, upstream path out. */
export type Rewriter =
  & ((path: string, params: Readonly<Record<string, string>>) => string)
  & {
    /** Where every rewritten path must stay (a prefix ending in "/"). */
    readonly base: string;
  };

/**
 * Rewrites a canonical path and checks the result: canonical again, and under the rewrite's base.
 *
 * @param rewrite the compiled rewrite
 * @param path the request's canonical path
 * @param params the route's path parameters
 * @param rules the edge's path rules
 * @returns the upstream path, or why the request is refused
 * @example
 * ```ts
 * import { applyRewrite, compileRewrite, type Rewriter } from "./rewrite.ts";
 * const rules = { mergeSlashes: true, escapedSlashes: "reject" } as const;
 * const rewrite = compileRewrite({ regex: "^/pub/(.*)x(.*)$", to: "/v2/$1$2" }, []) as Rewriter;
 * applyRewrite(rewrite, "/pub/axb", {}, rules); // "/v2/ab"
 * applyRewrite(rewrite, "/pub/.x./secret", {}, rules); // a refusal: it left /v2/
 * ```
 */
export function applyRewrite(
  rewrite: Rewriter,
  path: string,
  params: Readonly<Record<string, string>>,
  rules: PathRules,
): string | PathRefusal {
  const rewritten = rewrite(path, params);
  if (rewritten === path) return path;
  const canonical = canonicalPath(rewritten, rules);
  if (typeof canonical !== "string") return canonical;
  if (!canonical.startsWith(rewrite.base)) {
    return { refused: true, detail: `the rewrite leaves ${rewrite.base}` };
  }
  return canonical;
}

/** The literal part of a target up to its last "/" before `cut` (at least "/"). */
function baseOf(target: string, cut: number): string {
  const literal = cut === -1 ? target : target.slice(0, cut);
  const slash = literal.lastIndexOf("/");
  return slash <= 0 ? "/" : literal.slice(0, slash + 1);
}

/** A rewrite as configured (exactly one form). */
export interface RewriteSpec {
  readonly strip_prefix?: string;
  readonly replace?: string;
  readonly regex?: string;
  readonly to?: string;
}

/**
 * Compiles a rewrite.
 *
 * @param spec the configured rewrite
 * @param params the path parameters the route's match defines (for `replace` placeholders)
 * @returns the rewriter, or a message saying what is wrong
 * @example
 * ```ts
 * import { compileRewrite } from "./rewrite.ts";
 * const rewrite = compileRewrite({ regex: "^/api/(?<rest>.*)$", to: "/v2/${rest}" }, []);
 * if (typeof rewrite === "string") throw new Error(rewrite);
 * rewrite("/api/users", {}); // "/v2/users"
 * ```
 */
export function compileRewrite(spec: RewriteSpec, params: readonly string[]): Rewriter | string {
  const forms = [spec.strip_prefix, spec.replace, spec.regex].filter((f) => f !== undefined);
  if (forms.length !== 1) return "Give exactly one of strip_prefix, replace and regex";
  if (spec.to !== undefined && spec.regex === undefined) return "to goes with regex";
  if (spec.strip_prefix !== undefined) return stripPrefix(spec.strip_prefix);
  if (spec.replace !== undefined) return replaceWhole(spec.replace, params);
  if (spec.to === undefined) return "A regex rewrite needs to: the replacement path";
  return regexRewrite(spec.regex!, spec.to);
}

function stripPrefix(prefix: string): Rewriter {
  const cut = prefix.endsWith("/") ? prefix.slice(0, -1) : prefix;
  return Object.assign(function stripPrefixRewrite(path: string) {
    if (!path.startsWith(cut)) return path;
    const rest = path.slice(cut.length);
    // Whole segments only: "/api" strips "/api" and "/api/…", never the "/api" of "/apix".
    if (rest !== "" && !rest.startsWith("/")) return path;
    return rest === "" ? "/" : rest;
  }, { base: "/" });
}

function replaceWhole(target: string, params: readonly string[]): Rewriter | string {
  const names = [...target.matchAll(/\{([A-Za-z_][A-Za-z0-9_]*)\}/g)].map((m) => m[1]);
  const unknown = names.find((name) => !params.includes(name));
  if (unknown) return `Placeholder {${unknown}} is not a path parameter`;
  if (names.length === 0) {
    return Object.assign(function replaceRewrite() {
      return target;
    }, { base: baseOf(target, -1) });
  }
  return Object.assign(
    function replaceRewrite(_path: string, values: Readonly<Record<string, string>>) {
      return target.replace(
        /\{([A-Za-z_][A-Za-z0-9_]*)\}/g,
        (_, name: string) => encodeURIComponent(values[name] ?? ""),
      );
    },
    { base: baseOf(target, target.indexOf("{")) },
  );
}

type Part = string | { group: number } | { name: string };

function regexRewrite(source: string, to: string): Rewriter | string {
  let pattern: RegExp;
  try {
    pattern = new RegExp(source);
  } catch (error) {
    return `Invalid regular expression: ${(error as Error).message.split(":").pop()?.trim()}`;
  }
  const groups = new RegExp(`${source}|`).exec("")!.length - 1;
  const names = new Set(Object.keys(new RegExp(`${source}|`).exec("")!.groups ?? {}));
  const parts: Part[] = [];
  let literal = "";
  for (let i = 0; i < to.length; i++) {
    const rest = to.slice(i);
    const numbered = /^\$(\d{1,2})/.exec(rest);
    const named = /^\$\{([A-Za-z_][A-Za-z0-9_]*)\}/.exec(rest);
    if (rest.startsWith("$$")) {
      literal += "$";
      i++;
    } else if (named) {
      if (!names.has(named[1])) return `Group \${${named[1]}} is not in the regex`;
      parts.push(literal, { name: named[1] });
      literal = "";
      i += named[0].length - 1;
    } else if (numbered) {
      const group = Number(numbered[1]);
      if (group < 1 || group > groups) return `Group $${group} is not in the regex`;
      parts.push(literal, { group });
      literal = "";
      i += numbered[0].length - 1;
    } else {
      literal += to[i];
    }
  }
  parts.push(literal);
  const first = parts.findIndex((part) => typeof part !== "string");
  const lead = first === -1 ? to : (parts.slice(0, first) as string[]).join("");
  return Object.assign(function regexPathRewrite(path: string) {
    const match = pattern.exec(path);
    if (!match) return path;
    let out = "";
    for (const part of parts) {
      if (typeof part === "string") out += part;
      else if ("group" in part) out += match[part.group] ?? "";
      else out += match.groups?.[part.name] ?? "";
    }
    const rewritten = path.slice(0, match.index) + out + path.slice(match.index + match[0].length);
    return rewritten.startsWith("/") ? rewritten : `/${rewritten}`;
  }, { base: regexBase(source, lead) });
}

/**
 * The base a regex rewrite must stay under: its target's literal lead — when the pattern is
 * anchored at the start, so that the whole path is replaced; otherwise the path keeps what came
 * before the match, and only "/" can be promised.
 */
function regexBase(source: string, lead: string): string {
  if (!source.startsWith("^")) return "/";
  return baseOf(lead.startsWith("/") ? lead : `/${lead}`, -1);
}
