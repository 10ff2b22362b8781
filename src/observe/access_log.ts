/**
 * The access log and the diagnostic log.
 *
 * Access log: one JSON line per request on stdout, keys in the order of {@link AccessEntry}. The
 * client field is always an address already passed through `anonymizeIp`, and the tenant field a
 * salted label (or "-"), never a plain host. Sampling thins successful traffic only: a request
 * answered 5xx, withheld (status 0) or carrying an `outcome` (an overload kind, a policy phase, a
 * failure kind) is always written, so errors are never sampled away. Operation paths are not
 * logged at all: see {@link shouldLog}. Logging never throws into the request path; a failed
 * write is counted.
 *
 * Diagnostic log: human lines on stderr, prefixed "portcullis: ", filtered by level.
 *
 * @module
 */

/** One access-log record; the line's keys appear in this order. */
export interface AccessEntry {
  /** When the request arrived, ISO 8601. */
  time: string;
  request_id: string;
  lane: string;
  /** The hashed tenant label, or "-". */
  tenant: string;
  /** The route name, or "-" if none matched. */
  route: string;
  method: string;
  /** The status sent; 0 when the response was withheld or the connection dropped. */
  status: number;
  bytes_in: number;
  bytes_out: number;
  duration_ms: number;
  upstream_ms?: number;
  attempts?: number;
  retries?: number;
  /** An overload kind, policy phase or failure kind. */
  outcome?: string;
  /** The client address, ALREADY anonymised. */
  client: string;
}

/** How the access log behaves. */
export interface AccessLogOptions {
  /** When false, {@link AccessLog.log} does nothing. */
  enabled: boolean;
  /** The share of ordinary requests written, 0..1; errors and outcomes are always written. */
  sample: number;
  /** Where a line goes (default: stdout, with a newline). */
  write?: (line: string) => void;
  /** A number in [0, 1) per sampling decision (default: `Math.random`). */
  random?: () => number;
}

/**
 * The access log.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { AccessLog } from "./access_log.ts";
 * const lines: string[] = [];
 * const log = new AccessLog({ enabled: true, sample: 1, write: (line) => lines.push(line) });
 * log.log({
 *   time: "2025-01-01T00:00:00.000Z", request_id: "r1", lane: "public", tenant: "-",
 *   route: "api", method: "GET", status: 200, bytes_in: 0, bytes_out: 12, duration_ms: 3,
 *   client: "203.0.113.0",
 * });
 * assert.equal(JSON.parse(lines[0]).status, 200);
 * assert.equal(log.written, 1);
 * ```
 */
export class AccessLog {
  readonly #enabled: boolean;
  readonly #sample: number;
  readonly #write: (line: string) => void;
  readonly #random: () => number;
  #written = 0;
  #sampledOut = 0;
  #errors = 0;

  /** @throws {RangeError} when `sample` is not a number in 0..1 */
  constructor(options: AccessLogOptions) {
    if (!(options.sample >= 0 && options.sample <= 1)) {
      throw new RangeError(`Access log sample ${options.sample} is outside 0..1`);
    }
    this.#enabled = options.enabled;
    this.#sample = options.sample;
    this.#write = options.write ?? stdoutWriter();
    this.#random = options.random ?? Math.random;
  }

  /** Lines written. */
  get written(): number {
    return this.#written;
  }

  /** Entries skipped by sampling. */
  get sampledOut(): number {
    return this.#sampledOut;
  }

  /** Entries lost to a failed write. */
  get errors(): number {
    return this.#errors;
  }

