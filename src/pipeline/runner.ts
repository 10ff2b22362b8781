/**
 * The runner: one lane's phases as a list, and the one loop that runs them. Per request it
 *
 * - on the public lane with an admin gate, first answers a gate hit, unobserved (admin_gate.ts):
 *   before the request id, the record and every phase, so nothing below ever sees one;
 * - starts the request's record (metrics, access log, trace) and closes it when the reply is over;
 * - runs the phases top to bottom — `admit`, `head`, `allowlist`, then the lane's own (the public
 *   lane's tenant dataplane) — opening and ending each phase's span; the first phase that answers
 *   decides the reply, a thrown {@link GatewayError} answers its kind, anything else is a logged 500;
 * - owns the deadline: a reply not started by the lane's deadline is a 503 (504 while waiting on an
 *   upstream) and a cancellation. Waiting replies are swept periodically (deadline_sweep.ts); a
 *   reply that arrives after its deadline is replaced at once;
 * - runs the response phase explicitly, whoever answered: the policies' headers (rate limit,
 *   security headers), no Strict-Transport-Security on plain HTTP (RFC 6797 §7.2), the request id,
 *   the counters, and whether the connection closes after the reply (a body left unread, a drain).
 *
 * A request nothing answered is a typed 404 (`route_not_allowed`). The transport (src/server/)
 * knows none of this: it hands each parsed request over as an {@link Arrival}.
 *
 * @module
 */
import type { LaneName } from "../ledger/lane_names.ts";
import type { Ledger } from "../ledger/ledger.ts";
import type { Reservation } from "../ledger/reservation.ts";
import type { Observer, RequestRecord } from "../observe/observer.ts";
import type { ResponseStats } from "../observe/response_stats.ts";
import { decorate } from "../policy/checks.ts";
import { ErrorPages } from "../request/error_pages.ts";
import { describeError, failureReply, GatewayError } from "../request/errors.ts";
import { carriesBody } from "../request/head.ts";
import type { Reply } from "../request/reply.ts";
import { requestIdFor } from "../request/request_id.ts";
import type { Arrival } from "../server/arrival.ts";
import type { ServerLimits } from "../server/lane_listener.ts";
import { withoutHsts } from "../server/plain_reply.ts";
import type { ReplyChannel } from "../server/reply_channel.ts";
import { type AdminGate, adminGateAnswer, withoutGateSegments } from "./admin_gate.ts";
import { DeadlineSweep, type Expiring } from "./deadline_sweep.ts";
import { Exchange } from "./exchange.ts";
import {
  admitPhase,
  allowlistPhase,
  fromTrustedPeer,
  headPhase,
  type LanePhaseServices,
} from "./lane_phases.ts";
import type { LaneTable } from "./lane_table.ts";
import type { Phase, PhaseOutcome } from "./phase.ts";

/**
 * What the runner needs from the edge.
 *
 * @internal
 */
export interface PipelineServices extends LanePhaseServices {
  readonly ledger: Ledger;
  readonly stats: ResponseStats;
  readonly state: { readonly draining: boolean; readonly admissionStopped: boolean };
  /** Where internal failures are reported. */
  readonly log: (line: string) => void;
  /** Metrics, access log and traces per request (absent: nothing is observed). */
  readonly observer?: Observer;
  /** The public lane's admin gate (`lanes.public.admin_gate`), when configured. */
  readonly adminGate?: AdminGate;
  /**
   * How failures read on the lanes a third party reaches (`errors`; absent: the minimal default).
   * `local_health` (loopback or a Unix socket, by the boot rule) keeps the envelope its tools read.
   */
  readonly errorPages?: ErrorPages;
}

/** A lane's pipeline, as the transport calls it. */
export interface Pipeline {
  /** The phase names, in order (for `check` and the tests). */
  readonly phases: readonly string[];
  /** Serves one request the transport parsed. */
  serve(arrival: Arrival): void;
  /** Stops the deadline sweep (the listener closed). */
  stop(): void;
}

/**
 * Builds the pipeline of one lane.
 *
 * @param lane the lane's compiled allowlist and descriptor (with its own phases, if any)
 * @param services the edge's services
 * @param limits the head checks' caps and path rules
 */
export function createPipeline<S extends PipelineServices>(
  lane: LaneTable<S>,
  services: S,
  limits: ServerLimits,
): Pipeline {
  const phases: Phase<S>[] = [
    admitPhase(lane.descriptor.drains),
    headPhase(limits),
    allowlistPhase(lane),
    ...(lane.descriptor.phases ?? []),
  ];
  return new Runner(lane, services, phases);
}

/**
 * How a lane's failures read: the operator's `errors` choice (absent: the minimal default), except
 * on `local_health` — loopback or a Unix socket by the boot rule — which keeps the envelope and the
 * request id the operator's tools read.
 */
export function errorPagesFor(
  lane: LaneName,
  services: Pick<PipelineServices, "errorPages">,
): ErrorPages {
  if (lane === "local_health") return ErrorPages.structured();
  return services.errorPages ?? ErrorPages.minimal();
}

