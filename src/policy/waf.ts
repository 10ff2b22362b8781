/**
 * WAF detections for the public lane: SQL injection, cross-site scripting and path traversal in
 * the request path, each query parameter and the headers a tenant lists. Bodies are not inspected.
 *
 * Each location is cut to its first 8 KiB (8192 UTF-16 code units; the raw query as a whole),
 * decoded into up to four {@link variants}, and matched against named rules, in the order path,
 * query parameters, listed headers; within a location traversal, then SQL injection, then XSS.
 * The query is split on `&` before decoding, so `$` in a rule means "end of this parameter";
 * `+` reads as a space in the query and in headers, never in the path.
 * Every rule is linear: no two adjacent quantifiers can take the same character, and scans that
 * can restart at many positions are capped (`{0,256}`), so a hostile 8 KiB costs a bounded time.
 *
 * Written by hand: libinjection, the tokenizer most WAFs use, has no maintained JS or WASM build
 * on npm, and the npm WAF middlewares are bound to Express and match single broad expressions
 * that reject `O'Reilly` or `drop us a line`.
 *
 * Deliberate trade-offs (pinned by tests/waf_*_test.ts):
 * - a bare `1=1` passes (math); `or 1=1` and `and 2=2` (a keyword and equal numbers) are caught;
 * - `union select`, `; drop table` and `' or 'x'='y` shapes are caught even inside prose;
 * - `/etc/passwd` is caught where it starts a path or a value or follows `//`, not inside
 *   `/docs/etc/passwd`;
 * - `javascript:` is caught when code follows (`alert(`, `void(0)`), not in "JavaScript: the book";
 * - SVG `data:` URIs, full-width look-alikes (`＜script＞`) and `\u003c` escapes are not decoded.
 *
 * @module
 */

import { asciiLower, variants } from "./waf_decode.ts";

export { variants };

/** What a finding is. */
export type WafDetection = "sql_injection" | "xss" | "path_traversal";

/** The first rule that matched, and where. */
export interface WafFinding {
  readonly detection: WafDetection;
  readonly location: "path" | "query" | `header:${string}`;
  /** Short rule name, for logs: "sqli.union_select". */
  readonly rule: string;
}

/** Which detections run, and on which headers. */
export interface WafOptions {
  readonly sqli: boolean;
  readonly xss: boolean;
  readonly traversal: boolean;
  /** Lower-case header names also inspected. */
  readonly headers: readonly string[];
}

/** The part of a request inspect() reads. `query` may carry its leading `?`. */
export interface WafRequest {
  path: string;
  query: string;
  header(name: string): string | undefined;
}

/** Longest prefix of one location that is inspected (UTF-16 code units). */
export const WAF_INSPECT_LIMIT = 8192;

interface Rule {
  readonly name: string;
  readonly pattern: RegExp;
}

interface Detector {
  readonly detection: WafDetection;
  readonly option: "sqli" | "xss" | "traversal";
  /** Every rule as one alternation: one test clears a benign variant. */
  readonly any: RegExp;
  readonly rules: readonly Rule[];
}

