/**
 * One attempt of a proxied exchange on the wire. The attempt loop (upstream.ts) decides where each
 * attempt goes and whether another may follow; this module makes one: the upstream request with its
 * way out, TLS and per-attempt limits, the count of bytes it wrote (the at-most-once rule's
 * evidence), the request body's pump, and the one settlement — the response head, or a failure
 * classified (attempt_failure.ts) for the pool, the negative cache, the retry rule and the client.
 *
 * @module
 */
import http from "node:http";
import type { Duplex } from "node:stream";
import { CONNECT_MS, HANDSHAKE_SIGNAL } from "../egress/agents.ts";
import type { Way } from "../egress/egress.ts";
import { UPSTREAM_TLS } from "../egress/upstream_tls.ts";
import { CLIENT_CONNECTION } from "../egress/reuse_settle.ts";
import type { Backend } from "../egress/destinations.ts";
import type { RequestContext } from "../request/context.ts";
import type { ProxyAction } from "./actions.ts";
import type { ForwardContext } from "./hygiene.ts";
import { forwardBody } from "./forward_body.ts";
import { type StreamedBody, streamUpstream } from "../request/body_stream.ts";
import {
  abortedFailure,
  AttemptFailure,
  classify,
  firstByteFailure,
  tlsAlert,
} from "./attempt_failure.ts";

/**
 * The upstream request, decided once before any attempt: the path and query it asks for (after the
 * route's rewrite, canonical again), whether it may be sent twice, and the forwarding context its
 * head is rebuilt from — every field but the two each attempt sets itself (the backend's Host
 * authority and the attempt's `traceparent`).
 */
export interface Forward {
  readonly action: ProxyAction;
  /** Path and query sent upstream. */
  readonly target: string;
  readonly hasBody: boolean;
  /** True when the method (or the route's `retry_post`) lets a sent request be sent again. */
  readonly eligible: boolean;
  /** The client's header list (HTTP/2 pseudo-headers dropped). */
  readonly raw: readonly string[];
  readonly context: Omit<ForwardContext, "authority" | "traceparent">;
  /** The most request-body bytes forwarded (the caps policy); beyond it the exchange is cut. */
  readonly bodyLimit?: number;
}

/** What an attempt got back: the response head, its body to stream, and for a 101 the tunnel. */
export interface Answer {
  readonly status: number;
  readonly rawHeaders: string[];
  /** The upstream connection it came on: the idle watch honours its `Keep-Alive` there. */
  readonly connection?: object | null;
  /** The response's `Keep-Alive` value, if any. */
  readonly keepAlive?: string;
  /** The body, to stream; `settle` learns once whether the upstream delivered all of it. */
  stream(settle: (ok: boolean) => void): StreamedBody;
  readonly tunnel?: { readonly socket: Duplex; readonly head: Uint8Array };
}

/** The answer of a `node:http` response. */
function nodeAnswer(response: http.IncomingMessage, tunnel?: Answer["tunnel"]): Answer {
  const keepAlive = response.headers["keep-alive"];
  return {
    status: response.statusCode ?? 502,
    rawHeaders: response.rawHeaders,
    connection: response.socket,
    keepAlive: typeof keepAlive === "string" ? keepAlive : undefined,
    stream: (settle) => streamUpstream(response, settle),
    tunnel,
  };
}

/** One attempt's own choices: its number, the backend, the way out, and the head written for them. */
export interface Attempt {
  readonly number: number;
  readonly backend: Backend;
  readonly way: Way;
  readonly headers: string[];
}

/** Sends one attempt; resolves once the upstream's response headers (or its 101) arrived. */
export function sendAttempt(
  context: RequestContext,
  forward: Forward,
  attempt: Attempt,
): Promise<Answer> {
  return new Promise((resolve, reject) => {
    new AttemptExchange(context, forward, attempt, { resolve, reject }).start();
  });
}

/**
 * One attempt on the wire: the upstream request, the socket node gave it and how many bytes went
 * out on it, the request body's pump, and the one settlement (answer or classified failure) —
 * whichever of the response, an error, the body limit or the request's abort comes first.
 */
class AttemptExchange {
  readonly #context: RequestContext;
  readonly #forward: Forward;
  readonly #settle: { resolve(answer: Answer): void; reject(error: AttemptFailure): void };
  readonly #upstream: http.ClientRequest;
  /** A connection still being made for this attempt is abandoned with it (agents.ts). */
  readonly #handshake = new AbortController();
  /** The socket node handed this request (a pooled one carried earlier requests). */
  #socket?: Duplex & { bytesWritten?: number; connecting?: boolean };
  /** What the socket had written before this request (earlier requests, a SOCKS handshake). */
  #before = 0;
  #bodyTaken = false;
  #settled = false;
  #stopBody?: () => void;
  #stopWaiting = () => {};
  /** True for an `https://` backend. */
  readonly #tls: boolean;

