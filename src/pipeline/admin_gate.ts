/**
 * The admin gate: an optional secret path `/<slug>/<t1>/<t2>/` on the public lane
 * (`lanes.public.admin_gate.file`), recognised before the tenant lookup and before anything
 * observes the request, and answered 501 (`admin_not_implemented`) for now.
 *
 * **What is a hit.** The raw request target as the client sent it (`request.url`: before the head
 * checks and the canonical path), read one way:
 *
 * - it must start with "/" (origin form): an absolute-form target (`http://host/<slug>/…`), `*`
 *   or an authority is never a hit;
 * - the path ends at the first "?": a query is ignored (`/<slug>/<t1>/<t2>/?x=1` is a hit);
 * - its first three "/"-separated segments must equal the configured three, byte for byte. No
 *   percent-decoding (`/%73lug/…` misses), no case folding (`/SLUG/…` misses), no merged slashes
 *   (`//<slug>/…` and `/<slug>//<t1>/…` miss), no dot segments. The segments are unreserved
 *   characters, so every other spelling is the client's choice; reading spellings would make the
 *   gate a second URL parser that has to agree with the canonical path forever;
 * - the third segment ends at "/", at the query or at the end: `/<slug>/<t1>/<t2>` is a hit like
 *   `/<slug>/<t1>/<t2>/` and `/<slug>/<t1>/<t2>/more`. A request that names all three comes from
 *   someone who holds them; sent down the tenant path it would put them in a span's `url.path`.
 *
 * A miss goes on exactly as before (tenant lookup: 421, 404, …) and is observed like any request —
 * so is a near-miss (`/%73lug/…`): its span's `url.path` carries the canonical path. The admin
 * client must send the exact bytes.
 *
 * **Constant time.** Whatever the target, {@link AdminGate.matches} takes its first three segments
 * (missing ones are empty), HMAC-SHA-256s each under a key drawn at start, compares each digest with
 * the configured one by `timingSafeEqual`, and ANDs the three results as bits: no early return, no
 * `&&`. Its time depends on the target's length, never on which segment differs or whether one
 * does (`tests/admin_gate_timing_test.ts` holds a mismatch in the first segment, one in the third
 * and a hit to a signed-rank test). Digests rather than the segments: they have one length, so the
 * comparison says nothing about a segment's length, and the secret is not kept in memory as text
 * (the same reasons as the hub's `TokenBook`).
 *
 * **Where it sits.** First thing in the runner's `serve`, before the request id, the record and
 * every phase: the record is where metrics, the access log and the spans all start, so a hit that
 * never gets one cannot be seen by any configuration of them — not a sampling rate, not a new log
 * sink, not a tracing provider. It is not in the lane listener because the transport never reads
 * what a request asks for. It runs on every HTTP listener of the public lane (the ACME companion
 * too: an ordinary request there would be traced with its path); never on the protected lanes.
 *
 * **Admission.** A hit is not a way around the ledger: it is admitted like any public request
 * (draining, the rate budget, per-connection and slot ceilings), a refusal is the same typed
 * overload everyone gets, and the reservation is released when the 501 is delivered. What moves
 * for a hit is lane-wide accounting only — the ledger's admitted and completed (or overload)
 * counts, and the connection counts the transport keeps before any byte is parsed — never the
 * response counters, the request metrics, a log line or a span. The connection is closed after the
 * answer: the gate reads no body and checks no framing, so nothing after it could be trusted.
 *
 * @module
 */
import { createHash, type Hash, randomBytes, timingSafeEqual } from "node:crypto";
import { readNamedFile } from "../config/rooted_read.ts";
import type { Ledger } from "../ledger/ledger.ts";
import type { LaneName } from "../ledger/lane_names.ts";
import { Reservation } from "../ledger/reservation.ts";
import { failureReply } from "../request/errors.ts";
import { requestIdFor } from "../request/request_id.ts";
import type { Arrival } from "../server/arrival.ts";
import { overloadReply } from "./lane_phases.ts";

/** The config field that names the gate's file. */
export const ADMIN_GATE_FIELD = "lanes.public.admin_gate.file";