  /** Writes the entry as one JSON line, unless disabled or sampled out. Never throws. */
  log(entry: AccessEntry): void {
    if (!this.#enabled) return;
    if (!alwaysLogged(entry) && !this.#sampledIn()) {
      this.#sampledOut++;
      return;
    }
    try {
      this.#write(formatEntry(entry));
      this.#written++;
    } catch {
      this.#errors++;
    }
  }

  /** Decides whether an ordinary entry is kept. */
  #sampledIn(): boolean {
    if (this.#sample >= 1) return true;
    if (this.#sample <= 0) return false;
    return this.#random() < this.#sample;
  }
}

/**
 * Whether a request on `lane` for `path` belongs in the access log: never for `local_health`
 * (operation paths), nor for `provider_health` probes of `/healthz`; every other request is.
 *
 * @param lane the lane name
 * @param path the request path (a query string is ignored)
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { shouldLog } from "./access_log.ts";
 * assert.equal(shouldLog("public", "/healthz"), true);
 * assert.equal(shouldLog("provider_health", "/healthz"), false);
 * assert.equal(shouldLog("local_health", "/metrics"), false);
 * ```
 */
export function shouldLog(lane: string, path: string): boolean {
  if (lane === "local_health") return false;
  if (lane === "provider_health") return path !== "/healthz" && !path.startsWith("/healthz?");
  return true;
}

/** Diagnostic levels, most severe first. */
export type LogLevel = "error" | "warn" | "info" | "debug";

/** A diagnostic logger: one method per level, each dropping lines below the configured level. */
export interface Diagnostics {
  error(message: string): void;
  warn(message: string): void;
  info(message: string): void;
  debug(message: string): void;
}

const LEVEL_RANK: Readonly<Record<LogLevel, number>> = { error: 0, warn: 1, info: 2, debug: 3 };
const PREFIX = "portcullis: ";
const WARNING = "warning: ";

/**
 * A diagnostic logger writing lines at `level` and more severe. Lines are prefixed "portcullis: "
 * unless they already are; warnings read "portcullis: warning: …". Writing never throws.
 *
 * @param level the least severe level written
 * @param write where a line goes (default: stderr, with a newline)
 * @throws {RangeError} when `level` is not a {@link LogLevel}
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { diagnostics } from "./access_log.ts";
 * const lines: string[] = [];
 * const log = diagnostics("warn", (line) => lines.push(line));
 * log.warn("cannot watch /etc/portcullis");
 * log.info("listening");
 * assert.deepEqual(lines, ["portcullis: warning: cannot watch /etc/portcullis"]);
 * ```
 */
export function diagnostics(level: LogLevel, write?: (line: string) => void): Diagnostics {
  if (!Object.hasOwn(LEVEL_RANK, level)) throw new RangeError(`Unknown log level "${level}"`);
  const limit = LEVEL_RANK[level];
  const sink = write ?? stderrWriter();
  const emit = (at: LogLevel, line: string) => {
    if (LEVEL_RANK[at] > limit) return;
    try {
      sink(line);
    } catch {
      // A diagnostic that cannot be written is dropped; it must not fail the caller.
    }
  };
  return {
    error: (message) => emit("error", prefixed(message)),
    warn: (message) => emit("warn", warning(message)),
    info: (message) => emit("info", prefixed(message)),
    debug: (message) => emit("debug", prefixed(message)),
  };
}

/** True for entries that sampling must never drop: server errors, withheld, with an outcome. */
function alwaysLogged(entry: AccessEntry): boolean {
  return entry.status >= 500 || entry.status === 0 || entry.outcome !== undefined;
}

/** The entry as JSON with keys in interface order; absent optional fields are omitted. */
function formatEntry(entry: AccessEntry): string {
  return JSON.stringify({
    time: entry.time,
    request_id: entry.request_id,
    lane: entry.lane,
    tenant: entry.tenant,
    route: entry.route,
    method: entry.method,
    status: entry.status,
    bytes_in: entry.bytes_in,
    bytes_out: entry.bytes_out,
    duration_ms: entry.duration_ms,
    upstream_ms: entry.upstream_ms,
    attempts: entry.attempts,
    retries: entry.retries,
    outcome: entry.outcome,
    client: entry.client,
  });
}

/** The message with the "portcullis: " prefix, added only if missing. */
function prefixed(message: string): string {
  return message.startsWith(PREFIX) ? message : PREFIX + message;
}

/** The message as "portcullis: warning: …", whichever of the two prefixes it already has. */
function warning(message: string): string {
  const body = message.startsWith(PREFIX) ? message.slice(PREFIX.length) : message;
  return PREFIX + (body.startsWith(WARNING) ? body : WARNING + body);
}

/** A writer of newline-terminated lines to stdout. */
function stdoutWriter(): (line: string) => void {
  return lineWriter(Deno.stdout);
}

/** A writer of newline-terminated lines to stderr. */
function stderrWriter(): (line: string) => void {
  return lineWriter(Deno.stderr);
}

/** A writer of newline-terminated lines to a synchronous stream, looping over short writes. */
function lineWriter(stream: { writeSync(bytes: Uint8Array): number }): (line: string) => void {
  const encoder = new TextEncoder();
  return function writeLine(line: string): void {
    let bytes = encoder.encode(line + "\n");
    while (bytes.length > 0) {
      const written = stream.writeSync(bytes);
      if (written <= 0) throw new Error("Cannot write a log line: the stream accepted no bytes");
      bytes = bytes.subarray(written);
    }
  };
}
