/**
 * The WAF's decodings: each inspected location is matched in up to four forms, so an attack hidden
 * behind percent (single or double), `+`, HTML-entity or SQL-comment encoding is seen the way a
 * backend that decodes would see it.
 *
 * @module
 */

const PLUS = /\+/g;
const WHITESPACE = /\s+/g;
const MESSY_SPACE = /\s\s|[^\S ]/;
const PERCENT_RUN = /%u[0-9a-f]{4}|(?:%[0-9a-f]{2})+/gi;
const OVERLONG = /%(?:c0%(?:ae|2e|af|2f|5c)|e0%80%(?:ae|af)|c1%(?:9c|1c))/gi;
const ENTITY =
  /&(?:#(?:x0*(3c|3e|22|27|2f|3a|28|29)(?![0-9a-f])|0*(60|62|34|39|47|58|40|41)(?![0-9]));?|(lt|gt|quot|apos|sol|colon|lpar|rpar);)/gi;
const SQL_COMMENT = /\/\*(!\d{0,6})?([^*]*)\*\//g;
const UTF8 = new TextDecoder();
// deno-fmt-ignore
const ENTITY_CHARS: Readonly<Record<string, string>> = Object.freeze({
  "3c": "<", "60": "<", lt: "<", "3e": ">", "62": ">", gt: ">", "22": '"', "34": '"', quot: '"',
  "27": "'", "39": "'", apos: "'", "2f": "/", "47": "/", sol: "/", "3a": ":", "58": ":",
  colon: ":", "28": "(", "40": "(", lpar: "(", "29": ")", "41": ")", rpar: ")",
});

/**
 * The decodings applied before matching: percent (tolerant of malformed escapes, with IIS
 * `%uXXXX` and overlong UTF-8 `%c0%ae` `%c0%af` `%c1%9c` read as `.` `/` `\`), a second percent
 * pass (double encoding), `+` as space in the query, HTML entities (decimal, hex, named) for
 * `<` `>` `"` `'` `/` `:` `(` `)`, lower-casing, and, in the last variant, SQL comments dropped
 * (`UN/**\/ION` reads `union`; a MySQL `/*!50000 union*\/` keeps its body) and whitespace runs
 * collapsed to one space.
 *
 * @param text one location's raw text (inspect() cuts it to 8 KiB first; this does not)
 * @param isQuery whether `+` means a space
 * @returns the distinct variants, original first, at most 4
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { variants } from "./waf_decode.ts";
 * assert.deepEqual(variants("UN/**\/ION%2520SELECT", false), [
 *   "UN/**\/ION%2520SELECT",
 *   "un/**\/ion%20select",
 *   "un/**\/ion select",
 *   "union select",
 * ]);
 * ```
 */
export function variants(text: string, isQuery: boolean): string[] {
  const once = asciiLower(decode(isQuery && text.includes("+") ? text.replace(PLUS, " ") : text));
  const twice = asciiLower(decode(once));
  const collapsed = collapse(twice);
  const all = [text, once, twice, collapsed];
  return all.filter((variant, index) => all.indexOf(variant) === index);
}

/**
 * Lower case for the ASCII letters only: the rules are ASCII, and a full lowering changes lengths
 * (`İ` lowers to two characters), so padding of such characters carried an attack past a rule's
 * bounded gap with half the characters ASCII padding needs.
 */
export function asciiLower(text: string): string {
  return text.replace(UPPER_ASCII, (letters) => letters.toLowerCase());
}

const UPPER_ASCII = /[A-Z]+/g;

/** One decoding pass: overlong and percent escapes, then HTML entities. */
function decode(text: string): string {
  let out = text.includes("%") ? decodePercent(text) : text;
  if (out.includes("&")) out = out.replace(ENTITY, entityChar);
  return out;
}

/**
 * Percent-decodes: the platform's decoder for well-formed UTF-8 escapes (the common, fast case),
 * else escape by escape, reading overlong forms as ASCII and leaving malformed escapes as sent.
 */
function decodePercent(text: string): string {
  try {
    return decodeURIComponent(text);
  } catch {
    return text.replace(OVERLONG, overlongChar).replace(PERCENT_RUN, percentRun);
  }
}

/** Drops SQL comments (keeping MySQL executable ones' bodies) and collapses whitespace runs. */
function collapse(text: string): string {
  const bare = text.includes("/*") ? text.replace(SQL_COMMENT, commentBody) : text;
  return MESSY_SPACE.test(bare) ? bare.replace(WHITESPACE, " ") : bare;
}

/** The ASCII character an overlong UTF-8 escape stands for. */
function overlongChar(escape: string): string {
  const last = escape.slice(-2).toLowerCase();
  if (last === "ae" || last === "2e") return ".";
  if (last === "af" || last === "2f") return "/";
  return "\\";
}

/** Decodes a run of `%XX` escapes as UTF-8 (bad bytes become U+FFFD), or one `%uXXXX`. */
function percentRun(run: string): string {
  if (run[1] === "u" || run[1] === "U") return String.fromCharCode(parseInt(run.slice(2), 16));
  const bytes = new Uint8Array(run.length / 3);
  for (let i = 0; i < bytes.length; i++) bytes[i] = parseInt(run.slice(i * 3 + 1, i * 3 + 3), 16);
  return UTF8.decode(bytes);
}

/** The character an HTML entity stands for. */
function entityChar(_match: string, hex?: string, decimal?: string, named?: string): string {
  return ENTITY_CHARS[(hex ?? decimal ?? named ?? "").toLowerCase()] ?? "";
}

/** A SQL comment's replacement: nothing, or the body of a MySQL `/*!…*\/` executable comment. */
function commentBody(_match: string, executable?: string, body?: string): string {
  return executable === undefined ? "" : ` ${body} `;
}
