/**
 * One proxied exchange: choose a backend and a way out, send the request with its body streamed,
 * and hand back the upstream response to stream down.
 *
 * At most once, by what was written: an attempt counts the bytes it handed to its upstream socket
 * (head and body). An attempt that wrote nothing — the SOCKS instance or the backend refused the
 * connection, the handshake failed — sent nothing, so any method may fail over to another way
 * out. An attempt whose bytes may have reached an upstream is tried again only for a
 * retry-eligible method, only before response headers, only while the request body is unread (or
 * there is none). Both stay within `attempts` and the rolling retry budget, with full-jitter
 * backoff. No HTTP client underneath re-sends on its own (see {@link refuseTransparentRetry}), and
 * a connection still being set up for a request that is given up (the client left, the deadline
 * passed) is abandoned with it, so nothing is opened for nobody.
 *
 * Failure classification: the SOCKS instance or backend cannot be reached, or no way out exists →
 * 502 `upstream_unreachable`; an `https://` backend's TLS handshake failed (its certificate did
 * not verify, it refused ours) → 502 `upstream_tls`; the upstream broke the exchange before its
 * headers → 502 `upstream_failed`; a connection or the response headers took too long → 504
 * `upstream_timeout`.
 * Details (SOCKS reply codes, Deno's permission errors) go to the log, never to the client.
 *
 * @module
 */
import { backoffMs, retryEligible } from "../egress/retry.ts";
import type { Egress } from "../egress/egress.ts";
import type { PendingBackends } from "../egress/pending.ts";
import type { RequestContext } from "../request/context.ts";
import type { Reply } from "../request/reply.ts";
import type { ProxyAction } from "./actions.ts";
import type { Backend } from "../egress/destinations.ts";
import type { AddressSet } from "../request/cidr.ts";
import { failureReply, GatewayError } from "../request/errors.ts";
import { carriesBody } from "../request/head.ts";
import { downstreamHeaders, upstreamHeaders } from "./hygiene.ts";
import { type Answer, type Attempt, type Forward, sendAttempt } from "./attempt.ts";
import { AttemptFailure, deniedByDeno } from "./attempt_failure.ts";
import { applyRewrite } from "./rewrite.ts";
import { canOwn, sendOwnedAttempt } from "./owned_attempt.ts";
import type { Forwarding } from "./forwarding.ts";
import type { PathRules } from "../request/canonical_path.ts";

export type { Forward } from "./attempt.ts";

export type { Forwarding } from "./forwarding.ts";

/** What the proxy phase needs from the edge. */
export interface UpstreamServices {
  readonly egress: Egress;
  /** Requests in flight per backend, for `max_pending`. */
  readonly pending: PendingBackends;
  readonly trusted: AddressSet;
  readonly forwarding: Forwarding;
  /** The edge's path rules: a rewritten path is made canonical again by them. */
  readonly paths: PathRules;
  readonly clock: () => number;
  readonly log: (line: string) => void;
}

/**
 * The hygiene phase's work: decides the upstream request once.
 *
 * @param context the admitted request
 * @param action the route's proxy action
 * @param params the route's path parameters (for rewrites)
 * @param services trusted proxies, forwarding marks, path rules, log
 * @param bodyLimit the caps policy's body limit, when on
 * @returns the forward, or a 400 reply when the rewritten path is ambiguous
 */
export function prepareForward(
  context: RequestContext,
  action: ProxyAction,
  params: Readonly<Record<string, string>>,
  services: UpstreamServices,
  bodyLimit?: number,
): Forward | Reply {
  const { head, request } = context;
  const rewritten = action.rewrite
    ? applyRewrite(action.rewrite, head.path, params, services.paths)
    : head.path;
  if (typeof rewritten !== "string") {
    services.log(`portcullis: request ${context.requestId}: refused: ${rewritten.detail}`);
    return failureReply("ambiguous_path", context.requestId);
  }
  return {
    action,
    target: rewritten + head.query,
    hasBody: carriesBody(head.body),
    eligible: retryEligible(head.method, action.retryPost),
    raw: request.httpVersionMajor === 2 ? withoutPseudo(request.rawHeaders) : request.rawHeaders,
    bodyLimit,
    context: {
      peer: context.peer,
      trusted: services.trusted,
      proto: context.tls ? "https" : "http",
      host: typeof request.headers.host === "string" ? request.headers.host : head.host,
      requestId: context.requestId,
      tenant: action.tenant,
      route: action.route,
      upgrade: context.upgrade !== undefined,
      body: head.body,
      via: services.forwarding.via.backends,
      backendHeaders: services.forwarding.backendHeaders,
      owned: services.forwarding.owned,
      clientIpHeaders: services.forwarding.clientIpHeaders,
    },
  };
}

/**
 * The upstream phase: sends the request, failing over and retrying as the egress allows (one loop
 * of attempts), and answers with the upstream's response streamed.
 *
 * @param context the admitted request
 * @param forward the request as the hygiene phase decided it
 * @param services egress, clock, log
 * @returns the reply that streams the upstream response
 * @throws {GatewayError} classified, after the last permitted attempt
 */
