/**
 * What a client reads when the gateway answers a failure itself: the operator's choice, made once at
 * boot (`errors:` in the config), applied in the one place each server writes a reply.
 *
 * Why this exists: the failure table's JSON envelope (`{"error":{"code","message","request_id"}}`)
 * is the gateway's own shape, so one 404 or 421 told a scanner which software answered — and so
 * found every edge of a fleet meant to front onion services without pointing at them. By default a
 * failure is now answered with its status line's reason phrase as `text/plain` (what many servers
 * send) and no request id; the envelope is a choice (`format: json`), as are templates per status
 * (`"404"`, or a class `"4xx"`/`"5xx"`) and the request id (`request_id: true`: the `X-Request-Id`
 * header, the envelope's field and a template's `{request_id}`).
 *
 * Only replies the gateway built from the failure table (`Reply.failure`) are rendered; a proxied
 * response, a streamed body, a tunnel or a withheld answer passes unchanged. Headers the failure set
 * for the client's sake (`Retry-After`, `Allow`, RateLimit fields) are kept; its Content-Type is the
 * rendering's.
 *
 * @module
 */
import { STATUS_CODES } from "node:http";
import type { FailureKind } from "./errors.ts";
import type { Reply } from "./reply.ts";

/** One operator template, its file already read. */
export interface ErrorTemplate {
  /** The body, with `{status}`, `{reason}` and (when allowed) `{request_id}` to fill in. */
  readonly body: string;
  /** The Content-Type sent with it. */
  readonly contentType: string;
}

/** How failures are rendered, as the config resolved it. */
export interface ErrorPagesOptions {
  /** `minimal`: the reason phrase as text; `json`: the failure table's envelope. */
  readonly format: "minimal" | "json";
  /** Whether the request id reaches the client (header, envelope field, template placeholder). */
  readonly requestId: boolean;
  /** Templates by exact status (`"404"`) or class (`"4xx"`), the exact one first. */
  readonly templates?: ReadonlyMap<string, ErrorTemplate>;
  /**
   * Kinds always answered with the envelope and the request id, whatever the format: the hub's
   * answers to a node it authenticated, whose client reads the code (`node_revoked`).
   */
  readonly structuredKinds?: ReadonlySet<FailureKind>;
}

/** A rendered failure and the headers its writer adds. */
export interface Finished {
  readonly reply: Reply;
  readonly extra: Record<string, string>;
}

const TEXT = "text/plain; charset=utf-8";
const JSON_TYPE = "application/json";

/** The failure renderer one process builds at boot and hands to its writers. */
export class ErrorPages {
  readonly #options: ErrorPagesOptions;

  /** @param options format, request id and templates, as the config resolved them */
  constructor(options: ErrorPagesOptions) {
    this.#options = options;
  }

  /** The product-blind default: reason phrase as text, no request id. */
  static minimal(): ErrorPages {
    return new ErrorPages({ format: "minimal", requestId: false });
  }

  /** The failure table's envelope with the request id: what nodes of the fleet read. */
  static structured(): ErrorPages {
    return new ErrorPages({ format: "json", requestId: true });
  }

  /** These renderings, except that `kinds` keep the envelope and the request id. */
  keeping(kinds: readonly FailureKind[]): ErrorPages {
    return new ErrorPages({ ...this.#options, structuredKinds: new Set(kinds) });
  }

  /** Whether the request id reaches the client. */
  get requestId(): boolean {
    return this.#options.requestId;
  }

  /**
   * The reply a client gets, and the headers the writer adds (`X-Request-Id` unless a failure's is
   * withheld).
   *
   * @param reply what a phase or a refusal answered
   * @param requestId the request's id
   * @example
   * ```ts
   * import { ErrorPages } from "./error_pages.ts";
   * import { failureReply } from "./errors.ts";
   * const { reply, extra } = ErrorPages.minimal().finish(failureReply("no_route", "r-1"), "r-1");
   * reply.body; // "Not Found\n"
   * extra["x-request-id"]; // undefined
   * ```
   */
  finish(reply: Reply, requestId: string): Finished {
    const kept = this.#options.structuredKinds?.has(reply.failure!) ?? false;
    if (!renderable(reply) || kept) return { reply, extra: { "x-request-id": requestId } };
    const { format, requestId: showId } = this.#options;
    const extra: Record<string, string> = showId ? { "x-request-id": requestId } : {};
    const template = this.#templateFor(reply.status);
    const headers = withoutContentType(reply.headers);
    if (template) {
      const body = fill(template.body, reply.status, showId ? requestId : "");
      return {
        reply: { ...reply, headers: { ...headers, "content-type": template.contentType }, body },
        extra,
      };
    }
    if (format === "json") {
      const body = showId ? reply.body : withoutRequestId(reply.body);
      return {
        reply: { ...reply, headers: { ...headers, "content-type": JSON_TYPE }, body },
        extra,
      };
    }
    const body = `${reasonOf(reply.status)}\n`;
    return { reply: { ...reply, headers: { ...headers, "content-type": TEXT }, body }, extra };
  }

  #templateFor(status: number): ErrorTemplate | undefined {
    const templates = this.#options.templates;
    if (!templates) return undefined;
    return templates.get(String(status)) ?? templates.get(`${String(status)[0]}xx`);
  }
}

/** A failure the gateway built, with a fixed body (not streamed, tunnelled or withheld). */
function renderable(reply: Reply): boolean {
  return reply.failure !== undefined && reply.stream === undefined &&
    reply.tunnel === undefined && reply.withhold === undefined && reply.rawHeaders === undefined;
}

/** The status line's reason phrase (RFC 9110 §15), or "Error" for a code without one. */
export function reasonOf(status: number): string {
  return STATUS_CODES[status] ?? "Error";
}

/** Fills a template's placeholders. */
function fill(body: string, status: number, requestId: string): string {
  return body.replaceAll("{status}", String(status)).replaceAll("{reason}", reasonOf(status))
    .replaceAll("{request_id}", requestId);
}

function withoutContentType(
  headers: Readonly<Record<string, string>> | undefined,
): Record<string, string> {
  const kept: Record<string, string> = {};
  for (const [name, value] of Object.entries(headers ?? {})) {
    if (name.toLowerCase() !== "content-type") kept[name] = value;
  }
  return kept;
}

/** The envelope without its `request_id` field (any other body unchanged). */
function withoutRequestId(body: Reply["body"]): Reply["body"] {
  if (typeof body !== "string") return body;
  try {
    const envelope = JSON.parse(body);
    if (envelope?.error && typeof envelope.error === "object") delete envelope.error.request_id;
    return JSON.stringify(envelope);
  } catch {
    return body;
  }
}