/** What the three segments are called in messages (never what they hold). */
const NAMES = ["slug", "t1", "t2"] as const;
/** One segment: 16 to 128 characters of `[A-Za-z0-9_-]`. */
const SEGMENT = /^[A-Za-z0-9_-]{16,128}$/;
const SLASH = 0x2f;

/**
 * The matcher: the three segments' digests under a per-process key, and nothing else.
 *
 * @example
 * ```ts
 * import { AdminGate } from "./admin_gate.ts";
 * const gate = AdminGate.fromLine("/slug-0123456789abcdef/t1-0123456789abcdef/t2-0123456789abcdef/");
 * gate.matches("/slug-0123456789abcdef/t1-0123456789abcdef/t2-0123456789abcdef/status"); // true
 * gate.matches("/SLUG-0123456789abcdef/t1-0123456789abcdef/t2-0123456789abcdef/"); // false
 * ```
 */
export class AdminGate {
  readonly #digest: (segment: string) => Uint8Array;
  readonly #digests: readonly [Uint8Array, Uint8Array, Uint8Array];

  private constructor(segments: readonly string[]) {
    this.#digest = hmacSha256(randomBytes(BLOCK));
    const [a, b, c] = segments.map(this.#digest);
    this.#digests = [a, b, c];
  }

  /**
   * The gate for one line `/<slug>/<t1>/<t2>/` (a final newline is allowed).
   *
   * @throws {TypeError} saying which segment is malformed and how, never what it holds
   */
  static fromLine(line: string): AdminGate {
    const text = line.endsWith("\r\n") ? line.slice(0, -2) : line.replace(/\n$/, "");
    if (/[\r\n]/.test(text)) throw new TypeError("It holds more than one line");
    if (!text.startsWith("/") || !text.endsWith("/") || text.length < 2) {
      throw new TypeError("Its line does not start and end with /");
    }
    const segments = text.slice(1, -1).split("/");
    if (segments.length !== 3) {
      throw new TypeError(`Its line has ${segments.length} segments, not 3`);
    }
    segments.forEach((segment, index) => {
      if (SEGMENT.test(segment)) return;
      const which = `Segment ${index + 1} (${NAMES[index]})`;
      if (segment.length < 16 || segment.length > 128) {
        throw new TypeError(`${which} is ${segment.length} characters long, not 16 to 128`);
      }
      throw new TypeError(`${which} holds a character outside A-Z a-z 0-9 _ -`);
    });
    return new AdminGate(segments);
  }

  /**
   * True when `target` (a raw request target) is a hit. Constant time in everything but the
   * target's own length (see the module doc).
   */
  matches(target: string): boolean {
    const [a, b, c] = firstSegments(target);
    const [da, db, dc] = this.#digests;
    const origin = Number(target.charCodeAt(0) === SLASH);
    const hit = origin &
      Number(timingSafeEqual(this.#digest(a), da)) &
      Number(timingSafeEqual(this.#digest(b), db)) &
      Number(timingSafeEqual(this.#digest(c), dc));
    return hit === 1;
  }
}

/** SHA-256's block size: a key of this length is used as it is (RFC 2104 §2). */
const BLOCK = 64;

/**
 * HMAC-SHA-256 (RFC 2104) under `key`, with the two padded keys hashed once: each message costs
 * two copies of a hash state and two short hashes. Measured on a busy 2-core machine, 3.2 µs a
 * segment against 8–15 µs for `createHmac` (Deno 2.9.6), whose per-call key setup would make the
 * three digests every public request pays cost ~35 µs instead of ~10.
 *
 * @param key exactly {@link BLOCK} bytes
 * @returns the digest function; equal to `createHmac("sha256", key).update(message).digest()`
 */
export function hmacSha256(key: Uint8Array): (message: string) => Uint8Array {
  if (key.length !== BLOCK) throw new RangeError(`Expected a ${BLOCK}-byte key, got ${key.length}`);
  const inner: Hash = createHash("sha256").update(key.map((byte) => byte ^ 0x36));
  const outer: Hash = createHash("sha256").update(key.map((byte) => byte ^ 0x5c));
  return function hmac(message) {
    return outer.copy().update(inner.copy().update(message).digest()).digest();
  };
}

/**
 * The first three "/"-separated segments of a target's path (before any "?"); a missing one is
 * empty. A target that does not start with "/" is cut the same way (the caller refuses it): the
 * work is the same whatever the target is.
 */
export function firstSegments(target: string): [string, string, string] {
  const query = target.indexOf("?");
  const end = query < 0 ? target.length : query;
  const out: [string, string, string] = ["", "", ""];
  let start = 1;
  for (let index = 0; index < 3; index++) {
    const slash = start <= end ? target.indexOf("/", start) : -1;
    const stop = slash < 0 || slash > end ? end : slash;
    out[index] = start <= stop ? target.slice(start, stop) : "";
    start = stop + 1;
  }
  return out;
}

/**
 * A path as the access log writes it on the public lane of an edge with an admin gate: every run
 * of 16 or more gate characters (`A-Z a-z 0-9 _ -`, the shape of a gate segment) anywhere in it is
 * written as `-`, so neither a hit nor a near miss (a guess one character off, a segment with `;x`
 * or `%2F` attached, one pushed to the fourth place by a segment in front, the slug sent as an
 * absolute-form authority) puts a secret, or most of one, in the log. It looks at the shape only,
 * never at the secret; long tokens of other paths are masked as well on an edge with a gate.
 *
 * @example
 * ```ts
 * import { withoutGateSegments } from "./admin_gate.ts";
 * withoutGateSegments("/slug-0123456789abcdeX/t1-0123456789abcdef/x"); // "/-/-/x"
 * withoutGateSegments("/shop/cart"); // "/shop/cart"
 * ```
 */
export function withoutGateSegments(path: string): string {
  return path.replace(GATE_RUN, "-");
}

/** A run of gate characters as long as the shortest gate segment, or longer. */
const GATE_RUN = /[A-Za-z0-9_-]{16,}/g;

/**
 * Reads the gate's file at boot, as a secret: owner-only, inside its folder, small.
 *
 * @param file the file, resolved
 * @throws {Error} naming the field and the file and what is wrong (never a segment)
 */
export async function loadAdminGate(file: string): Promise<AdminGate> {
  const text = await readNamedFile(file, ADMIN_GATE_FIELD, { secret: true, maxBytes: 1024 });
  try {
    return AdminGate.fromLine(text);
  } catch (error) {
    const why = (error as Error).message;
    throw new Error(
      `${ADMIN_GATE_FIELD} ${file} must hold one line /<slug>/<t1>/<t2>/ (each segment 16 to ` +
        `128 of A-Z a-z 0-9 _ -): ${why[0].toLowerCase()}${why.slice(1)}`,
    );
  }
}

/** What answering a hit needs from the edge. */
export interface AdminGateServices {
  readonly ledger: Ledger;
  readonly state: { readonly admissionStopped: boolean };
}

/** Options for {@link adminGateAnswer}. */
export interface AdminGateOptions {
  readonly gate: AdminGate;
  readonly services: AdminGateServices;
  /** The lane (always the public lane: the runner gives no other one a gate). */
  readonly lane: LaneName;
  /** The lane stops admitting while the gateway drains. */
  readonly drains: boolean;
}

/**
 * The runner's first step on a gated lane: answers a hit, unobserved, and says it did.
 *
 * @returns a function that is true when it answered `arrival` (a hit); a miss is left untouched
 */
export function adminGateAnswer(options: AdminGateOptions): (arrival: Arrival) => boolean {
  const { gate, services, lane, drains } = options;
  return function adminGate(arrival) {
    if (!gate.matches(arrival.request.url ?? "")) return false;
    const requestId = requestIdFor(arrival.request.headers["x-request-id"]);
    const extra = { "x-request-id": requestId };
    if (drains && services.state.admissionStopped) {
      arrival.refuse(failureReply("draining", requestId), extra);
      return true;
    }
    const admission = services.ledger.admit(lane, arrival.connection);
    if (!(admission instanceof Reservation)) {
      arrival.refuse(overloadReply(admission, requestId), extra);
      return true;
    }
    const reply = failureReply("admin_not_implemented", requestId, {
      headers: { "cache-control": "no-store" },
    });
    arrival.open(admission, () => {}).send(reply, extra, true);
    return true;
  };
}