export async function forwardRequest(
  context: RequestContext,
  forward: Forward,
  services: UpstreamServices,
): Promise<Reply> {
  const { egress } = services;
  let tried: Set<number> | undefined;
  /** Backends this request found failing: the next attempt goes to another while one is left. */
  let failed: Set<string> | undefined;
  context.timeoutKind = "upstream_timeout";
  egress.budget.request();

  const circuit = circuitOpen(services, context, forward.action.backends);
  if (circuit) return circuit;
  for (let number = 1;; number++) {
    const open = forward.action.backends.filter((b) => !services.pending.full(b.key, b.maxPending));
    if (open.length === 0) return saturated(services, context, forward.action.backends);
    const backend = egress.chooseBackend(untried(open, failed));
    // The tenant picks the agent: with isolation, its own credentials and kept-alive connections.
    const way = backend ? egress.way(backend, tried, forward.action.tenant) : undefined;
    if (!backend || !way) {
      const error = new GatewayError("upstream_unreachable");
      throw fail(services, context, { attempts: number, error, detail: "no way out" });
    }
    if (way.kind === "socks") (tried ??= new Set()).add(way.pick.index);
    const started = services.clock();
    const record = context.record;
    if (record) record.attempts = number;
    const trace = record?.attempt(number, way.label, backend.authority);
    const headers = upstreamHeaders(forward.raw, {
      ...forward.context,
      authority: backend.authority,
      traceparent: trace?.traceparent,
    });
    const attempt: Attempt = { number, backend, way, headers };
    const release = services.pending.enter(backend.key);
    try {
      const sending = canOwn(context, forward, attempt, egress.settings.ownedReads !== false)
        ? sendOwnedAttempt(context, forward, attempt, services.clock)
        : sendAttempt(context, forward, attempt);
      const answer = await sending.catch((error) => {
        release();
        throw error;
      });
      const latencyMs = services.clock() - started;
      if (record) record.upstreamMs += latencyMs;
      trace?.answered(answer.status);
      return answerReply(context, services, { attempt, answer, latencyMs, release });
    } catch (error) {
      if (record) record.upstreamMs += services.clock() - started;
      trace?.failed((error as AttemptFailure).kind ?? "error");
      if (!(error instanceof AttemptFailure)) throw error;
      if (error.backendOk === false) (failed ??= new Set()).add(backend.key);
      if (!tryAgain(context, forward, services, { attempt, error })) {
        const failure = new GatewayError(error.kind, { cause: error.cause });
        throw fail(services, context, {
          attempts: number,
          error: failure,
          sentBytes: error.sentBytes,
        });
      }
      absorbed(services, context, { attempt, error });
      const wait = backoffMs(number, egress.settings.backoff, () => egress.random());
      if (wait > 0) await sleep(wait, context);
    }
  }
}

/**
 * Every backend of the route is cold (its circuit open after failing in a row) and the egress is
 * set to `when_all_cold: refuse`: answered 503 at once with `Retry-After` until the first one is
 * tried again, rather than sending the request to a backend known to fail. The default, `try`,
 * fails open like Envoy's panic mode: a SOCKS instance dying mid-exchange looks to the gateway
 * exactly like its backend failing, so under `refuse` one dead instance could make a route's only
 * backend refuse every request for the cold period (seen in the at-most-once test).
 */
function circuitOpen(
  services: UpstreamServices,
  context: RequestContext,
  backends: readonly Backend[],
): Reply | undefined {
  if (services.egress.settings.negativeCache.whenAllCold !== "refuse") return undefined;
  const cache = services.egress.cache;
  let soonest = Infinity;
  for (const backend of backends) {
    if (!(backend.weight > 0)) continue;
    const coldFor = cache.coldForMs(backend.key);
    if (coldFor <= 0) return undefined;
    soonest = Math.min(soonest, coldFor);
  }
  if (soonest === Infinity) return undefined;
  const retryAfter = String(Math.max(1, Math.ceil(soonest / 1000)));
  services.log(
    `portcullis: warning: request ${context.requestId}: upstream_circuit_open: every backend ` +
      `is cold; the first is tried again in ${Math.ceil(soonest)} ms`,
  );
  return failureReply("upstream_circuit_open", context.requestId, {
    headers: { "retry-after": retryAfter },
  });
}

/**
 * Every backend of the route holds its `max_pending`: answered 503 at once, with a second's
 * `Retry-After`, rather than queued behind requests that are already waiting.
 */
function saturated(
  services: UpstreamServices,
  context: RequestContext,
  backends: readonly Backend[],
): Reply {
  const counts = backends.map((b) => `${b.authority} ${services.pending.count(b.key)}`).join(", ");
  services.log(
    `portcullis: warning: request ${context.requestId}: upstream_saturated: every backend holds ` +
      `its max_pending (${counts})`,
  );
  return failureReply("upstream_saturated", context.requestId, { headers: { "retry-after": "1" } });
}

/** The backends not in `failed`, or all of them when none is left. */
function untried(backends: readonly Backend[], failed: ReadonlySet<string> | undefined) {
  if (!failed) return backends;
  const left = backends.filter((backend) => !failed.has(backend.key));
  return left.length > 0 ? left : backends;
}

