/**
 * The bytes HTTP/1.1 framing is checked against, shared by the response head parser
 * (h1_response.ts) and the body decoder (h1_body.ts): the delimiters, one table of byte classes
 * (RFC 9110 §5.6.2 tchar, §5.5 field-value bytes), and how upstream text is quoted in a framing
 * error's message.
 *
 * @module
 */

/** Carriage return. */
export const CR = 0x0d;
/** Line feed. */
export const LF = 0x0a;
/** Space. */
export const SP = 0x20;
/** Horizontal tab. */
export const HTAB = 0x09;
/** The colon after a field name. */
export const COLON = 0x3a;

/** Byte classes: a tchar (RFC 9110 §5.6.2); a field-value byte: VCHAR, obs-text, SP, HTAB (§5.5). */
export const TCHAR = 1;
/** The field-value byte class (see {@link TCHAR}). */
export const FIELD = 2;
/** Each byte's classes, {@link TCHAR} and {@link FIELD} or'ed together. */
export const CLASS = new Uint8Array(256);
for (let b = 0; b < 256; b++) {
  if (b === HTAB || (b >= SP && b !== 0x7f)) CLASS[b] |= FIELD;
  if (/^[-!#$%&'*+.^_`|~0-9A-Za-z]$/.test(String.fromCharCode(b))) CLASS[b] |= TCHAR;
}

/** Upstream text for a message: at most 64 chars, quoted, anything not printable ASCII escaped. */
export function quoted(text: string): string {
  const json = JSON.stringify(text.slice(0, 64));
  return json.replace(/[\x7f-\xff]/g, (c) => `\\u00${c.charCodeAt(0).toString(16)}`);
}