class Runner<S extends PipelineServices> implements Pipeline {
  readonly #lane: LaneTable<S>;
  readonly #services: S;
  readonly #phases: readonly Phase<S>[];
  readonly #deadlines: DeadlineSweep;
  readonly #expireWaiting = (exchange: Exchange) => this.#expire(exchange);
  /** Answers an admin gate hit (public lane only); false for a miss. */
  readonly #adminGate?: (arrival: Arrival) => boolean;
  /** How this lane's failures read. */
  readonly #pages: ErrorPages;

  constructor(lane: LaneTable<S>, services: S, phases: readonly Phase<S>[]) {
    this.#lane = lane;
    this.#services = services;
    this.#phases = phases;
    const name = lane.descriptor.name;
    const profile = services.ledger.profile.lanes.find((p) => p.name === name)!;
    this.#deadlines = new DeadlineSweep(profile.deadlineMs, () => services.ledger.now());
    const gate = name === "public" ? services.adminGate : undefined;
    const drains = lane.descriptor.drains;
    if (gate) this.#adminGate = adminGateAnswer({ gate, services, lane: name, drains });
    this.#pages = errorPagesFor(name, services);
  }

  get phases(): readonly string[] {
    return this.#phases.map((phase) => phase.name);
  }

  serve(arrival: Arrival): void {
    // Above the record: a hit is never logged, counted by route or traced, whatever observes.
    if (this.#adminGate?.(arrival)) return;
    const requestId = requestIdFor(arrival.request.headers["x-request-id"]);
    const record = this.#observe(arrival, requestId);
    if (record) {
      this.#services.observer!.finishOnClose(record, arrival.ending.stream, arrival.ending.socket);
    }
    this.#run(new Exchange(this.#lane.descriptor.name, arrival, requestId, record), 0);
  }

  stop(): void {
    this.#deadlines.stop();
  }

  /** Runs the phases from `from` on until one answers; nothing answering is a typed 404. */
  #run(exchange: Exchange, from: number): void {
    const phases = this.#phases;
    for (let index = from; index < phases.length; index++) {
      const phase = phases[index];
      if (phase.applies && !phase.applies(exchange)) continue;
      const outcome = this.#step(phase, exchange);
      if (outcome === undefined) continue;
      if (outcome instanceof Promise) return this.#await(outcome, exchange, index + 1);
      return this.#respond(exchange, outcome);
    }
    this.#respond(exchange, failureReply("route_not_allowed", exchange.requestId));
  }

  /** Runs one phase inside its span; a throw becomes the reply it stands for. */
  #step(phase: Phase<S>, exchange: Exchange): PhaseOutcome | Promise<PhaseOutcome> {
    const span = phase.span ? exchange.record?.phase(phase.span) : undefined;
    let outcome: PhaseOutcome | Promise<PhaseOutcome>;
    try {
      outcome = phase.run(exchange, this.#services);
    } catch (error) {
      outcome = this.#errorReply(error, exchange);
    }
    if (span) {
      if (outcome instanceof Promise) outcome.then(() => span.end(), () => span.end());
      else span.end();
    }
    return outcome;
  }