  constructor(
    context: RequestContext,
    forward: Forward,
    attempt: Attempt,
    settle: { resolve(answer: Answer): void; reject(error: AttemptFailure): void },
  ) {
    this.#context = context;
    this.#forward = forward;
    this.#settle = settle;
    const { backend, way, headers } = attempt;
    this.#tls = backend.tls !== undefined;
    this.#upstream = http.request({
      host: backend.hostname,
      port: backend.port,
      method: context.head.method,
      path: forward.target,
      headers,
      agent: way.agent,
      setHost: false,
      [HANDSHAKE_SIGNAL]: this.#handshake.signal,
      [UPSTREAM_TLS]: backend.tls,
      [CONNECT_MS]: forward.action.connectMs,
      [CLIENT_CONNECTION]: context.request.socket,
    } as http.RequestOptions);
    refuseTransparentRetry(this.#upstream);
  }

  /** Wires the request's events; an already aborted request settles at once. */
  start(): void {
    const upstream = this.#upstream;
    this.#stopWaiting = this.#context.onAbort(() => this.#aborted());
    if (this.#settled) return;
    // Emitted before node writes the head on it.
    upstream.once("socket", (given) => this.#gotSocket(given));
    if (!this.#forward.hasBody) upstream.end();
    upstream.once("response", (response) => this.#done(null, nodeAnswer(response)));
    if (this.#context.upgrade) {
      upstream.once("upgrade", (response, socket: Duplex, head: Uint8Array) => {
        // node's client dropped its own error listener before "upgrade" (an upstream's reset
        // would end the isolate): owned at once, an error ends this tunnel alone.
        socket.on("error", function upstreamTunnelError() {
          socket.destroy();
        });
        this.#done(null, nodeAnswer(response, { socket, head }));
      });
    }
    upstream.once("error", (error) => {
      const failure = classify(error, this.#connected(), this.#bodyTaken, this.#sentBytes());
      this.#done(this.#tls ? tlsAlert(failure) : failure);
    });
  }

  /** What this attempt sent so far, for its failure. */
  #progress(): { sentBytes: number; bodyTaken: boolean } {
    return { sentBytes: this.#sentBytes(), bodyTaken: this.#bodyTaken };
  }

  /** Request bytes (head and body) this attempt handed to its socket. */
  #sentBytes(): number {
    const socket = this.#socket;
    return socket ? Math.max(0, (socket.bytesWritten ?? 0) - this.#before) : 0;
  }

  /** Connected once node handed a socket that is done connecting (SOCKS: after the reply). */
  #connected(): boolean {
    return this.#socket !== undefined && this.#socket.connecting !== true;
  }

  #gotSocket(given: Duplex & { bytesWritten?: number; connecting?: boolean }): void {
    this.#socket = given;
    this.#before = given.bytesWritten ?? 0;
    const ready = () => {
      this.#awaitFirstByte();
      if (this.#forward.hasBody) this.#startBody();
    };
    if (given.connecting) given.once("connect", ready);
    else ready();
  }

  /**
   * The route's `first_byte_ms`: from the connection being ready (the head goes out at once) to
   * the response head. A backend slower than that fails this attempt as a timeout, charged to the
   * backend, leaving the rest of the deadline to the next attempt (for a request that may be sent
   * again).
   */
  #awaitFirstByte(): void {
    const limit = this.#forward.action.firstByteMs;
    if (limit === undefined || this.#settled) return;
    const timer = setTimeout(() => {
      this.#done(firstByteFailure(limit, this.#progress()));
    }, limit);
    const stop = () => clearTimeout(timer);
    this.#upstream.once("response", stop).once("upgrade", stop).once("close", stop);
  }

  /** Pumps the request body inside the frame the gateway wrote (forward_body.ts). */
  #startBody(): void {
    if (this.#settled) return;
    this.#bodyTaken = true;
    const framing = this.#context.head.body;
    this.#stopBody = forwardBody(this.#context.request, this.#upstream, {
      declared: typeof framing === "number" ? framing : undefined,
      limit: this.#forward.bodyLimit,
      overflow: (reason) => this.#overflow(reason),
    });
  }

  /** The deadline passed or the client went (attempt_failure.ts `abortedFailure`). */
  #aborted(): void {
    const client = this.#context.abortedBy === "client";
    this.#done(abortedFailure(client, this.#connected(), this.#progress()));
  }

  /**
   * Over the body limit (or, never expected, past the declared length): whatever the upstream got
   * is cut off before it is complete, and the connection is destroyed, never reused.
   */
  #overflow(reason: "limit" | "length"): void {
    if (this.#settled) {
      this.#upstream.destroy();
      return;
    }
    const kind = reason === "limit" ? "payload_too_large" : "bad_request";
    this.#done(
      new AttemptFailure(kind, new Error(`Request body over the ${reason}`), {
        instanceOk: true,
        backendOk: true,
        sentBytes: Math.max(1, this.#sentBytes()),
        bodyTaken: true,
      }),
    );
  }

  /** Settles once; a failure stops the body, abandons the handshake and destroys the request. */
  #done(error: AttemptFailure | null, answer?: Answer): void {
    if (this.#settled) {
      answer?.tunnel?.socket.destroy();
      return;
    }
    this.#settled = true;
    this.#stopWaiting();
    if (!error) return this.#settle.resolve(answer!);
    this.#stopBody?.();
    this.#handshake.abort();
    this.#upstream.destroy();
    this.#settle.reject(error);
  }
}

/**
 * Deno 2.9.6's `node:http` client re-sends a request on a new connection by itself when the pooled
 * keep-alive socket it was written to closes before a response — also when the gateway destroys
 * the request, and also after body bytes went out. Measured: a DELETE arrived twice, and a body
 * whose first bytes had gone out arrived again on a fresh connection *without its head*, read by
 * nginx as a request of its own (request smuggling). Retries are the gateway's decision, made with
 * what it knows was sent (retry.ts), so the client's own replay is switched off: its guard treats
 * a request that is already being retried as not retryable.
 */
function refuseTransparentRetry(request: http.ClientRequest): void {
  (request as unknown as { _retrying: boolean })._retrying = true;
}
