/**
 * What a lane is to the server: a descriptor (its name, its reach, its ledger defaults) and a route
 * allowlist that is code. Config may narrow an allowlist, never widen it. Everything outside the
 * allowlist gets a typed denial — except on a lane with a dataplane (public), whose remaining
 * requests go to the tenant dataplane.
 *
 * @module
 */
import type { IncomingHttpHeaders, IncomingMessage } from "node:http";
import type { Duplex } from "node:stream";
import type { FailureKind } from "../proxy/errors.ts";
import type { LaneName } from "../ledger/lane.ts";
import type { RateBudget } from "../ledger/profile.ts";
import type { Reservation } from "../ledger/reservation.ts";
import type { Reply } from "./reply.ts";
import type { RequestRecord } from "../observe/observer.ts";
import type { RequestHead } from "./request_head.ts";

/** One admitted request, as every handler sees it. */
export interface RequestContext {
  /** The lane fixed by the listener that accepted the connection. */
  readonly lane: LaneName;
  readonly head: RequestHead;
  readonly headers: IncomingHttpHeaders;
  readonly requestId: string;
  /** The direct peer's address ("" on a Unix socket). */
  readonly peer: string;
  /** The SNI name of a TLS connection, lower case; undefined on plain HTTP. */
  readonly serverName?: string;
  /** True when the listener that accepted the request speaks TLS. */
  readonly tls: boolean;
  /** True when the client's own connection is TLS: ours, or a trusted proxy's that says so. */
  readonly secure: boolean;
  /** The request's ledger reservation. */
  readonly ticket: Reservation;
  /** The request itself, for its body (read it only to forward it). */
  readonly request: IncomingMessage;
  /** True once the lane's deadline passed or the client went away. */
  readonly aborted: boolean;
  /** Calls `listener` once when the request is aborted; returns a function that unregisters it. */
  onAbort(listener: () => void): () => void;
  /** What the deadline answers with; a phase waiting on an upstream sets `upstream_timeout`. */
  timeoutKind: FailureKind;
  /**
   * Set by a phase whose headers every reply must carry (the tenant policies): the lane server
   * applies it to the reply it finally sends — the handler's, a failure, or the deadline's.
   */
  finishReply?: (reply: Reply) => Reply;
  /** Present on an `Upgrade` request: the client socket and the bytes read past the head. */
  readonly upgrade?: { readonly socket: Duplex; readonly head: Uint8Array };
  /** What is observed about the request (metrics, access log, trace). */
  readonly record?: RequestRecord;
}

/** A handler: answers a request, synchronously or not. */
export type LaneHandler<S> = (context: RequestContext, services: S) => Reply | Promise<Reply>;

/** One allowlisted route: exact path, listed methods. */
export interface LaneRoute<S> {
  readonly path: string;
  readonly methods: readonly string[];
  readonly handle: LaneHandler<S>;
}

/** A lane's built-in ledger numbers, used where the config says nothing. */
export interface LaneDefaults {
  readonly reserve: number;
  readonly footprint_bytes: number;
  readonly deadline_ms: number;
  readonly max_connections: number;
  readonly rate?: RateBudget;
  readonly rate_required?: boolean;
}

/** A lane: who may reach it, what it serves, what it costs. */
export interface LaneDescriptor<S> {
  readonly name: LaneName;
  /** One line for `check` and the README. */
  readonly summary: string;
  /** `loopback_or_unix` lanes refuse to bind anything else. */
  readonly reach: "any" | "loopback_or_unix";
  readonly defaults: LaneDefaults;
  readonly routes: readonly LaneRoute<S>[];
  /** Serves what the allowlist does not name (the public lane's tenant dataplane). */
  readonly dataplane?: LaneHandler<S>;
  /** Stops admitting when the gateway drains (the public lane). */
  readonly drains: boolean;
  /** The lane's plain-HTTP ACME http-01 companion listener, when it has one (the public lane). */
  readonly acme?: LaneDescriptor<S>;
}

/** A lane with its allowlist compiled (and narrowed by config). */
export interface LaneTable<S> {
  readonly descriptor: LaneDescriptor<S>;
  /** The route for `method path`, or undefined when the allowlist does not name it. */
  find(method: string, path: string): LaneRoute<S> | undefined;
  /** The allowed paths, for summaries. */
  readonly paths: readonly string[];
}

/**
 * Compiles a lane's allowlist, narrowed to `allow` when given.
 *
 * @param descriptor the lane
 * @param allow the paths the config keeps (each must be in the built-in allowlist)
 * @returns the table, or the config entries the lane does not allow
 */
export function compileLane<S>(
  descriptor: LaneDescriptor<S>,
  allow?: readonly string[],
): LaneTable<S> | { unknown: string[] } {
  const builtIn = new Set(descriptor.routes.map((route) => route.path));
  const unknown = (allow ?? []).filter((path) => !builtIn.has(path));
  if (unknown.length > 0) return { unknown };
  const kept = allow ? new Set(allow) : builtIn;
  const byPath = new Map<string, LaneRoute<S>>();
  for (const route of descriptor.routes) {
    if (kept.has(route.path)) byPath.set(route.path, route);
  }
  return {
    descriptor,
    paths: [...byPath.keys()],
    find(method, path) {
      const route = byPath.get(path);
      return route && route.methods.includes(method) ? route : undefined;
    },
  };
}