/**
 * The reply for an upstream's answer: its response streamed down (the attempt's outcome is told to
 * the egress when the body ends), or for a 101 the tunnel to splice.
 */
function answerReply(
  context: RequestContext,
  services: UpstreamServices,
  answered: { attempt: Attempt; answer: Answer; latencyMs: number; release: () => void },
): Reply {
  const { egress } = services;
  const { attempt: { way, backend }, answer, latencyMs, release } = answered;
  egress.idle.honour(answer.connection, answer.keepAlive);
  const finish = (ok: boolean) => {
    release(); // the max_pending slot is free once the answer has ended
    egress.finish(way, backend, { instanceOk: ok, backendOk: ok, latencyMs });
    if (!ok) services.log(`portcullis: request ${context.requestId}: upstream body aborted`);
  };
  const { owned, via: { clients: via } } = services.forwarding;
  if (answer.tunnel) {
    // The tunnel's bytes are opaque: its end is neither success nor failure of the instance.
    answer.tunnel.socket.once("close", () => finish(true));
    egress.holdTunnel(answer.tunnel.socket);
    if (context.upgrade!.head.byteLength > 0) answer.tunnel.socket.write(context.upgrade!.head);
    return {
      status: 101,
      rawHeaders: downstreamHeaders(answer.rawHeaders, context.requestId, {
        upgrade: true,
        via,
        owned,
      }),
      tunnel: answer.tunnel,
    };
  }
  return {
    status: answer.status,
    rawHeaders: downstreamHeaders(answer.rawHeaders, context.requestId, { via, owned }),
    stream: answer.stream(finish),
  };
}

/**
 * Tells the egress how a failed attempt went, and whether another may follow. Nothing written: any
 * method may go elsewhere. Something written: only a method the route lets be sent twice, and only
 * with its body still whole. Always within `attempts`, the retry budget, and while the request is
 * still wanted.
 */
function tryAgain(
  context: RequestContext,
  forward: Forward,
  services: UpstreamServices,
  failed: { attempt: Attempt; error: AttemptFailure },
): boolean {
  const { egress } = services;
  const { attempt, error } = failed;
  egress.finish(attempt.way, attempt.backend, {
    instanceOk: error.instanceOk,
    backendOk: error.backendOk,
    instanceDown: error.instanceDown,
  });
  const replayable = !error.bodyTaken && (!forward.hasBody || error.unsent);
  return (error.unsent || forward.eligible) && replayable && !deniedByDeno(error.cause) &&
    attempt.number < forward.action.attempts &&
    !context.aborted && egress.tryRetry();
}

/**
 * Logs, at info, a failed attempt a retry will absorb: the client never sees it, but an operator
 * reading why a backend went cold or a breaker opened must.
 */
function absorbed(
  services: UpstreamServices,
  context: RequestContext,
  failed: { attempt: Attempt; error: AttemptFailure },
): void {
  const { attempt, error } = failed;
  const cause = error.cause instanceof Error ? describeCause(error.cause) : "";
  const sent = error.unsent ? "nothing was sent" : `${error.sentBytes} request bytes were sent`;
  services.log(
    `portcullis: info: request ${context.requestId}: attempt ${attempt.number} via ` +
      `${attempt.way.label} to ${attempt.backend.authority}: ${error.kind} (${cause}); ${sent}; ` +
      "trying again",
  );
}

/** Logs why the upstream phase gave up, and returns the failure to throw. */
function fail(
  services: UpstreamServices,
  context: RequestContext,
  given: { attempts: number; error: GatewayError; detail?: string; sentBytes?: number },
): GatewayError {
  const { attempts, error, detail, sentBytes } = given;
  const cause = error.cause instanceof Error
    ? `${error.cause.name}: ${describeCause(error.cause)}`
    : detail ?? "";
  // Whether the last attempt's bytes may have reached the upstream: an operator reading
  // "unreachable" must know whether the upstream might have acted on the request anyway.
  const sent = sentBytes === undefined
    ? ""
    : sentBytes === 0
    ? "; nothing was sent"
    : `; ${sentBytes} request bytes were sent`;
  services.log(
    `portcullis: request ${context.requestId}: ${error.kind} after ${attempts} attempt(s): ` +
      `${cause}${sent}`,
  );
  return error;
}

/** An error's message, and its own cause's name and message when it has one. */
function describeCause(error: Error): string {
  const inner = error.cause instanceof Error
    ? ` (${error.cause.name}: ${error.cause.message})`
    : "";
  return `${error.message}${inner}`;
}

/** An HTTP/2 header list without its pseudo-headers (`:method`, `:path`, …), for HTTP/1.1. */
function withoutPseudo(raw: readonly string[]): string[] {
  const out: string[] = [];
  for (let i = 0; i < raw.length; i += 2) {
    if (!raw[i].startsWith(":")) out.push(raw[i], raw[i + 1]);
  }
  return out;
}

function sleep(ms: number, context: RequestContext): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(done, ms);
    const stop = context.onAbort(done);
    function done() {
      clearTimeout(timer);
      stop();
      resolve();
    }
  });
}
