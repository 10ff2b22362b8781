/**
 * The edge's side of the hub's config stream, one poll at a time: ask for the set after the one
 * served (`have`; `seen` names one received but not served), read the answer — a snapshot, a delta against `have`, or `current` — rebuild the
 * file set it describes and check it against the hash the hub sent, and say in a line what went
 * wrong when a poll fails. What to do with a received set (offer it, cache it, back off) is the
 * follower's (`hub_client.ts`); this module holds no state.
 *
 * Kept apart from the follower so the wire format reads in one place: the answer's fields, which
 * of them a delta uses, the paths it may name, and the base64 bodies. The answer is plain JSON, so
 * no parser beyond `JSON.parse` is needed; the rebuilt set's hash is what makes it trusted.
 *
 * @module
 */
import { Buffer } from "node:buffer";
import { type FileSet, hashFileSet, isSafeRelativePath } from "../config/file_set.ts";
import type { HubClientConfig } from "../config/load.ts";
import { readNamedFile } from "../config/rooted_read.ts";
import { describeError } from "../request/errors.ts";

/** The hub credentials are secrets; PEM files are small. */
const SECRET = { secret: true } as const;
const PEM = { maxBytes: 1 << 20 } as const;

/** The received set the next poll is keyed by. */
export interface Base {
  readonly hash: string;
  readonly files: FileSet;
}

/** A hub answer, as far as the edge reads it. */
export interface Answer {
  readonly type: "snapshot" | "delta" | "current";
  readonly generation: number;
  readonly hash: string;
  readonly from?: string;
  readonly files?: Record<string, string>;
  readonly changed?: Record<string, string>;
  readonly removed?: string[];
  readonly hub?: Record<string, unknown>;
}

/** One poll of the hub. */
export interface AskOptions {
  readonly hub: HubClientConfig;
  readonly nodeId: string;
  /** The hash of the set served, or "" for none (the hub then answers with a snapshot). */
  readonly have: string;
  /**
   * The hash of a set received but not served (waiting for the cache, or refused), or "": the hub
   * holds the poll while that is its live set, as it does for `have`, and then answers `current`.
   */
  readonly seen?: string;
  /** Let the hub hold the poll until the set changes (false answers at once). */
  readonly wait: boolean;
  /** The mutual-TLS client (from {@link hubHttpClient}), or none; asked after the token is read. */
  readonly client: () => Promise<Deno.HttpClient | undefined>;
  /** Cuts the poll short; the hub's poll timeout applies as well. */
  readonly signal: AbortSignal;
}

/**
 * Asks the hub for the set after `have` (held unless `wait` is false), within the poll timeout.
 *
 * @returns the hub's answer
 * @throws Error when the hub answers with a status other than 200, or the request fails
 */
export async function askHub(options: AskOptions): Promise<Answer> {
  const { hub, nodeId, have, seen, wait, client, signal } = options;
  const url = new URL("/v1/config/stream", hub.url);
  url.searchParams.set("node_id", nodeId);
  url.searchParams.set("have", have);
  if (seen) url.searchParams.set("seen", seen);
  if (!wait) url.searchParams.set("wait", "0");
  const headers: Record<string, string> = { accept: "application/json" };
  if (hub.tokenFile) {
    const token = await readNamedFile(hub.tokenFile, "hub.token_file", SECRET);
    headers.authorization = `Bearer ${token.trim()}`;
  }
  const response = await fetch(url, {
    headers,
    client: await client(),
    signal: AbortSignal.any([signal, AbortSignal.timeout(hub.pollTimeoutMs)]),
  });
  return readAnswer(response.status, await response.text());
}

/** A mutual-TLS client made from the hub's credential files. */
export async function hubHttpClient(
  tls: NonNullable<HubClientConfig["tls"]>,
): Promise<Deno.HttpClient> {
  return Deno.createHttpClient({
    caCerts: [await readNamedFile(tls.caFile, "hub.tls.ca_file", PEM)],
    cert: await readNamedFile(tls.certFile, "hub.tls.cert_file", PEM),
    key: await readNamedFile(tls.keyFile, "hub.tls.key_file", { ...PEM, ...SECRET }),
  });
}

/**
 * The hub's answer to a poll, or an error naming the status and, from an error envelope, its code
 * and message (else the body's first 200 characters).
 */
