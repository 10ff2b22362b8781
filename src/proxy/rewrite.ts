/**
 * Path rewrites for proxy routes, compiled once at load: strip a prefix (whole segments only),
 * replace the whole path (with `{name}` path parameters), or a regular expression whose
 * replacement takes `$1` and `${name}` groups. The query string is never touched here; the caller appends it unchanged.
 *
 * @module
 */

/** A compiled rewrite: request path and route parameters in, upstream path out. */
export type Rewriter = (path: string, params: Readonly<Record<string, string>>) => string;

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
  return function stripPrefixRewrite(path) {
    if (!path.startsWith(cut)) return path;
    const rest = path.slice(cut.length);
    // Whole segments only: "/api" strips "/api" and "/api/…", never the "/api" of "/apix".
    if (rest !== "" && !rest.startsWith("/")) return path;
    return rest === "" ? "/" : rest;
  };
}

function replaceWhole(target: string, params: readonly string[]): Rewriter | string {
  const names = [...target.matchAll(/\{([A-Za-z_][A-Za-z0-9_]*)\}/g)].map((m) => m[1]);
  const unknown = names.find((name) => !params.includes(name));
  if (unknown) return `Placeholder {${unknown}} is not a path parameter`;
  if (names.length === 0) {
    return function replaceRewrite() {
      return target;
    };
  }
  return function replaceRewrite(_path, values) {
    return target.replace(
      /\{([A-Za-z_][A-Za-z0-9_]*)\}/g,
      (_, name: string) => encodeURIComponent(values[name] ?? ""),
    );
  };
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
  return function regexPathRewrite(path) {
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
  };
}