/** Quote, then closing parentheses or a semicolon: where an injected string literal ends. */
const Q = /['"`]\s*(?:[);]\s*)*/;
/** SQL keywords a comment may hide next to. */
const KEYWORD = /(?:union|select|insert|into|values|update|delete|drop|from|where|and|or|having)/;
/** An open tag up to the separator before one of its attributes. */
const TAG = /<[a-z][^<>]{0,256}?[\s/"'`]/;
/** Event handler names, for a quote that breaks out of an attribute value. */
const HANDLER = new RegExp(
  "on(?:error|load|click|dblclick|mouse(?:over|out|down|up|move|enter|leave)|focus(?:in|out)?" +
    "|blur|change|input|submit|reset|key(?:down|up|press)|toggle|begin|end|pointer(?:over|down|up)" +
    "|animation(?:start|end)|transitionend|drag(?:start|end)?|drop|copy|paste|scroll|wheel|resize" +
    "|unload|beforeunload|hashchange|message|pageshow|popstate|play|auxclick|contextmenu|search)",
);

/** Builds a case-insensitive rule from pattern pieces, in order. */
function rule(name: string, ...parts: readonly RegExp[]): Rule {
  return Object.freeze({ name, pattern: new RegExp(parts.map((p) => p.source).join(""), "i") });
}

const TRAVERSAL: readonly Rule[] = Object.freeze([
  // deno-lint-ignore no-control-regex -- a NUL byte is what this rule looks for
  rule("traversal.nul_byte", /\x00/),
  rule("traversal.dot_segment", /(?:^|[/\\=:"'])\.\.(?:[/\\;]|$)/),
  rule("traversal.filter_bypass", /(?:^|[/\\=])(?:\.{4}[/\\]|\.{3}[/\\]\.?[/\\])/),
  rule(
    "traversal.sensitive_file",
    /(?:^|[=:"'\s]|[/\\]{2})[/\\]?/,
    /(?:etc[/\\]+(?:passwd|shadow|group|hosts)|proc[/\\]+self[/\\]+(?:environ|cmdline|maps|fd))\b/,
  ),
  rule(
    "traversal.windows_path",
    /(?:^|[=:"'\s/\\])[a-z]:[/\\]+(?:windows|winnt|inetpub|boot\.ini)\b/,
    /|[/\\](?:windows|winnt)[/\\]+(?:win\.ini|system\.ini|system32)\b/,
  ),
]);

const SQLI: readonly Rule[] = Object.freeze([
  rule(
    "sqli.tautology",
    Q,
    /(?:(?:or|and|xor)(?=[\s'"(\d])|\|\||&&)\s*(?:\(\s*)*/,
    /(?:true\b|['"]?[\w.-]*['"]?\s*(?:=|<>|!=|<=?|>=?|(?:like|regexp)\s*['"]))/,
  ),
  rule(
    "sqli.tautology_bare",
    /\b(?:or|and|xor)\s*(?:\(\s*)*(?<num>\d+)\s*(?:=|<=>|like\b)\s*\k<num>(?!\w)/,
    /|\b(?:or|and|xor)\s*(?:\(\s*)*(?<quote>['"])(?<word>\w*)\k<quote>\s*=\s*\k<quote>\k<word>(?!\w)/,
  ),
  rule("sqli.quote_comment", Q, /(?:--[\s-]*|#\s*|\/\*\s*)$/),
  rule(
    "sqli.union_select",
    /\bunion\s*(?:(?:all|distinct)\s*)?(?:\(\s*)*select\s*/,
    /(?:[\d@*'"(-]|null\b|[a-z_][\w.]*\s*(?:[,(]|from\b))/,
  ),
  rule(
    "sqli.stacked_query",
    /;\s*(?:drop|truncate|alter|create)\s+(?:table|database|schema|user|view|procedure)\b/,
    /|;\s*(?:delete\s+from|insert\s+into)\b|;\s*update\s+[\w.`"[\]]+\s+set\b|;\s*declare\s+@/,
    /|;\s*(?:exec(?:ute)?\s*(?:\(|xp_|sp_|master\.)|shutdown\s*(?:--|#|;|$))/,
    /|;\s*select\s+[^;]{0,128}?\bfrom\b/,
  ),
  rule(
    "sqli.comment_keyword",
    /\/\*!\d{0,6}\s*[a-z]|\b/,
    KEYWORD,
    /\s*\/\*[^*]*\*\/|\/\*[^*]*\*\/\s*/,
    KEYWORD,
    /\b/,
  ),
  rule(
    "sqli.time_based",
    /(?<![\w.])sleep\(\s*\d|\bbenchmark\(\s*\d+\s*,|\bpg_sleep\s*\(/,
    /|\bwaitfor\s+(?:delay|time)\s+['"]\d|\bdbms_pipe\.receive_message\s*\(/,
  ),
  rule(
    "sqli.schema_probe",
    /\binformation_schema\b|\bxp_cmdshell\b|\bsys(?:objects|columns|databases)\b/,
    /|\bmysql\.user\b|@@(?:version|datadir|hostname)\b|\bload_file\s*\(/,
    /|\binto\s+(?:out|dump)file\b|\b(?:extractvalue|updatexml)\s*\(/,
  ),
  rule("sqli.hex_string", /\b(?:char|concat(?:_ws)?|unhex|cast|convert)\s*\(\s*0x[0-9a-f]{2}/),
  rule("sqli.subquery", /['"\d]\s*(?:\)\s*)*(?:or|and|\|\||\+)\s*(?:\(\s*)+select\b/),
  rule("sqli.order_by_probe", Q, /(?:order|group)\s+by\s+\d|\border\s+by\s+\d+\s*(?:--|#)/),
]);

const XSS: readonly Rule[] = Object.freeze([
  rule("xss.script_tag", /<\/?script\b/),
  rule("xss.dangerous_tag", /<(?:iframe|frame|frameset|object|embed|applet|base|meta|isindex)\b/),
  rule("xss.event_handler", TAG, /on[a-z]{3,24}\s*=/),
  rule("xss.attribute_breakout", /['"`](?:[^<>'"]{0,64}?[\s/])?/, HANDLER, /\s*=/),
  rule("xss.markup_attribute", TAG, /(?:srcdoc|formaction|xlink:href|dynsrc|lowsrc)\s*=/),
  rule(
    "xss.script_uri",
    /\b(?:java|vb|live)\s*script\s*:\s*(?:[^\sa-z0-9]|[a-z_$][\w$.]*\s*[(`=[])/,
  ),
  rule(
    "xss.data_uri",
    /\bdata\s*:\s*(?:text\/html|(?:text|application)\/(?:x-)?(?:java|ecma)script)\b/,
  ),
  rule("xss.css_expression", /:\s*expression\s*\(|-moz-binding\s*:|\bbehavior\s*:\s*url\s*\(/),
]);

const DETECTORS: readonly Detector[] = Object.freeze([
  detector("path_traversal", "traversal", TRAVERSAL),
  detector("sql_injection", "sqli", SQLI),
  detector("xss", "xss", XSS),
]);

/** The detectors an options object turns on, worked out once per options object. */
const CHOSEN = new WeakMap<WafOptions, readonly Detector[]>();

function detectorsFor(options: WafOptions): readonly Detector[] {
  let chosen = CHOSEN.get(options);
  if (!chosen) {
    chosen = DETECTORS.filter((detector) => options[detector.option]);
    CHOSEN.set(options, chosen);
  }
  return chosen;
}

/** A detection with its rules and their alternation. */
function detector(
  detection: WafDetection,
  option: Detector["option"],
  rules: readonly Rule[],
): Detector {
  const any = new RegExp(rules.map((r) => `(?:${r.pattern.source})`).join("|"), "i");
  return Object.freeze({ detection, option, any, rules });
}

/**
 * Inspects a request and returns the first finding. Pure, never throws, and bounded: the path,
 * the raw query and each listed header are inspected on their first 8 KiB only
 * ({@link WAF_INSPECT_LIMIT}), so an attack placed after that passes.
 *
 * @param request the raw (still percent-encoded) path and query, and a header reader
 * @param options which detections run and which headers are read
 * @returns the first finding, or undefined when nothing matched
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { inspect } from "./waf.ts";
 * const options = { sqli: true, xss: true, traversal: true, headers: [] };
 * const header = () => undefined;
 * assert.deepEqual(inspect({ path: "/a/..%2f..%2fetc/passwd", query: "", header }, options), {
 *   detection: "path_traversal",
 *   location: "path",
 *   rule: "traversal.dot_segment",
 * });
 * assert.equal(inspect({ path: "/books", query: "?q=O%27Reilly", header }, options), undefined);
 * ```
 */
export function inspect(request: WafRequest, options: WafOptions): WafFinding | undefined {
  const detectors = detectorsFor(options);
  if (detectors.length === 0) return undefined;
  return inspectText(request.path, "path", false, detectors) ??
    inspectQuery(request.query, detectors) ??
    inspectHeaders(request, options.headers, detectors);
}

/** Runs the detectors over one location's variants, detection by detection. */
function inspectText(
  raw: string,
  location: WafFinding["location"],
  isQuery: boolean,
  detectors: readonly Detector[],
): WafFinding | undefined {
  const bounded = raw.slice(0, WAF_INSPECT_LIMIT);
  const texts = variants(bounded, isQuery);
  // Rules ignore case, so an original that differs from its decoding only in ASCII case adds
  // nothing (the decodings lower ASCII letters only, so lengths never change).
  if (texts.length > 1 && texts[1] === asciiLower(bounded)) texts.shift();
  for (const { detection, any, rules } of detectors) {
    for (const text of texts) {
      if (!any.test(text)) continue;
      for (const { name, pattern } of rules) {
        if (pattern.test(text)) return { detection, location, rule: name };
      }
    }
  }
  return undefined;
}

/** Inspects each `&`-separated query parameter (name and value together) on its own. */
function inspectQuery(query: string, detectors: readonly Detector[]): WafFinding | undefined {
  const offset = query.startsWith("?") ? 1 : 0;
  const bounded = query.slice(offset, offset + WAF_INSPECT_LIMIT);
  let start = 0;
  while (start < bounded.length) {
    const amp = bounded.indexOf("&", start);
    const end = amp === -1 ? bounded.length : amp;
    if (end > start) {
      const finding = inspectText(bounded.slice(start, end), "query", true, detectors);
      if (finding) return finding;
    }
    start = end + 1;
  }
  return undefined;
}

/**
 * Inspects the listed headers that are present, in the order listed. Their `+` reads as a space,
 * as in a query: a Referer carries a URL, and cookie values are often form-encoded.
 */
function inspectHeaders(
  request: WafRequest,
  names: readonly string[],
  detectors: readonly Detector[],
): WafFinding | undefined {
  for (const name of names) {
    const value = request.header(name);
    if (!value) continue;
    const finding = inspectText(value, `header:${name}`, true, detectors);
    if (finding) return finding;
  }
  return undefined;
}