export function readAnswer(status: number, text: string): Answer {
  if (status !== 200) throw readAnswerError(status, text);
  return JSON.parse(text) as Answer;
}

/** The hub answered with an error: its status and, from the envelope, its code. */
export class HubRefusal extends Error {
  /** The HTTP status. */
  readonly status: number;
  /** The envelope's code (`node_revoked`, `unauthenticated`, ...), or "" when there was none. */
  readonly code: string;

  /**
   * @param status the HTTP status
   * @param code the envelope's code, or ""
   * @param detail what the log says after the status
   */
  constructor(status: number, code: string, detail: string) {
    super(`the hub answered ${status} (${detail})`);
    this.name = "HubRefusal";
    this.status = status;
    this.code = code;
  }
}

/**
 * The error for a hub's answer other than 200: status, and the envelope's code and message (else
 * the body's first 200 characters).
 */
export function readAnswerError(status: number, text: string): HubRefusal {
  // A hub answering in its minimal error format (`errors.format`) sends the reason phrase alone.
  let detail = text.slice(0, 200).trim();
  let code = "";
  try {
    const error = JSON.parse(text).error;
    if (typeof error?.code === "string") code = error.code;
    detail = `${error.code}: ${error.message}`;
  } catch { /* not an envelope */ }
  return new HubRefusal(status, code, detail);
}

/**
 * The hub answered with a set that could not be rebuilt or did not check against its hash: the hub
 * is reachable, its set is what failed (readiness says `set_rejected`, not `hub_unreachable`). The
 * message is the cause's, so logs and `last_error` read as before.
 */
export class UnverifiedSet extends Error {
  /** @param cause why the set did not check */
  constructor(cause: unknown) {
    super(cause instanceof Error ? cause.message : String(cause), { cause });
    this.name = "UnverifiedSet";
  }
}

/**
 * Rebuilds the set an answer describes and checks it against the hash the hub sent.
 *
 * @param base the set held, which a delta must be against
 * @returns the received set, the base of the next poll
 * @throws Error when the answer cannot be rebuilt or the set hashes to another value
 */
export async function receiveSet(answer: Answer, base: Base | undefined): Promise<Base> {
  const files = rebuild(answer, base);
  const hash = await hashFileSet(files);
  if (hash !== answer.hash) {
    throw new Error(
      `the received set hashes to ${hash.slice(0, 12)}, not ${answer.hash.slice(0, 12)}`,
    );
  }
  return { hash, files };
}

/** The file set an answer describes, from the answer and the set it is a delta against. */
export function rebuild(answer: Answer, base: Base | undefined): FileSet {
  if (answer.type === "current") throw new Error("the hub's current set is not the one held");
  if (answer.type === "delta" && answer.from !== base?.hash) {
    throw new Error("the hub sent a delta against a set this edge does not hold");
  }
  const files = new Map(answer.type === "delta" ? base!.files : []);
  for (const name of answer.removed ?? []) files.delete(name);
  for (const [name, data] of Object.entries(answer.files ?? answer.changed ?? {})) {
    if (!isSafeRelativePath(name)) {
      throw new Error(`the hub sent an unsafe path ${JSON.stringify(name)}`);
    }
    files.set(name, new Uint8Array(Buffer.from(data, "base64")));
  }
  return files;
}

/**
 * What the edge says about a failed poll, in its log and in `status().hub.last_error`. Not plain
 * {@link describeError}: an operator needs "no answer in time" rather than `TimeoutError: Signal
 * timed out.`, the cause rather than fetch's wrapper and its URL, and a hint where rustls reports a
 * refused client certificate as the hub hanging up mid-handshake (proof 11 reads these lines).
 */
export function describeHubFailure(error: unknown): string {
  if (error instanceof DOMException && error.name === "TimeoutError") return "no answer in time";
  const inner = error instanceof Error && error.cause instanceof Error ? error.cause : error;
  const message = (inner instanceof Error ? inner.message : describeError(inner))
    .replace(/^error sending request for url \([^)]*\): /, "");
  return /close_notify|handshake/i.test(message)
    ? `the hub ended the TLS handshake (is cert_file signed by the hub's client CA?): ${message}`
    : message;
}
