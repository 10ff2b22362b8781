/**
 * The fields of a small JSON record the CA keeps (a registration secret, a spent record), read
 * strictly: each field a string of its pattern, counts whole and positive, and every error starting
 * with what the record is, so the operator is told which file and which field.
 *
 * @module
 */

/** Reads the fields of one record. */
export interface RecordFields {
  /** The raw object, for optional fields. */
  readonly json: Record<string, unknown>;
  /** Field `name`, a string matching `pattern`. */
  text(name: string, pattern: RegExp): string;
  /** Field `name`, a whole number of at least 1; `fallback` when absent (none: required). */
  count(name: string, fallback?: number): number;
}

/**
 * Parses `text` as a JSON record whose errors start with `what`.
 *
 * @throws {Error} when it is not JSON, or (from its readers) naming a missing or malformed field
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * const record = recordFields('{"node_id":"edge-1"}', "Record x");
 * assert.equal(record.text("node_id", /^[a-z0-9-]+$/), "edge-1");
 * assert.equal(record.count("incarnation", 1), 1);
 * assert.throws(() => record.count("serial"), /Record x has no valid field "serial"/);
 * ```
 */
export function recordFields(text: string, what: string): RecordFields {
  let json: Record<string, unknown>;
  try {
    json = JSON.parse(text);
  } catch (error) {
    throw new Error(`${what} is not JSON: ${(error as Error).message}`);
  }
  const invalid = (name: string) => new Error(`${what} has no valid field "${name}"`);
  return {
    json: json ?? {},
    text(name, pattern) {
      const value = json?.[name];
      if (typeof value === "string" && pattern.test(value)) return value;
      throw invalid(name);
    },
    count(name, fallback) {
      const value = json?.[name] ?? fallback;
      if (typeof value === "number" && Number.isSafeInteger(value) && value >= 1) return value;
      throw invalid(name);
    },
  };
}