  /** Waits on a phase under the lane's deadline, then answers or goes on with the next phase. */
  #await(pending: Promise<PhaseOutcome>, exchange: Exchange, next: number): void {
    const unwatch = this.#deadlines.add(new WaitingReply(exchange, this.#expireWaiting));
    pending.then(
      (outcome) => {
        unwatch();
        if (outcome !== undefined) return this.#respond(exchange, outcome);
        if (!exchange.aborted) return this.#run(exchange, next);
        // Aborted while it waited (deadline, client gone, body broken): nothing more is done.
        this.#respond(exchange, this.#abortReply(exchange));
      },
      (error) => {
        unwatch();
        // A body the parser gave up on is the client's fault, whatever the exchange said.
        const reply = exchange.bodyBroken
          ? failureReply("bad_request", exchange.requestId)
          : this.#errorReply(error, exchange);
        this.#respond(exchange, reply);
      },
    );
  }

  #abortReply(exchange: Exchange): Reply {
    return failureReply(
      exchange.bodyBroken ? "bad_request" : exchange.timeoutKind,
      exchange.requestId,
    );
  }

  /** Sends the reply a phase decided: refused before admission, or delivered after it. */
  #respond(exchange: Exchange, reply: Reply): void {
    const channel = exchange.channel;
    if (channel) return this.#deliver(exchange, channel, reply);
    this.#send(exchange, reply, (r, extra) => exchange.arrival.refuse(r, extra));
  }

  /** Delivers an admitted request's reply unless its deadline passed first. */
  #deliver(exchange: Exchange, channel: ReplyChannel, reply: Reply): void {
    const { ledger, stats, state } = this.#services;
    const { ticket, requestId } = exchange;
    if (channel.spent) return discard(reply);
    if (ticket.live && ticket.expired(ledger.now())) {
      ledger.expire(ticket);
      discard(reply);
      reply = failureReply("deadline_exceeded", requestId);
    }
    if (reply.failure === "route_not_allowed" || reply.failure === "no_route") {
      ledger.denyRoute(exchange.lane);
    }
    reply = responsePhase(exchange, reply);
    if (reply.withhold) {
      stats.withheld(exchange.lane);
      if (exchange.record) exchange.record.outcome ??= reply.failure ?? "withheld";
      if (reply.withhold === "drop") channel.destroy();
      else this.#hold(channel, ticket);
      return;
    }
    const close = bodyLeftUnread(exchange) ||
      (this.#lane.descriptor.drains && state.admissionStopped);
    this.#send(exchange, reply, (r, extra) => channel.send(r, extra, close));
  }

  /** The deadline passed while a phase was awaited: abort the wait, answer, cancel. */
  #expire(exchange: Exchange): void {
    const { channel, ticket } = exchange;
    if (!channel || channel.spent || !ticket.live) return;
    exchange.abort("deadline");
    this.#services.ledger.expire(ticket);
    const reply = responsePhase(exchange, failureReply(exchange.timeoutKind, exchange.requestId));
    this.#send(exchange, reply, (r, extra) => channel.send(r, extra));
  }

  /** Holds a connection unanswered until the lane's deadline, then closes it. */
  #hold(channel: ReplyChannel, ticket: Reservation): void {
    const expire = () => channel.destroy();
    const unwatch = this.#deadlines.add({ deadline: ticket.deadline, expire });
    channel.onAbandon(unwatch);
  }

  /** Counts and writes a reply through `write`, with the request id. */
  #send(
    exchange: Exchange,
    reply: Reply,
    write: (reply: Reply, extra: Record<string, string>) => void,
  ): void {
    if (!exchange.secure) reply = withoutHsts(reply);
    const record = exchange.record;
    if (record) {
      record.status = reply.status;
      if (reply.failure) record.outcome ??= reply.failure;
      record.responding = record.phase("portcullis.response");
    }
    const finished = this.#pages.finish(reply, exchange.requestId);
    write(finished.reply, finished.extra);
  }

  /**
   * Starts the request's record, when the edge observes requests. Only a trusted proxy's
   * `traceparent` is continued; anyone else's request starts a trace of its own.
   */
  #observe(arrival: Arrival, requestId: string): RequestRecord | undefined {
    const observer = this.#services.observer;
    if (!observer) return undefined;
    const request = arrival.request;
    const peer = request.socket?.remoteAddress ?? "";
    const traceparent = request.headers.traceparent;
    return observer.begin({
      lane: this.#lane.descriptor.name,
      requestId,
      method: request.method ?? "GET",
      target: request.url ?? "/",
      peer,
      bytesIn: Number(request.headers["content-length"]) || 0,
      scheme: arrival.tls ? "https" : "http",
      httpVersion: request.httpVersion,
      userAgent: request.headers["user-agent"],
      // Behind an admin gate, a near miss must not log most of a secret (admin_gate.ts).
      logPath: this.#adminGate ? withoutGateSegments : undefined,
      traceparent: typeof traceparent === "string" && fromTrustedPeer(peer, this.#services.trusted)
        ? traceparent
        : undefined,
    });
  }

  #errorReply(error: unknown, exchange: Exchange): Reply {
    if (error instanceof GatewayError) return failureReply(error.kind, exchange.requestId);
    this.#services.log(
      `portcullis: request ${exchange.requestId} failed internally: ${describeError(error)}`,
    );
    return failureReply("internal_error", exchange.requestId);
  }
}

/**
 * The response phase: whatever answered — a phase, a failure, the deadline — the reply carries the
 * headers the tenant's policies set (rate limit, security headers) and loses what they strip.
 */
function responsePhase(exchange: Exchange, reply: Reply): Reply {
  const { trail, policies } = exchange;
  return trail && policies ? decorate(reply, trail, policies.strip) : reply;
}

/**
 * True when the request's body is not (all) read: the connection is closed after the reply, the
 * only safe end for bytes nobody framed. A head refused before its framing was known counts too.
 */
function bodyLeftUnread(exchange: Exchange): boolean {
  const head = exchange.head as Exchange["head"] | undefined;
  if (head === undefined) return true;
  return carriesBody(head.body) && !exchange.request.complete;
}

/** Lets go of a reply that will not be sent: its stream or tunnel is closed. */
function discard(reply: Reply): void {
  reply.stream?.cancel();
  reply.tunnel?.socket.destroy();
}

/** A reply being awaited, as the deadline sweep sees it. */
class WaitingReply implements Expiring {
  readonly #exchange: Exchange;
  readonly #onExpire: (exchange: Exchange) => void;

  constructor(exchange: Exchange, onExpire: (exchange: Exchange) => void) {
    this.#exchange = exchange;
    this.#onExpire = onExpire;
  }

  get deadline(): number {
    return this.#exchange.ticket.deadline;
  }

  expire(): void {
    this.#onExpire(this.#exchange);
  }
}
