/**
 * What a lane is to the pipeline: a descriptor (its name, its reach, its ledger defaults), a route
 * allowlist that is code, and the phases that serve what the allowlist does not name. Config may
 * narrow an allowlist, never widen it. A request neither the allowlist nor the lane's phases
 * answer gets a typed 404 denial.
 *
 * @module
 */
import type { LaneName } from "../ledger/lane_names.ts";
import type { RateBudget } from "../ledger/profile.ts";
import type { RequestContext } from "../request/context.ts";
import type { Reply } from "../request/reply.ts";
import type { Phase } from "./phase.ts";

/** A handler: answers a request, synchronously or not. */
export type LaneHandler<S> = (context: RequestContext, services: S) => Reply | Promise<Reply>;

/** One allowlisted route: exact path, listed methods. */
export interface LaneRoute<S> {
  /** The exact path the route answers. */
  readonly path: string;
  /** The methods it allows; any other gets 405. */
  readonly methods: readonly string[];
  /** What answers it. */
  readonly handle: LaneHandler<S>;
}

/**
 * A lane's built-in ledger numbers, used where the config says nothing.
 *
 * @internal
 */
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
  /** The lane's name, one of {@link LANE_NAMES}. */
  readonly name: LaneName;
  /** One line for `check` and the README. */
  readonly summary: string;
  /** `loopback_or_unix` lanes refuse to bind anything else. */
  readonly reach: "any" | "loopback_or_unix";
  /** The lane's ledger numbers where the config says nothing. */
  readonly defaults: LaneDefaults;
  /** The lane's allowlist: every route it serves itself. */
  readonly routes: readonly LaneRoute<S>[];
  /** The phases that serve what the allowlist does not name (the public lane's tenant dataplane). */
  readonly phases?: readonly Phase<S>[];
  /** Stops admitting when the gateway drains (the public lane). */
  readonly drains: boolean;
  /** The lane's plain-HTTP ACME http-01 companion listener, when it has one (the public lane). */
  readonly acme?: LaneDescriptor<S>;
  /**
   * Routes every request of the lane among the kept routes, answering the rest itself
   * (`local_health`: a Hono app, src/server/lane_router.ts). Without one, the allowlist is an exact
   * path and listed method, and what it does not name goes on to the lane's phases.
   */
  router?(routes: readonly LaneRoute<S>[]): LaneHandler<S>;
}

/**
 * A lane with its allowlist compiled (and narrowed by config).
 *
 * @internal
 */
export interface LaneTable<S> {
  readonly descriptor: LaneDescriptor<S>;
  /**
   * The route for `method path`, or undefined when the allowlist does not name it; with a
   * {@link LaneDescriptor.router}, the router, for every request.
   */
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
  if (descriptor.router) {
    const routed: LaneRoute<S> = {
      path: "*",
      methods: [],
      handle: descriptor.router([...byPath.values()]),
    };
    return { descriptor, paths: [...byPath.keys()], find: () => routed };
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
