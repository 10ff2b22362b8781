/**
 * The diagnostic log: what a running edge, hub, door or Tor pool says on stderr, one JSON object
 * per line with the same three fields first on every line — `time` (ISO 8601, UTC), `level`
 * (`error`, `warn`, `info`, `debug`) and `msg` — then any fields of the line's own (a request
 * worker's lines carry `worker`). A log shipper reads every line the same way; nothing on stderr is
 * free text once a server runs. The access log is separate (stdout, access_log.ts).
 *
 * The components still hand their sink a sentence (`(line: string) => void`), often written as
 * `portcullis: warning: …`. {@link readLine} turns such a sentence into a level and a message:
 * the `portcullis: ` prefix goes, a leading `warning:`, `error:` or `info:` marker becomes the
 * level, a line that says it failed, was refused or rejected is an error, anything else is info.
 * Keeping the sink a plain function keeps the components free of this module and their tests free
 * of JSON.
 *
 * Lines leave through the isolate's stderr outlet (log_outlet.ts): a stalled reader of stderr costs
 * lines, counted, never a blocked event loop.
 *
 * @module
 */
import { standardOutlets } from "./log_outlet.ts";

/** Diagnostic levels, most severe first. */
export type LogLevel = "error" | "warn" | "info" | "debug";

/** Fields a line carries beside `time`, `level` and `msg`. */
export type LogFields = Readonly<Record<string, string | number | boolean | undefined>>;

/** Options for {@link diagnostics}. */
export interface DiagnosticsOptions {
  /** The least severe level written (default `info`). */
  readonly level?: LogLevel;
  /** Fields added to every line, e.g. `{ worker: 2 }`. */
  readonly fields?: LogFields;
  /** Where a line goes (default: stderr, with a newline). */
  readonly write?: (line: string) => void;
  /** The time a line is stamped with (default: now). */
  readonly now?: () => Date;
}

/** A diagnostic logger: one method per level, plus {@link Diagnostics.line} for a sentence. */
export interface Diagnostics {
  /** Writes a sentence, its level read from its words (see {@link readLine}). */
  line(text: string): void;
  error(msg: string, fields?: LogFields): void;
  warn(msg: string, fields?: LogFields): void;
  info(msg: string, fields?: LogFields): void;
  debug(msg: string, fields?: LogFields): void;
}

const LEVEL_RANK: Readonly<Record<LogLevel, number>> = { error: 0, warn: 1, info: 2, debug: 3 };
const PREFIX = "portcullis: ";
const MARKERS: readonly [string, LogLevel][] = [
  ["warning: ", "warn"],
  ["error: ", "error"],
  ["info: ", "info"],
];
/** Words that make an unmarked sentence an error. */
const FAILURE = /\b(failed|refused|rejected|cannot|error)\b/i;
/** Field names a line's own fields may not take. */
const RESERVED: ReadonlySet<string> = new Set(["time", "level", "msg"]);

/**
 * True for one of the four level names.
 *
 * @param name what the operator wrote
 */
export function isLogLevel(name: string): name is LogLevel {
  return Object.hasOwn(LEVEL_RANK, name);
}

/**
 * A diagnostic logger writing JSON lines at `level` and more severe. Writing never throws.
 *
 * @param options the level, the fields of every line, the writer and the clock
 * @throws {RangeError} when `level` is not a {@link LogLevel}
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { diagnostics } from "./diag.ts";
 * const lines: string[] = [];
 * const log = diagnostics({ level: "warn", write: (line) => lines.push(line) });
 * log.line("portcullis: warning: cannot watch /etc/portcullis");
 * log.info("listening");
 * assert.equal(lines.length, 1);
 * assert.equal(JSON.parse(lines[0]).level, "warn");
 * assert.equal(JSON.parse(lines[0]).msg, "cannot watch /etc/portcullis");
 * ```
 */
export function diagnostics(options: DiagnosticsOptions = {}): Diagnostics {
  const level = options.level ?? "info";
  if (!isLogLevel(level)) throw new RangeError(`Unknown log level "${level}"`);
  const limit = LEVEL_RANK[level];
  const sink = options.write ?? stderrLineWriter();
  const now = options.now ?? (() => new Date());
  const emit = (at: LogLevel, msg: string, fields?: LogFields) => {
    if (LEVEL_RANK[at] > limit) return;
    try {
      sink(formatLine(now(), at, msg, { ...options.fields, ...fields }));
    } catch {
      // A diagnostic that cannot be written is dropped; it must not fail the caller.
    }
  };
  return {
    line(text) {
      const read = readLine(text);
      emit(read.level, read.msg);
    },
    error: (msg, fields) => emit("error", msg, fields),
    warn: (msg, fields) => emit("warn", msg, fields),
    info: (msg, fields) => emit("info", msg, fields),
    debug: (msg, fields) => emit("debug", msg, fields),
  };
}

/**
 * The sink the components take (`(line: string) => void`), writing JSON lines.
 *
 * @param options as for {@link diagnostics}
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { diagnosticSink } from "./diag.ts";
 * const lines: string[] = [];
 * const log = diagnosticSink({ fields: { worker: 2 }, write: (line) => lines.push(line) });
 * log("portcullis: ready");
 * assert.deepEqual(Object.keys(JSON.parse(lines[0])), ["time", "level", "msg", "worker"]);
 * ```
 */
export function diagnosticSink(options: DiagnosticsOptions = {}): (line: string) => void {
  const log = diagnostics(options);
  return function diagnosticLine(line: string): void {
    log.line(line);
  };
}

/**
 * The level and message of a sentence written for the diagnostic log.
 *
 * @param text e.g. `portcullis: warning: cannot watch /etc`
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { readLine } from "./diag.ts";
 * assert.deepEqual(readLine("portcullis: warning: cannot watch /etc"), {
 *   level: "warn",
 *   msg: "cannot watch /etc",
 * });
 * assert.deepEqual(readLine("portcullis: config rejected"), { level: "error", msg: "config rejected" });
 * assert.deepEqual(readLine("ready"), { level: "info", msg: "ready" });
 * ```
 */
export function readLine(text: string): { level: LogLevel; msg: string } {
  const msg = text.startsWith(PREFIX) ? text.slice(PREFIX.length) : text;
  for (const [marker, level] of MARKERS) {
    if (msg.startsWith(marker)) return { level, msg: msg.slice(marker.length) };
  }
  // "info:" further in marks a failure a retry absorbed; it stays info whatever its words.
  if (msg.includes(" info: ")) return { level: "info", msg };
  if (msg.includes(" warning: ")) return { level: "warn", msg };
  return { level: FAILURE.test(msg) ? "error" : "info", msg };
}

/**
 * One diagnostic line: `time`, `level`, `msg`, then the line's own fields (undefined ones and
 * reserved names left out).
 *
 * @param time when
 * @param level how severe
 * @param msg what happened
 * @param fields anything else the line says
 */
export function formatLine(time: Date, level: LogLevel, msg: string, fields?: LogFields): string {
  const line: Record<string, unknown> = { time: time.toISOString(), level, msg };
  for (const [name, value] of Object.entries(fields ?? {})) {
    if (value !== undefined && !RESERVED.has(name)) line[name] = value;
  }
  return JSON.stringify(line);
}

/**
 * Lines to stderr through the isolate's outlet (log_outlet.ts): queued and written without ever
 * blocking the event loop; dropped and counted when stderr's reader stalls.
 */
function stderrLineWriter(): (line: string) => void {
  const stderr = standardOutlets().stderr;
  return function writeLine(line: string): void {
    stderr.push(line);
  };
}
