/**
 * The access log: one JSON line per request on stdout, keys in the order of {@link AccessEntry}.
 * The client field is always an address already passed through `anonymizeIp`, and the tenant field
 * a salted label (or "-"), never a plain host. The path is the canonical one every phase saw, its
 * query left out unless the operator asks for it (`observe.access_log.query`: a query often
 * carries tokens and personal data). The user agent is what the client claims, so it is cut to
 * {@link USER_AGENT_CHARS} characters and its control characters are written as `\xNN`: a line
 * never carries a terminal escape or a forged line break. Sampling thins successful traffic only: a request
 * answered 5xx, withheld (status 0) or carrying an `outcome` (an overload kind, a policy phase, a
 * failure kind) is always written, so errors are never sampled away. Operation paths are not
 * logged at all: see {@link shouldLog}. Logging never throws into the request path, nor waits: lines
 * leave through the isolate's stdout outlet (log_outlet.ts), which drops and counts what a stalled
 * reader does not take. Diagnostics (stderr) are diag.ts.
 *
 * @module
 */
import { standardOutlets } from "./log_outlet.ts";

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
  /** The canonical path; with `?` and the query as received only when the operator opts in. */
  path: string;
  /** `HTTP/1.0`, `HTTP/1.1` or `HTTP/2`. */
  protocol: string;
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
  /** The User-Agent header as {@link userAgentField} writes it; absent when none was sent. */
  user_agent?: string;
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
 *   route: "api", method: "GET", path: "/v1/items", protocol: "HTTP/1.1", status: 200,
 *   bytes_in: 0, bytes_out: 12, duration_ms: 3, client: "203.0.113.0",
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

/** The longest user agent logged, in characters; the rest is cut. */
export const USER_AGENT_CHARS = 128;

/**
 * A User-Agent header as the access log writes it: control characters (C0, DEL, C1) written as
 * `\xNN`, then cut to at most {@link USER_AGENT_CHARS} characters (never inside an escape).
 * Undefined when no header was sent.
 *
 * @param header the header value (node:http joins repeats with ", ")
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { userAgentField } from "./access_log.ts";
 * assert.equal(userAgentField("curl/8.5.0"), "curl/8.5.0");
 * assert.equal(userAgentField("evil\x1b[31m"), "evil\\x1b[31m");
 * assert.equal(userAgentField("x".repeat(500))?.length, 128);
 * assert.equal(userAgentField(undefined), undefined);
 * ```
 */
export function userAgentField(header: string | readonly string[] | undefined): string | undefined {
  if (header === undefined) return undefined;
  const text = typeof header === "string" ? header : header.join(", ");
  let out = "";
  for (const char of text) {
    const code = char.charCodeAt(0);
    const control = code < 0x20 || (code >= 0x7f && code <= 0x9f);
    const piece = control ? `\\x${code.toString(16).padStart(2, "0")}` : char;
    if (out.length + piece.length > USER_AGENT_CHARS) break;
    out += piece;
  }
  return out;
}

/**
 * The protocol field of a request, from node:http's `httpVersion`.
 *
 * @param httpVersion `1.0`, `1.1` or `2.0`
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { protocolField } from "./access_log.ts";
 * assert.equal(protocolField("1.1"), "HTTP/1.1");
 * assert.equal(protocolField("2.0"), "HTTP/2");
 * ```
 */
export function protocolField(httpVersion: string | undefined): string {
  if (httpVersion === "2.0" || httpVersion === "2") return "HTTP/2";
  return `HTTP/${httpVersion || "1.1"}`;
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
    path: entry.path,
    protocol: entry.protocol,
    status: entry.status,
    bytes_in: entry.bytes_in,
    bytes_out: entry.bytes_out,
    duration_ms: entry.duration_ms,
    upstream_ms: entry.upstream_ms,
    attempts: entry.attempts,
    retries: entry.retries,
    outcome: entry.outcome,
    client: entry.client,
    user_agent: entry.user_agent,
  });
}

/**
 * Lines to stdout through the isolate's outlet (log_outlet.ts): queued and written without ever
 * blocking the event loop; dropped and counted when stdout's reader stalls.
 */
function stdoutWriter(): (line: string) => void {
  const stdout = standardOutlets().stdout;
  return function writeAccessLine(line: string): void {
    stdout.push(line);
  };
}
