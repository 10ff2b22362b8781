/**
 * How a failed upstream attempt is classified, the same for `node:http` exchanges (attempt.ts) and
 * owned ones (owned_attempt.ts): a {@link FailureKind} for the client, and the blame the rest of
 * the egress acts on — whether the SOCKS instance did its job (the pool and its breaker), whether
 * the backend did (the negative cache), and how many request bytes went out and whether the body
 * was taken (the retry rule). A refusal by the gateway's own rules or a missing `--allow-net` grant
 * blames neither, and is never retried on another instance.
 *
 * @module
 */
import { EgressRefusal } from "../egress/agents.ts";
import { DirectConnectError } from "../egress/direct_agent.ts";
import { instanceDown } from "../egress/egress.ts";
import { SocksError } from "../egress/socks5.ts";
import { UpstreamTlsError } from "../egress/upstream_tls.ts";
import type { FailureKind } from "../request/errors.ts";

/** An attempt that failed, classified. */
export class AttemptFailure extends Error {
  readonly kind: FailureKind;
  /**
   * For the pool: true when the SOCKS instance did its job (the destination failed); undefined
   * when the attempt says nothing about it (the client went away).
   */
  readonly instanceOk?: boolean;
  /** For the negative cache: false when the backend failed; undefined when it was not reached. */
  readonly backendOk?: boolean;
  /** True when no request byte was written to an upstream socket: a retry duplicates nothing. */
  readonly unsent: boolean;
  /** Request bytes (head and body) written to the upstream socket. */
  readonly sentBytes: number;
  /** True when request body bytes were consumed: the request cannot be replayed. */
  readonly bodyTaken: boolean;

  constructor(
    kind: FailureKind,
    cause: unknown,
    flags: {
      instanceOk: boolean | undefined;
      backendOk?: boolean;
      sentBytes: number;
      bodyTaken: boolean;
      instanceDown?: boolean;
    },
  ) {
    super(kind, { cause });
    this.kind = kind;
    this.instanceOk = flags.instanceOk;
    this.backendOk = flags.backendOk;
    this.sentBytes = flags.sentBytes;
    this.unsent = flags.sentBytes === 0;
    this.bodyTaken = flags.bodyTaken;
    this.instanceDown = flags.instanceDown === true;
  }

  /** The SOCKS instance could not be connected to at all: its breaker opens at once. */
  readonly instanceDown: boolean;
}

/**
 * Classifies a failed attempt for the pool, the retry rule and the client. What was sent is the
 * byte count, whatever the error's type: a connect error after bytes went out on another socket
 * (a client re-dialling underneath) must not pass for "nothing sent".
 */
export function classify(
  error: Error,
  connected: boolean,
  bodyTaken: boolean,
  sentBytes: number,
): AttemptFailure {
  if (error instanceof EgressRefusal || (error instanceof SocksError && error.kind === "refused")) {
    // The gateway's own rule refused the destination, before any dial or where the instance's
    // tunnel led: neither the instance nor the backend is to blame.
    return new AttemptFailure("upstream_unreachable", error, {
      instanceOk: true,
      sentBytes,
      bodyTaken,
    });
  }
  if (error instanceof SocksError) {
    const kind: FailureKind = error.kind === "timeout"
      ? "upstream_timeout"
      : "upstream_unreachable";
    const destination = error.blame === "destination";
    return new AttemptFailure(kind, error, {
      instanceOk: destination,
      backendOk: destination ? false : undefined,
      sentBytes,
      bodyTaken,
      instanceDown: instanceDown(error),
    });
  }
  if (error instanceof UpstreamTlsError) {
    // The tunnel or connection worked; the backend's certificate (or its demand for ours) did not.
    const blame = { instanceOk: true, backendOk: false, sentBytes, bodyTaken };
    return new AttemptFailure("upstream_tls", error, blame);
  }
  if (error instanceof DirectConnectError) {
    const kind: FailureKind = error.kind === "timeout"
      ? "upstream_timeout"
      : "upstream_unreachable";
    return new AttemptFailure(kind, error, {
      instanceOk: true,
      backendOk: false,
      sentBytes,
      bodyTaken,
    });
  }
  return new AttemptFailure(connected ? "upstream_failed" : "upstream_unreachable", error, {
    instanceOk: false,
    backendOk: connected ? false : undefined,
    sentBytes,
    bodyTaken,
  });
}

/**
 * An `https://` backend's refusal that arrives after the client's side of the handshake — under TLS
 * 1.3 a server's verdict on the client certificate comes as an alert on the first read — is still
 * the backend's TLS, not a broken exchange: `upstream_tls`, the backend charged. Bytes were
 * written, so the usual rule for a sent request still decides any retry.
 */
export function tlsAlert(failure: AttemptFailure): AttemptFailure {
  const cause = failure.cause;
  if (failure.kind !== "upstream_failed" || !(cause instanceof Error)) return failure;
  if (!/fatal alert|certificate/i.test(cause.message)) return failure;
  return new AttemptFailure("upstream_tls", cause, {
    instanceOk: true,
    backendOk: false,
    sentBytes: failure.sentBytes,
    bodyTaken: failure.bodyTaken,
  });
}

/**
 * The route's `first_byte_ms` ran out before the response head: a timeout charged to the backend,
 * and the request counted as sent (its head went out when the connection was ready).
 */
export function firstByteFailure(
  limit: number,
  done: { sentBytes: number; bodyTaken: boolean },
): AttemptFailure {
  return new AttemptFailure(
    "upstream_timeout",
    new Error(`No response head within first_byte_ms (${limit} ms)`),
    {
      instanceOk: true,
      backendOk: false,
      sentBytes: Math.max(1, done.sentBytes),
      bodyTaken: done.bodyTaken,
    },
  );
}

/**
 * The deadline passed or the client went: the attempt ends as a timeout. Only a deadline is a
 * verdict on the way out; a client that left (or broke its body) says nothing about the instance
 * or the backend, so neither is charged with it — clients walking away must not open a breaker.
 *
 * @param connected whether the connection to the destination was made
 */
export function abortedFailure(
  client: boolean,
  connected: boolean,
  done: { sentBytes: number; bodyTaken: boolean },
): AttemptFailure {
  const why = client ? "the client went away" : "the deadline passed";
  return new AttemptFailure("upstream_timeout", new Error(`Aborted: ${why}`), {
    instanceOk: client ? undefined : !connected,
    backendOk: client || !connected ? undefined : false,
    sentBytes: done.sentBytes,
    bodyTaken: done.bodyTaken,
  });
}

/**
 * A missing `--allow-net` grant, or a destination the egress refuses: retrying on another
 * instance cannot help.
 */
export function deniedByDeno(error: unknown): boolean {
  for (let e = error; e instanceof Error; e = e.cause) {
    if (e instanceof Deno.errors.NotCapable || e instanceof EgressRefusal) return true;
    if (e instanceof SocksError && e.kind === "refused") return true;
  }
  return false;
}
